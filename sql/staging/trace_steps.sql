-- name: staging.trace_steps
-- grain: one row per (run, step) of a kernel-trace run with ProfilerStep#N annotations
-- purpose: the training steps a trace recorded: step N of each ProfilerStep#N range on the CPU side (a user annotation, or an operator in older traces), its start and end in integer ns
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
)

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
