-- check view: ncu_run_invariants
-- table: raw.ncu_runs
-- grain: one row per Nsight Compute run being validated
-- invariants: SCHEMA (the run row agrees with its launches and metrics; every launch has a row
-- per metric it reported; a launch has a duration exactly when its time state is ok)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with runs as (
    select run_id, source_format, layout, launch_count, untimed_launches, metric_rows
    from raw.ncu_runs
    where run_id in (select unnest($run_ids))
),

metric_counts as (
    select run_id, launch_idx, count(*) as metric_rows
    from raw.ncu_metrics
    where run_id in (select unnest($run_ids))
    group by run_id, launch_idx
),

launches as (
    select
        launches.run_id,
        launches.launch_idx,
        launches.metric_count,
        coalesce(metric_counts.metric_rows, 0) as metric_rows,
        launches.dur_ns,
        launches.time_state
    from raw.ncu_launches as launches
    left join metric_counts
        on metric_counts.run_id = launches.run_id
        and metric_counts.launch_idx = launches.launch_idx
    where launches.run_id in (select unnest($run_ids))
),

per_run as (
    select
        run_id,
        count(*) as launch_rows,
        count(*) filter (where dur_ns is null) as untimed_rows,
        sum(metric_rows) as metric_row_total,
        count(*) filter (where metric_count <> metric_rows) as launches_missing_metrics,
        count(*) filter (where (dur_ns is null) <> (time_state <> 'ok')) as time_state_mismatches
    from launches
    group by run_id
),

-- metric rows whose launch does not exist
orphans as (
    select metrics.run_id, count(*) as orphan_metric_rows
    from raw.ncu_metrics as metrics
    left join raw.ncu_launches as launches
        on launches.run_id = metrics.run_id and launches.launch_idx = metrics.launch_idx
    where metrics.run_id in (select unnest($run_ids)) and launches.run_id is null
    group by metrics.run_id
)

select
    runs.*,
    coalesce(per_run.launch_rows, 0) as launch_rows,
    coalesce(per_run.metric_row_total, 0) as metric_row_total,
    coalesce(per_run.launches_missing_metrics, 0) as launches_missing_metrics,
    coalesce(orphans.orphan_metric_rows, 0) as orphan_metric_rows,
    coalesce(runs.launch_count = coalesce(per_run.launch_rows, 0), false) as n1_launch_count_matches,
    coalesce(
        runs.metric_rows = coalesce(per_run.metric_row_total, 0)
        and coalesce(orphans.orphan_metric_rows, 0) = 0, false
    ) as n1_metric_rows_match,
    coalesce(per_run.launches_missing_metrics, 0) = 0 as n1_every_metric_has_a_row,
    coalesce(runs.untimed_launches = coalesce(per_run.untimed_rows, 0), false)
        as n1_untimed_count_matches,
    coalesce(per_run.time_state_mismatches, 0) = 0 as n1_time_state_matches
from runs
left join per_run on per_run.run_id = runs.run_id
left join orphans on orphans.run_id = runs.run_id
order by runs.run_id
