-- check view: profile_run_invariants
-- table: raw.profile_runs
-- grain: one row per tile-profile run
-- invariants: P1, P2 (and a warning when a file carries more samples than sampleCount)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with runs as (
    select
        run_id,
        clock_hz,
        tile_count,
        sample_count,
        matched_sample_count,
        samples_in_file,
        profile_span_cycles,
        profile_span_ms
    from raw.profile_runs
    where run_id in (select unnest($run_ids))
),

group_samples as (
    select
        run_id,
        count(*) as group_count,
        sum(sample_count) as group_sample_count
    from raw.profile_groups
    where run_id in (select unnest($run_ids))
    group by run_id
),

joined as (
    select
        runs.*,
        runs.profile_span_cycles / runs.clock_hz * 1000 as expected_span_ms,
        coalesce(group_samples.group_count, 0) as group_count,
        coalesce(group_samples.group_sample_count, 0) as group_sample_count
    from runs
    left join group_samples using (run_id)
)

select
    *,
    -- scaled error: |a - b| / max(1, |a|, |b|); NULL (division by zero) counts as infinite
    coalesce(
        abs(profile_span_ms - expected_span_ms)
        / greatest(1.0, abs(profile_span_ms), abs(expected_span_ms)),
        'infinity'::double
    ) as p1_span_ms_error,
    coalesce(group_sample_count = matched_sample_count, false) as p2_groups_sum_to_matched,
    coalesce(matched_sample_count <= sample_count, false) as p2_matched_within_sample_count,
    coalesce(samples_in_file <= sample_count, false) as samples_in_file_within_sample_count
from joined
order by run_id
