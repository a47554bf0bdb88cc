-- name: staging.trace_kernels
-- grain: one row per (run, device, stream, rank, kernel) of a kernel-trace run (Kineto, Nsight Systems, rocprof)
-- purpose: exact kernel calls and integer-ns kernel time from trace events (or the tool's per-kernel summary when the file is aggregated), with the normalised kernel family
-- incremental: run_id

-- a run whose times cannot be summed in bigint ns (a negative duration, an end past bigint,
-- a kernel time or time range over bigint) has no rows here: its checks fail it
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

-- every sum and end in decimal(38, 0) (hugeint on DuckDB, a plain type on Spark too): a
-- bigint input can never overflow it
event_groups as (
    select
        run_id,
        device,
        stream,
        rank,
        name as kernel,
        count(*) as calls,
        sum(dur_ns::decimal(38, 0)) as total_ns,
        min(dur_ns) as min_ns,
        max(dur_ns) as max_ns,
        min(start_ns) as first_start_ns,
        max(start_ns::decimal(38, 0) + dur_ns::decimal(38, 0)) as last_end_ns
    from kernel_events
    group by run_id, device, stream, rank, name
),

summary_groups as (
    select
        summaries.run_id,
        summaries.device,
        summaries.name as kernel,
        sum(summaries.calls::decimal(38, 0)) as calls,
        sum(summaries.total_ns::decimal(38, 0)) as total_ns,
        sum(abs(summaries.calls::decimal(38, 0))) as abs_calls,
        sum(abs(summaries.total_ns::decimal(38, 0))) as abs_total_ns,
        min(summaries.min_ns) as min_ns,
        max(summaries.max_ns) as max_ns
    from raw.trace_kernel_summaries as summaries
    group by summaries.run_id, summaries.device, summaries.name
),

-- the runs whose times fit: durations >= 0 and the run's kernel time, latest end and time
-- range within BIGINT ns, so that every sum of a subset of its kernels fits too (the casts
-- back to bigint below, and the sums of the marts, can never overflow)
event_runs_that_fit as (
    select run_id
    from event_groups
    group by run_id
    having
        coalesce(min(min_ns), 0) >= 0
        and coalesce(sum(total_ns), 0) <= 9223372036854775807
        and coalesce(max(last_end_ns), 0) <= 9223372036854775807
        and coalesce(max(last_end_ns) - min(first_start_ns), 0) <= 9223372036854775807
),

summary_runs_that_fit as (
    select run_id
    from summary_groups
    group by run_id
    having
        coalesce(sum(abs_calls), 0) <= 9223372036854775807
        and coalesce(sum(abs_total_ns), 0) <= 9223372036854775807
),

event_kernels as (
    select
        event_groups.run_id,
        event_groups.device,
        event_groups.stream,
        event_groups.rank,
        event_groups.kernel,
        event_groups.calls,
        event_groups.total_ns::bigint as total_ns,
        event_groups.min_ns,
        event_groups.max_ns,
        event_groups.first_start_ns,
        event_groups.last_end_ns::bigint as last_end_ns,
        false as from_summary
    from event_groups
    inner join event_runs_that_fit on event_runs_that_fit.run_id = event_groups.run_id
),

summary_kernels as (
    select
        summary_groups.run_id,
        summary_groups.device,
        null::varchar as stream,
        null::varchar as rank,
        summary_groups.kernel,
        summary_groups.calls::bigint as calls,
        summary_groups.total_ns::bigint as total_ns,
        summary_groups.min_ns,
        summary_groups.max_ns,
        null::bigint as first_start_ns,
        null::bigint as last_end_ns,
        true as from_summary
    from summary_groups
    inner join summary_runs_that_fit on summary_runs_that_fit.run_id = summary_groups.run_id
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
