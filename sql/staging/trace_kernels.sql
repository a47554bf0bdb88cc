-- name: staging.trace_kernels
-- grain: one row per (run, device, stream, rank, kernel) of a kernel-trace run (Kineto, Nsight Systems, rocprof)
-- purpose: exact kernel calls and integer-ns kernel time from trace events (or the tool's per-kernel summary when the file is aggregated), with the normalised kernel family
-- incremental: run_id
with trace_runs as (
    select run_id, source_format, tool, tool_version, aggregated
    from raw.trace_runs
),

kernel_events as (
    select
        events.run_id,
        events.device,
        events.stream,
        events.rank,
        events.name,
        events.start_ns,
        events.dur_ns
    from raw.trace_events as events
    where events.kind = 'kernel'
),

event_kernels as (
    select
        run_id,
        device,
        stream,
        rank,
        name as kernel,
        count(*) as calls,
        sum(dur_ns)::bigint as total_ns,
        min(dur_ns) as min_ns,
        max(dur_ns) as max_ns,
        min(start_ns) as first_start_ns,
        max(start_ns + dur_ns) as last_end_ns,
        false as from_summary
    from kernel_events
    group by run_id, device, stream, rank, name
),

summary_kernels as (
    select
        summaries.run_id,
        summaries.device,
        null::varchar as stream,
        null::varchar as rank,
        summaries.name as kernel,
        sum(summaries.calls)::bigint as calls,
        sum(summaries.total_ns)::bigint as total_ns,
        min(summaries.min_ns) as min_ns,
        max(summaries.max_ns) as max_ns,
        null::bigint as first_start_ns,
        null::bigint as last_end_ns,
        true as from_summary
    from raw.trace_kernel_summaries as summaries
    group by summaries.run_id, summaries.device, summaries.name
),

unioned as (
    select event_kernels.*
    from event_kernels
    inner join trace_runs on trace_runs.run_id = event_kernels.run_id
    where not trace_runs.aggregated
    union all
    select summary_kernels.*
    from summary_kernels
    inner join trace_runs on trace_runs.run_id = summary_kernels.run_id
    where trace_runs.aggregated
),

distinct_names as (
    select distinct kernel from unioned
),

families as (
    select kernel, pwh_kernel_family(kernel) as kernel_family
    from distinct_names
)

select
    unioned.run_id,
    trace_runs.source_format,
    trace_runs.tool,
    trace_runs.tool_version,
    unioned.device,
    unioned.stream,
    unioned.rank,
    unioned.kernel,
    families.kernel_family,
    unioned.calls,
    unioned.total_ns,
    unioned.total_ns / 1000.0 as total_us,
    unioned.min_ns,
    unioned.max_ns,
    unioned.first_start_ns,
    unioned.last_end_ns,
    unioned.from_summary
from unioned
inner join trace_runs on trace_runs.run_id = unioned.run_id
left join families on families.kernel = unioned.kernel
