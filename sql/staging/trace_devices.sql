-- name: staging.trace_devices
-- grain: one row per (run, device) with kernels of a kernel-trace run
-- purpose: per device kernel time (sum of kernel durations) and busy time (the union of kernel intervals: overlapping streams counted once), kernel calls and the device name
-- incremental: run_id

-- a run whose times cannot be summed in bigint ns (a negative duration, an end past bigint,
-- a kernel time or time range over bigint) has no rows here: its checks fail it
with kernel_events as (
    select
        events.run_id,
        events.device,
        events.event_idx,
        events.start_ns,
        events.dur_ns
    from raw.trace_events as events
    where events.kind = 'kernel'
),

-- every end and sum in decimal(38, 0) (hugeint on DuckDB, a plain type on Spark too): a
-- bigint input can never overflow it
device_events as (
    select
        run_id,
        device,
        count(*) as kernel_calls,
        sum(dur_ns::decimal(38, 0)) as kernel_ns,
        min(dur_ns) as min_dur_ns,
        min(start_ns) as first_start_ns,
        max(start_ns::decimal(38, 0) + dur_ns::decimal(38, 0)) as last_end_ns
    from kernel_events
    group by run_id, device
),

device_summaries as (
    select
        summaries.run_id,
        summaries.device,
        sum(summaries.calls::decimal(38, 0)) as kernel_calls,
        sum(summaries.total_ns::decimal(38, 0)) as kernel_ns,
        sum(abs(summaries.calls::decimal(38, 0))) as abs_calls,
        sum(abs(summaries.total_ns::decimal(38, 0))) as abs_kernel_ns
    from raw.trace_kernel_summaries as summaries
    group by summaries.run_id, summaries.device
),

-- the runs whose times fit (the same rule as staging.trace_kernels): durations >= 0 and the
-- run's kernel time, latest end and time range within bigint ns, so every kernel's end, every
-- device's kernel time, busy time (disjoint spans inside that range) and span fit in bigint,
-- and so do the marts' sums
event_runs_that_fit as (
    select run_id
    from device_events
    group by run_id
    having
        coalesce(min(min_dur_ns), 0) >= 0
        and coalesce(sum(kernel_ns), 0) <= 9223372036854775807
        and coalesce(max(last_end_ns), 0) <= 9223372036854775807
        and coalesce(max(last_end_ns) - min(first_start_ns), 0) <= 9223372036854775807
),

summary_runs_that_fit as (
    select run_id
    from device_summaries
    group by run_id
    having
        coalesce(sum(abs_calls), 0) <= 9223372036854775807
        and coalesce(sum(abs_kernel_ns), 0) <= 9223372036854775807
),

-- the kernels of the runs that fit: their ends are bigint
fitting_events as (
    select
        kernel_events.run_id,
        kernel_events.device,
        kernel_events.event_idx,
        kernel_events.start_ns,
        kernel_events.start_ns + kernel_events.dur_ns as end_ns
    from kernel_events
    inner join event_runs_that_fit on event_runs_that_fit.run_id = kernel_events.run_id
),

-- kernels merged in the order of start, end and file position (event_idx): a total order, so
-- that two kernels with the same start and end always fall in one island
ordered as (
    select
        run_id,
        device,
        event_idx,
        start_ns,
        end_ns,
        max(end_ns) over (
            partition by run_id, device order by start_ns, end_ns, event_idx
            rows between unbounded preceding and 1 preceding
        ) as reach_before
    from fitting_events
),

islands as (
    select
        run_id,
        device,
        start_ns,
        end_ns,
        sum(case when reach_before is null or start_ns > reach_before then 1 else 0 end) over (
            partition by run_id, device order by start_ns, end_ns, event_idx
            rows unbounded preceding
        ) as island
    from ordered
),

busy_spans as (
    select run_id, device, island, min(start_ns) as span_start, max(end_ns) as span_end
    from islands
    group by run_id, device, island
),

busy as (
    select run_id, device, sum(span_end - span_start)::bigint as busy_ns
    from busy_spans
    group by run_id, device
),

per_device_events as (
    select
        device_events.run_id,
        device_events.device,
        device_events.kernel_calls,
        device_events.kernel_ns::bigint as kernel_ns,
        device_events.first_start_ns,
        device_events.last_end_ns::bigint as last_end_ns
    from device_events
    inner join event_runs_that_fit on event_runs_that_fit.run_id = device_events.run_id
),

summaries as (
    select
        device_summaries.run_id,
        device_summaries.device,
        device_summaries.kernel_calls::bigint as kernel_calls,
        device_summaries.kernel_ns::bigint as kernel_ns
    from device_summaries
    inner join summary_runs_that_fit on summary_runs_that_fit.run_id = device_summaries.run_id
),

trace_runs as (
    select run_id, aggregated from raw.trace_runs
),

per_device as (
    select
        per_device_events.run_id,
        per_device_events.device,
        per_device_events.kernel_calls,
        per_device_events.kernel_ns,
        busy.busy_ns,
        per_device_events.first_start_ns,
        per_device_events.last_end_ns
    from per_device_events
    inner join trace_runs on trace_runs.run_id = per_device_events.run_id
    left join busy
        on busy.run_id = per_device_events.run_id
        and busy.device is not distinct from per_device_events.device
    where not trace_runs.aggregated
    union all
    select
        summaries.run_id,
        summaries.device,
        summaries.kernel_calls,
        summaries.kernel_ns,
        null::bigint as busy_ns,
        null::bigint as first_start_ns,
        null::bigint as last_end_ns
    from summaries
    inner join trace_runs on trace_runs.run_id = summaries.run_id
    where trace_runs.aggregated
),

-- a device listed under several names shows the smallest
device_names as (
    select run_id, device, min(name) as device_name
    from raw.trace_devices
    group by run_id, device
)

select
    per_device.run_id,
    per_device.device,
    device_names.device_name,
    per_device.kernel_calls,
    per_device.kernel_ns,
    per_device.kernel_ns / 1000.0 as kernel_us,
    per_device.busy_ns,
    per_device.busy_ns / 1000.0 as busy_us,
    (per_device.last_end_ns - per_device.first_start_ns) / 1000.0 as span_us
from per_device
left join device_names
    on device_names.run_id = per_device.run_id
    and device_names.device = per_device.device
