-- name: staging.trace_devices
-- grain: one row per (run, device) with kernels of a kernel-trace run
-- purpose: per device kernel time (sum of kernel durations) and busy time (the union of kernel intervals: overlapping streams counted once), kernel calls and the device name
-- incremental: run_id
with kernel_events as (
    select
        events.run_id,
        events.device,
        events.start_ns,
        events.start_ns + events.dur_ns as end_ns,
        events.dur_ns
    from raw.trace_events as events
    where events.kind = 'kernel'
),

ordered as (
    select
        run_id,
        device,
        start_ns,
        end_ns,
        dur_ns,
        max(end_ns) over (
            partition by run_id, device order by start_ns, end_ns
            rows between unbounded preceding and 1 preceding
        ) as reach_before
    from kernel_events
),

islands as (
    select
        run_id,
        device,
        start_ns,
        end_ns,
        dur_ns,
        sum(case when reach_before is null or start_ns > reach_before then 1 else 0 end) over (
            partition by run_id, device order by start_ns, end_ns
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
        run_id,
        device,
        count(*) as kernel_calls,
        sum(dur_ns)::bigint as kernel_ns,
        min(start_ns) as first_start_ns,
        max(end_ns) as last_end_ns
    from kernel_events
    group by run_id, device
),

summaries as (
    select
        summaries.run_id,
        summaries.device,
        sum(summaries.calls)::bigint as kernel_calls,
        sum(summaries.total_ns)::bigint as kernel_ns
    from raw.trace_kernel_summaries as summaries
    group by summaries.run_id, summaries.device
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

device_names as (
    select run_id, device, any_value(name) as device_name
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
