-- check view: profile_sample_invariants
-- table: raw.profile_samples
-- grain: one row per (tile-profile run, sample)
-- invariants: P10
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with runs as (
    select run_id, tile_count as device_tile_count
    from raw.profile_runs
    where run_id in (select unnest($run_ids))
),

groups as (
    -- one row per kernel name (names are unique per run: the raw.profile_groups suite checks it)
    select
        run_id,
        name as kernel,
        min(first_offset) as first_offset,
        max(last_offset) as last_offset
    from raw.profile_groups
    where run_id in (select unnest($run_ids))
    group by run_id, name
),

samples as (
    select run_id, sample_idx, physical_tile, offset_cycles, duration_cycles, kernel
    from raw.profile_samples
    where run_id in (select unnest($run_ids))
)

select
    samples.*,
    runs.device_tile_count,
    groups.first_offset,
    groups.last_offset,
    groups.kernel is not null as p10_kernel_names_a_group,
    coalesce(
        samples.physical_tile >= 0 and samples.physical_tile < runs.device_tile_count, false
    ) as p10_tile_within_device,
    -- NULL when the kernel names no group: that row already fails p10_kernel_names_a_group
    groups.first_offset <= samples.offset_cycles as p10_starts_after_group_first_offset,
    samples.offset_cycles + samples.duration_cycles <= groups.last_offset
        as p10_ends_before_group_last_offset
from samples
left join runs using (run_id)
left join groups using (run_id, kernel)
order by samples.run_id, samples.sample_idx
