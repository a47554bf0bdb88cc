-- name: marts.step_times
-- grain: one row per (run, step) of a kernel-trace run with ProfilerStep#N annotations
-- purpose: training step times (step N of ProfilerStep#N, its start and duration in integer ns) and, per job and step, the slowest rank's duration and which rank it was
-- incremental: series

-- job: the distributed job the run is a rank file of (raw.trace_jobs: pwh ingest --job, a
-- sidecar's job, or a folder of rank files; docs/formats.md), null for a run ingested alone:
-- such a run is its own job, so its slowest_rank is its own rank. A job is named within its
-- series and label (the same name under another label is another job), so a (job, step) lies
-- within one series and the model is rebuilt by series. The slowest rank of a (job, step): the longest duration, ties
-- to the lowest rank (as text), then run_id; job_ranks: the job's ranks that recorded the step
-- (a job may hold only some of its world_size ranks).
with steps as (
    select * from staging.trace_steps
),

jobs as (
    select
        steps.run_id,
        steps.series,
        steps.label,
        steps.job,
        steps.rank,
        steps.world_size,
        steps.step,
        steps.start_ns,
        steps.end_ns,
        steps.duration_ns,
        steps.annotations,
        coalesce(steps.job, steps.run_id) as job_key
    from steps
)

select
    jobs.run_id,
    jobs.series,
    jobs.label,
    jobs.job,
    jobs.rank,
    jobs.world_size,
    jobs.step,
    jobs.start_ns,
    jobs.end_ns,
    jobs.duration_ns,
    jobs.duration_ns / 1000.0 as duration_us,
    jobs.annotations,
    first_value(jobs.rank) over (
        partition by jobs.series, jobs.label, jobs.job_key, jobs.step
        order by jobs.duration_ns desc, jobs.rank, jobs.run_id
        rows between unbounded preceding and unbounded following
    ) as slowest_rank,
    first_value(jobs.run_id) over (
        partition by jobs.series, jobs.label, jobs.job_key, jobs.step
        order by jobs.duration_ns desc, jobs.rank, jobs.run_id
        rows between unbounded preceding and unbounded following
    ) as slowest_run_id,
    max(jobs.duration_ns) over (
        partition by jobs.series, jobs.label, jobs.job_key, jobs.step
    ) as slowest_duration_ns,
    count(*) over (partition by jobs.series, jobs.label, jobs.job_key, jobs.step) as job_ranks
from jobs
