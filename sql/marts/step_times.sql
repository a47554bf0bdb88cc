-- name: marts.step_times
-- grain: one row per (run, step) of a kernel-trace run with ProfilerStep#N annotations
-- purpose: training step times (step N of ProfilerStep#N, its start and duration in integer ns) and, per job and step, the slowest rank's duration and which rank it was
-- incremental: run_id

-- job: null until the traces of one distributed job are ingested together (issue 20, item 2);
-- meanwhile each run is its own job, so slowest_rank is the run's own rank. The slowest rank of
-- a (job, step): the longest duration, ties to the lowest rank (as text), then run_id.
with steps as (
    select * from staging.trace_steps
),

runs as (
    select run_id, series from staging.runs
),

jobs as (
    select
        steps.run_id,
        runs.series,
        null::varchar as job,
        steps.rank,
        steps.step,
        steps.start_ns,
        steps.end_ns,
        steps.duration_ns,
        steps.annotations,
        coalesce(null::varchar, steps.run_id) as job_key
    from steps
    left join runs on runs.run_id = steps.run_id
)

select
    jobs.run_id,
    jobs.series,
    jobs.job,
    jobs.rank,
    jobs.step,
    jobs.start_ns,
    jobs.end_ns,
    jobs.duration_ns,
    jobs.duration_ns / 1000.0 as duration_us,
    jobs.annotations,
    first_value(jobs.rank) over (
        partition by jobs.job_key, jobs.step
        order by jobs.duration_ns desc, jobs.rank, jobs.run_id
        rows between unbounded preceding and unbounded following
    ) as slowest_rank,
    max(jobs.duration_ns) over (partition by jobs.job_key, jobs.step) as slowest_duration_ns
from jobs
