-- name: marts.kernel_run_rollup
-- grain: one row per (run, kernel) for tile profiles and conv audits, per (run, device, kernel) for kernel traces: every source format in one fact table
-- purpose: per-run kernel time, calls, share of the run, utilisation/occupancy, percentiles and tile imbalance
-- incremental: run_id
with runs as (
    select * from staging.runs
),

profile_kernels as (
    select * from staging.profile_kernels
),

samples as (
    select * from staging.profile_samples
),

tile_busy as (
    select run_id, kernel, physical_tile, sum(duration_cycles) as busy_cycles
    from samples
    group by run_id, kernel, physical_tile
),

imbalance as (
    select
        run_id,
        kernel as kernel_name,
        max(busy_cycles) / avg(busy_cycles) as tile_imbalance,
        count(*) as imbalance_tiles,
        sum(busy_cycles) as sampled_cycles
    from tile_busy
    group by run_id, kernel
),

profile_sample_counts as (
    select run_id, kernel as kernel_name, count(*) as samples_in_file
    from samples
    group by run_id, kernel
),

profile_rollup as (
    select
        pk.run_id,
        pk.kernel,
        any_value(pk.kernel_family) as kernel_family,
        any_value(pk.kernel_arch) as kernel_arch,
        any_value(pk.kernel_tile) as kernel_tile,
        any_value(pk.kernel_precision) as kernel_precision,
        count(*) as raw_names,
        sum(pk.calls)::bigint as calls,
        sum(pk.total_us) as total_us,
        sum(pk.work_us) / sum(pk.calls) as mean_us,
        max(pk.p50_us) as p50_us,
        max(pk.p95_us) as p95_us,
        max(pk.max_us) as max_us,
        sum(pk.useful_cycles) / nullif(sum(pk.estimated_work_cycles), 0) as useful_utilization,
        sum(pk.useful_cycles) filter (where pk.device_useful_utilization is not null)
            / nullif(sum(pk.phase_cycles::double * pk.device_tiles)
                filter (where pk.device_useful_utilization is not null), 0)
            as device_useful_utilization,
        sum(pk.work_lane_occupancy * pk.work_cycles)
            / nullif(sum(pk.work_cycles) filter (where pk.work_lane_occupancy is not null), 0)
            as work_lane_occupancy,
        sum(pk.work_cycles)::double / nullif(sum(pk.phase_cycles), 0) as average_active_tiles,
        max(pk.tiles) as tiles,
        null::bigint as signatures,
        sum(coalesce(sc.samples_in_file, 0))::bigint as samples_in_file,
        max(im.tile_imbalance) as tile_imbalance
    from profile_kernels as pk
    left join profile_sample_counts as sc
        on sc.run_id = pk.run_id and sc.kernel_name = pk.kernel_name
    left join imbalance as im
        on im.run_id = pk.run_id and im.kernel_name = pk.kernel_name
    group by pk.run_id, pk.kernel
),

audit_rollup as (
    select
        run_id,
        kernel,
        any_value(kernel_family) as kernel_family,
        any_value(kernel_arch) as kernel_arch,
        any_value(kernel_tile) as kernel_tile,
        any_value(kernel_precision) as kernel_precision,
        count(distinct kernel_name) as raw_names,
        count(*) as calls,
        sum(duration_us) as total_us,
        avg(duration_us) as mean_us,
        null::double as p50_us,
        null::double as p95_us,
        null::double as max_us,
        null::double as useful_utilization,
        null::double as device_useful_utilization,
        null::double as work_lane_occupancy,
        null::double as average_active_tiles,
        null::bigint as tiles,
        count(distinct row_idx) as signatures,
        null::bigint as samples_in_file,
        null::double as tile_imbalance
    from staging.audit_kernels
    group by run_id, kernel
),

trace_rollup as (
    select
        run_id,
        kernel,
        any_value(kernel_family) as kernel_family,
        null::varchar as kernel_arch,
        null::varchar as kernel_tile,
        null::varchar as kernel_precision,
        1::bigint as raw_names,
        sum(calls)::bigint as calls,
        sum(total_ns) / 1000.0 as total_us,
        sum(total_ns) / 1000.0 / nullif(sum(calls), 0) as mean_us,
        null::double as p50_us,
        null::double as p95_us,
        max(max_ns) / 1000.0 as max_us,
        null::double as useful_utilization,
        null::double as device_useful_utilization,
        null::double as work_lane_occupancy,
        null::double as average_active_tiles,
        null::bigint as tiles,
        null::bigint as signatures,
        null::bigint as samples_in_file,
        null::double as tile_imbalance,
        device,
        string_agg(distinct stream, ',' order by stream) as streams,
        string_agg(distinct rank, ',' order by rank) as ranks,
        sum(total_ns)::bigint as total_ns
    from staging.trace_kernels
    group by run_id, device, kernel
),

unioned as (
    select * from profile_rollup
    union all by name
    select * from audit_rollup
    union all by name
    select * from trace_rollup
)

select
    unioned.run_id,
    runs.series,
    runs.label,
    runs.captured_at,
    runs.source_format,
    unioned.kernel,
    unioned.kernel_family,
    unioned.kernel_arch,
    unioned.kernel_tile,
    unioned.kernel_precision,
    unioned.raw_names,
    unioned.calls,
    unioned.total_us,
    unioned.total_us / sum(unioned.total_us) over (partition by unioned.run_id) as share_of_run,
    row_number() over (
        partition by unioned.run_id
        order by unioned.total_us desc, unioned.kernel, unioned.device nulls first
    ) as rank_in_run,
    unioned.mean_us,
    unioned.p50_us,
    unioned.p95_us,
    unioned.max_us,
    unioned.useful_utilization,
    unioned.device_useful_utilization,
    unioned.work_lane_occupancy,
    unioned.average_active_tiles,
    unioned.tiles,
    unioned.signatures,
    unioned.samples_in_file,
    unioned.tile_imbalance,
    runs.check_status,
    unioned.device,
    unioned.streams,
    unioned.ranks,
    unioned.total_ns
from unioned
inner join runs on runs.run_id = unioned.run_id
order by unioned.run_id, rank_in_run
