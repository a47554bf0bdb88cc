-- name: marts.gpu_timeline
-- grain: one row per (run, device, step) of a kernel-trace run with GPU activity, plus one per (run, device) for the whole run (step null)
-- purpose: how the GPU spent the time: span (first GPU activity start to last end on the device), busy (union of the activity intervals), idle = span - busy, and the unions of compute, communication (NCCL/RCCL) and memory (memcpy/memset) activity and of communication overlapping compute, exact in integer ns
-- incremental: run_id

-- GPU activity: kernels, memcpy and memset (staging.trace_gpu_events, which classes them). A
-- step's activity is what the runtime calls inside ProfilerStep#N launched; activity without a
-- launch in a step counts for the whole run only. Each figure is the length of a union of
-- intervals (overlapping streams counted once): busy_ns of all activity, compute_ns,
-- communication_ns and memory_ns of each class; comm_compute_overlap_ns = communication_ns +
-- compute_ns - the union of both. The activities of a set are merged in the order of start, end
-- and file position (event_idx): a total order, so that two activities with the same start and
-- end always fall in one island (with ties left to the sort, the one counted later could open
-- an island of its own and be counted twice).
with gpu as (
    select * from staging.trace_gpu_events
),

runs as (
    select run_id, series, job from staging.runs
),

-- every activity in the whole run (step null) and in its step
grains as (
    select
        gpu.run_id,
        gpu.rank,
        gpu.device,
        null::bigint as step,
        gpu.kernel_class,
        gpu.event_idx,
        gpu.start_ns,
        gpu.end_ns,
        gpu.dur_ns
    from gpu
    union all
    select
        gpu.run_id,
        gpu.rank,
        gpu.device,
        gpu.step,
        gpu.kernel_class,
        gpu.event_idx,
        gpu.start_ns,
        gpu.end_ns,
        gpu.dur_ns
    from gpu
    where gpu.step is not null
),

-- the sets whose union lengths are measured: all activity, its class, compute + communication
sets as (
    select run_id, device, step, 'all' as set_name, event_idx, start_ns, end_ns
    from grains
    union all
    select run_id, device, step, kernel_class as set_name, event_idx, start_ns, end_ns
    from grains
    union all
    select run_id, device, step, 'comm_compute' as set_name, event_idx, start_ns, end_ns
    from grains
    where kernel_class in ('compute', 'communication')
),

ordered as (
    select
        run_id,
        device,
        step,
        set_name,
        event_idx,
        start_ns,
        end_ns,
        max(end_ns) over (
            partition by run_id, device, step, set_name
            order by start_ns, end_ns, event_idx
            rows between unbounded preceding and 1 preceding
        ) as reach_before
    from sets
),

islands as (
    select
        run_id,
        device,
        step,
        set_name,
        start_ns,
        end_ns,
        sum(case when reach_before is null or start_ns > reach_before then 1 else 0 end) over (
            partition by run_id, device, step, set_name
            order by start_ns, end_ns, event_idx
            rows unbounded preceding
        ) as island
    from ordered
),

spans as (
    select
        run_id,
        device,
        step,
        set_name,
        island,
        max(end_ns) - min(start_ns) as island_ns
    from islands
    group by run_id, device, step, set_name, island
),

unions as (
    select
        run_id,
        device,
        step,
        sum(island_ns) filter (where set_name = 'all') as busy_ns,
        coalesce(sum(island_ns) filter (where set_name = 'compute'), 0) as compute_ns,
        coalesce(sum(island_ns) filter (where set_name = 'communication'), 0) as communication_ns,
        coalesce(sum(island_ns) filter (where set_name = 'memory'), 0) as memory_ns,
        coalesce(sum(island_ns) filter (where set_name = 'comm_compute'), 0) as comm_compute_ns
    from spans
    group by run_id, device, step
),

totals as (
    select
        run_id,
        min(rank) as rank,
        device,
        step,
        count(*) as activities,
        count(*) filter (where kernel_class <> 'memory') as kernels,
        sum(dur_ns)::bigint as activity_ns,
        min(start_ns) as first_start_ns,
        max(end_ns) as last_end_ns
    from grains
    group by run_id, device, step
)

select
    totals.run_id,
    runs.series,
    runs.job,
    totals.rank,
    totals.device,
    totals.step,
    totals.activities,
    totals.kernels,
    totals.activity_ns,
    totals.first_start_ns,
    totals.last_end_ns,
    totals.last_end_ns - totals.first_start_ns as span_ns,
    unions.busy_ns::bigint as busy_ns,
    (totals.last_end_ns - totals.first_start_ns - unions.busy_ns)::bigint as idle_ns,
    unions.compute_ns::bigint as compute_ns,
    unions.communication_ns::bigint as communication_ns,
    unions.memory_ns::bigint as memory_ns,
    (unions.compute_ns + unions.communication_ns - unions.comm_compute_ns)::bigint
        as comm_compute_overlap_ns
from totals
inner join unions
    on unions.run_id = totals.run_id
    and unions.device is not distinct from totals.device
    and unions.step is not distinct from totals.step
left join runs on runs.run_id = totals.run_id
