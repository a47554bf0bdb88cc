-- name: marts.kernel_run_rollup (Spark override)
-- purpose: the part of kernel_run_rollup.sql that would change meaning when transpiled to Spark
-- base: d38e20a9a20f
-- unioned: union all by name -> a positional union of the same columns, named in one order
--   (the four branches list the same 25 columns)
-- trace_rollup, ncu_rollup: string_agg(distinct x, ',' order by x) -> the sorted distinct
--   values joined,
--   NULL when there are none (as string_agg); sqlglot's listagg(distinct …) within group
--   fails in Spark 4.3's distinct-aggregate rewrite beside the other aggregates
with trace_rollup as (
    select
        run_id,
        kernel,
        min(kernel_family) as kernel_family,
        cast(null as string) as kernel_arch,
        cast(null as string) as kernel_tile,
        cast(null as string) as kernel_precision,
        cast(1 as bigint) as raw_names,
        cast(sum(calls) as bigint) as calls,
        sum(total_ns) / 1000.0 as total_us,
        sum(total_ns) / 1000.0 / nullif(sum(calls), 0) as mean_us,
        cast(null as double) as p50_us,
        cast(null as double) as p95_us,
        max(max_ns) / 1000.0 as max_us,
        cast(null as double) as useful_utilization,
        cast(null as double) as device_useful_utilization,
        cast(null as double) as work_lane_occupancy,
        cast(null as double) as average_active_tiles,
        cast(null as bigint) as tiles,
        cast(null as bigint) as signatures,
        cast(null as bigint) as samples_in_file,
        cast(null as double) as tile_imbalance,
        device,
        case when count(stream) = 0 then null
             else array_join(array_sort(collect_set(stream)), ',') end as streams,
        case when count(rank) = 0 then null
             else array_join(array_sort(collect_set(rank)), ',') end as ranks,
        cast(sum(total_ns) as bigint) as total_ns
    from staging.trace_kernels
    group by run_id, device, kernel
),

ncu_rollup as (
    select
        run_id,
        kernel,
        min(kernel_family) as kernel_family,
        cast(null as string) as kernel_arch,
        cast(null as string) as kernel_tile,
        cast(null as string) as kernel_precision,
        count(distinct coalesce(function_name, kernel)) as raw_names,
        cast(count(*) as bigint) as calls,
        sum(dur_ns) / 1000.0 as total_us,
        sum(dur_ns) / 1000.0 / nullif(count(dur_ns), 0) as mean_us,
        cast(null as double) as p50_us,
        cast(null as double) as p95_us,
        max(dur_ns) / 1000.0 as max_us,
        cast(null as double) as useful_utilization,
        cast(null as double) as device_useful_utilization,
        cast(null as double) as work_lane_occupancy,
        cast(null as double) as average_active_tiles,
        cast(null as bigint) as tiles,
        cast(null as bigint) as signatures,
        cast(null as bigint) as samples_in_file,
        cast(null as double) as tile_imbalance,
        device,
        case when count(stream) = 0 then null
             else array_join(array_sort(collect_set(cast(stream as string))), ',') end
            as streams,
        cast(null as string) as ranks,
        cast(sum(dur_ns) as bigint) as total_ns
    from staging.ncu_launches
    group by run_id, device, kernel
),

unioned as (
    select
        run_id, kernel, kernel_family, kernel_arch, kernel_tile, kernel_precision, raw_names,
        calls, total_us, mean_us, p50_us, p95_us, max_us, useful_utilization,
        device_useful_utilization, work_lane_occupancy, average_active_tiles, tiles, signatures,
        samples_in_file, tile_imbalance, device, streams, ranks, total_ns
    from profile_rollup
    union all
    select
        run_id, kernel, kernel_family, kernel_arch, kernel_tile, kernel_precision, raw_names,
        calls, total_us, mean_us, p50_us, p95_us, max_us, useful_utilization,
        device_useful_utilization, work_lane_occupancy, average_active_tiles, tiles, signatures,
        samples_in_file, tile_imbalance, device, streams, ranks, total_ns
    from audit_rollup
    union all
    select
        run_id, kernel, kernel_family, kernel_arch, kernel_tile, kernel_precision, raw_names,
        calls, total_us, mean_us, p50_us, p95_us, max_us, useful_utilization,
        device_useful_utilization, work_lane_occupancy, average_active_tiles, tiles, signatures,
        samples_in_file, tile_imbalance, device, streams, ranks, total_ns
    from trace_rollup
    union all
    select
        run_id, kernel, kernel_family, kernel_arch, kernel_tile, kernel_precision, raw_names,
        calls, total_us, mean_us, p50_us, p95_us, max_us, useful_utilization,
        device_useful_utilization, work_lane_occupancy, average_active_tiles, tiles, signatures,
        samples_in_file, tile_imbalance, device, streams, ranks, total_ns
    from ncu_rollup
)

select * from model
