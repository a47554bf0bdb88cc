-- check view: profile_group_invariants
-- table: raw.profile_groups
-- grain: one row per (tile-profile run, kernel group)
-- invariants: P3, P4, P5, P6, P7, P8, P9
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with runs as (
    select run_id, clock_hz, tile_count as device_tile_count
    from raw.profile_runs
    where run_id in (select unnest($run_ids))
),

groups as (
    select
        run_id,
        group_idx,
        name,
        sample_count,
        tile_count,
        phase_cycles,
        phase_ms,
        work_cycles,
        average_active_tiles,
        useful_cycles,
        estimated_work_cycles,
        useful_utilization,
        work_lane_occupancy,
        device_useful_utilization,
        mean_cycles,
        p50_cycles,
        p95_cycles,
        maximum_cycles,
        first_offset,
        last_offset
    from raw.profile_groups
    where run_id in (select unnest($run_ids))
),

expected as (
    select
        groups.*,
        runs.clock_hz,
        runs.device_tile_count,
        groups.phase_cycles / runs.clock_hz * 1000 as expected_phase_ms,
        groups.work_cycles / groups.sample_count as expected_mean_cycles,
        groups.work_cycles / groups.phase_cycles as expected_average_active_tiles,
        case when groups.estimated_work_cycles <> 0
            then groups.useful_cycles / groups.estimated_work_cycles
        end as expected_useful_utilization,
        case when groups.estimated_work_cycles <> 0
            then groups.useful_cycles / (groups.phase_cycles * runs.device_tile_count)
        end as expected_device_useful_utilization
    from groups
    left join runs using (run_id)
)

select
    *,
    -- scaled error: |a - b| / max(1, |a|, |b|); NULL (undefined expected value) counts as infinite
    coalesce(
        abs(phase_ms - expected_phase_ms)
        / greatest(1.0, abs(phase_ms), abs(expected_phase_ms)),
        'infinity'::double
    ) as p3_phase_ms_error,
    coalesce(
        abs(mean_cycles - expected_mean_cycles)
        / greatest(1.0, abs(mean_cycles), abs(expected_mean_cycles)),
        'infinity'::double
    ) as p4_mean_cycles_error,
    coalesce(
        abs(average_active_tiles - expected_average_active_tiles)
        / greatest(1.0, abs(average_active_tiles), abs(expected_average_active_tiles)),
        'infinity'::double
    ) as p5_average_active_tiles_error,
    -- P6/P7 values are compared where both sides are defined; the *_null_* flags cover the rest
    abs(useful_utilization - expected_useful_utilization)
    / greatest(1.0, abs(useful_utilization), abs(expected_useful_utilization))
        as p6_useful_utilization_error,
    coalesce((estimated_work_cycles = 0) = (useful_utilization is null), false)
        as p6_null_exactly_when_no_estimate,
    abs(device_useful_utilization - expected_device_useful_utilization)
    / greatest(1.0, abs(device_useful_utilization), abs(expected_device_useful_utilization))
        as p7_device_useful_utilization_error,
    coalesce((device_useful_utilization is null) = (useful_utilization is null), false)
        as p7_null_together_with_p6,
    coalesce(p50_cycles <= p95_cycles and p95_cycles <= maximum_cycles, false)
        as p8_percentiles_ordered,
    coalesce(tile_count <= device_tile_count, false) as p8_tiles_within_device,
    coalesce(phase_cycles <= last_offset - first_offset, false) as p8_phase_within_span
from expected
order by run_id, group_idx
