-- name: staging.profile_kernels
-- grain: one row per (run, kernel group) of a tile profile
-- purpose: typed, microsecond-converted kernel aggregates of tile profiles, with the parsed kernel name
-- incremental: run_id
with groups as (
    select * from raw.profile_groups
),

runs as (
    select run_id, clock_hz, tile_count from raw.profile_runs
),

distinct_names as (
    select distinct name from groups
),

parsed as (
    select name, pwh_kernel_name(name) as parts from distinct_names
),

names as (
    select
        name,
        parts.short as kernel,
        parts.family as kernel_family,
        parts.arch as kernel_arch,
        parts.tile as kernel_tile,
        parts.precision as kernel_precision
    from parsed
)

select
    groups.run_id,
    groups.group_idx,
    groups.name as kernel_name,
    names.kernel,
    names.kernel_family,
    names.kernel_arch,
    names.kernel_tile,
    names.kernel_precision,
    groups.sample_count as calls,
    groups.tile_count as tiles,
    groups.phase_count as phases,
    groups.phase_cycles,
    groups.work_cycles,
    groups.useful_cycles,
    groups.estimated_work_cycles,
    groups.phase_cycles::double / runs.clock_hz * 1e6 as total_us,
    groups.work_cycles::double / runs.clock_hz * 1e6 as work_us,
    groups.mean_cycles / runs.clock_hz * 1e6 as mean_us,
    groups.p50_cycles::double / runs.clock_hz * 1e6 as p50_us,
    groups.p95_cycles::double / runs.clock_hz * 1e6 as p95_us,
    groups.maximum_cycles::double / runs.clock_hz * 1e6 as max_us,
    groups.first_offset::double / runs.clock_hz * 1e6 as first_offset_us,
    groups.last_offset::double / runs.clock_hz * 1e6 as last_offset_us,
    groups.useful_utilization,
    groups.device_useful_utilization,
    groups.work_lane_occupancy,
    groups.average_active_tiles,
    groups.average_active_tiles / runs.tile_count as active_tile_fraction,
    runs.tile_count as device_tiles,
    runs.clock_hz
from groups
inner join runs on runs.run_id = groups.run_id
left join names on names.name = groups.name
