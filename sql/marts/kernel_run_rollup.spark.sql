-- name: marts.kernel_run_rollup (Spark override)
-- purpose: the part of kernel_run_rollup.sql that would change meaning when transpiled to Spark
-- base: c4904f3f2b3a
-- unioned: union all by name -> a positional union of the same columns, named in one order
--   (the three branches list the same 25 columns)
with unioned as (
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
)

select * from model
