-- name: staging.trace_gpu_events
-- grain: one row per GPU activity (kernel, memcpy, memset) of a kernel-trace run
-- purpose: each GPU activity with its class (compute, communication, memory), the runtime call that launched it (same correlation id), the innermost CPU operator enclosing that call and the training step the call lies in
-- incremental: run_id

-- launch: the runtime call of the run with the activity's correlation id (the first in the file
-- when several share it); op: the innermost operator enclosing that call on its thread
-- (staging.trace_cpu_events; null where the thread's operators are not properly nested); step:
-- the ProfilerStep#N with the latest start at or before the call's start, when the call starts
-- before that step's end. communication: a kernel whose name starts with nccl, rccl or msccl
-- (any case), also after 'void ' (a templated kernel's demangled name, e.g. NCCL's and NCCLX's
-- 'void ncclKernel<...>(...)'); memory: memcpy and memset; compute: every other kernel.
-- A run whose GPU times cannot be summed in bigint ns has no rows here (its checks fail it).
with gpu as (
    select
        events.run_id,
        events.event_idx,
        events.kind,
        events.name,
        events.device,
        events.stream,
        events.rank,
        events.correlation,
        events.start_ns,
        events.dur_ns
    from raw.trace_events as events
    where events.kind in ('kernel', 'memcpy', 'memset')
),

runs_that_fit as (
    select run_id
    from gpu
    group by run_id
    having
        min(dur_ns) >= 0
        and max(start_ns::decimal(38, 0) + dur_ns::decimal(38, 0)) <= 9223372036854775807
        and max(start_ns::decimal(38, 0) + dur_ns::decimal(38, 0)) - min(start_ns)
        <= 9223372036854775807
        and sum(dur_ns::decimal(38, 0)) <= 9223372036854775807
),

cpu as (
    select * from staging.trace_cpu_events
),

runtime as (
    select
        events.run_id,
        events.event_idx,
        events.correlation
    from raw.trace_events as events
    where events.kind = 'runtime' and events.correlation is not null
),

first_launch as (
    select run_id, correlation, min(event_idx) as launch_idx
    from runtime
    group by run_id, correlation
),

launches as (
    select
        first_launch.run_id,
        first_launch.correlation,
        cpu.event_idx as launch_idx,
        cpu.start_ns as launch_start_ns,
        cpu.parent_op_idx as op_idx,
        cpu.parent_op as op
    from first_launch
    inner join cpu
        on cpu.run_id = first_launch.run_id
        and cpu.event_idx = first_launch.launch_idx
),

-- steps by start (two steps starting at the same ns: the longer one, then the higher N)
ranked_steps as (
    select
        trace_steps.run_id,
        trace_steps.start_ns,
        trace_steps.end_ns,
        trace_steps.step,
        row_number() over (
            partition by trace_steps.run_id, trace_steps.start_ns
            order by trace_steps.end_ns desc, trace_steps.step desc
        ) as rn
    from staging.trace_steps as trace_steps
),

steps as (
    select run_id, start_ns, end_ns, step
    from ranked_steps
    where rn = 1
),

timeline as (
    select run_id, start_ns as t, 0 as is_launch, start_ns as step_start, null::bigint as launch_idx
    from steps
    union all
    select run_id, launch_start_ns as t, 1 as is_launch, null::bigint as step_start, launch_idx
    from launches
),

carried as (
    select
        timeline.run_id,
        timeline.launch_idx,
        timeline.is_launch,
        max(timeline.step_start) over (
            partition by timeline.run_id
            order by timeline.t, timeline.is_launch
            rows between unbounded preceding and current row
        ) as step_start
    from timeline
),

launch_steps as (
    select
        launches.*,
        steps.step
    from launches
    left join carried
        on carried.run_id = launches.run_id
        and carried.launch_idx = launches.launch_idx
        and carried.is_launch = 1
    left join steps
        on steps.run_id = carried.run_id
        and steps.start_ns = carried.step_start
        and launches.launch_start_ns < steps.end_ns
)

select
    gpu.run_id,
    gpu.event_idx,
    gpu.kind,
    gpu.name,
    gpu.device,
    gpu.stream,
    gpu.rank,
    case
        when gpu.kind in ('memcpy', 'memset') then 'memory'
        when lower(gpu.name) like 'nccl%' or lower(gpu.name) like 'rccl%'
            or lower(gpu.name) like 'msccl%' or lower(gpu.name) like 'void nccl%'
            or lower(gpu.name) like 'void rccl%' or lower(gpu.name) like 'void msccl%'
            then 'communication'
        else 'compute'
    end as kernel_class,
    gpu.correlation,
    gpu.start_ns,
    gpu.dur_ns,
    gpu.start_ns + gpu.dur_ns as end_ns,
    launch_steps.launch_idx,
    launch_steps.launch_start_ns,
    launch_steps.op_idx,
    launch_steps.op,
    launch_steps.step
from gpu
inner join runs_that_fit on runs_that_fit.run_id = gpu.run_id
left join launch_steps
    on launch_steps.run_id = gpu.run_id
    and launch_steps.correlation = gpu.correlation
