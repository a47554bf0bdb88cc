-- name: staging.trace_steps
-- grain: one row per (run, step) of a kernel-trace run with ProfilerStep#N annotations
-- purpose: the training steps a trace recorded: step N of each ProfilerStep#N range on the CPU side (a user annotation, or an operator in older traces), its start and end in integer ns, with the run's series and label and, for a rank file of a distributed job, its job and world size
-- incremental: run_id

-- a step written more than once (on two threads) spans its first start to its last end
with marks as (
    select
        cpu.run_id,
        cpu.rank,
        try_cast(regexp_extract(cpu.name, '^ProfilerStep#([0-9]+)$', 1) as bigint) as step,
        cpu.start_ns,
        cpu.end_ns
    from staging.trace_cpu_events as cpu
    where cpu.kind in ('annotation', 'cpu_op') and cpu.name like 'ProfilerStep#%'
),

steps as (
    select
        marks.run_id,
        min(marks.rank) as rank,
        marks.step,
        min(marks.start_ns) as start_ns,
        max(marks.end_ns) as end_ns,
        max(marks.end_ns) - min(marks.start_ns) as duration_ns,
        count(*) as annotations
    from marks
    where marks.step is not null
    group by marks.run_id, marks.step
),

files as (
    select sha256, series, label from raw.files
),

-- the job the run is a rank file of (raw.trace_jobs; null: the run is its own job)
jobs as (
    select run_id, job, world_size from raw.trace_jobs
)

select
    steps.run_id,
    files.series,
    files.label,
    jobs.job,
    steps.rank,
    jobs.world_size,
    steps.step,
    steps.start_ns,
    steps.end_ns,
    steps.duration_ns,
    steps.annotations
from steps
left join files on files.sha256 = steps.run_id
left join jobs on jobs.run_id = steps.run_id
