-- check view: trace_run_invariants
-- table: raw.trace_runs
-- grain: one row per kernel-trace run being validated
-- invariants: SCHEMA (the run row agrees with its events and summaries; its kernel times sum
-- within BIGINT ns, as the staging models need)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with runs as (
    select run_id, source_format, time_base, origin_ns, aggregated, event_count
    from raw.trace_runs
    where run_id in (select unnest($run_ids))
),

event_counts as (
    select
        run_id,
        count(*) as event_rows,
        count(*) filter (where kind = 'kernel') as kernel_events,
        sum(abs(dur_ns::hugeint)) filter (where kind = 'kernel') as kernel_time_ns,
        max(start_ns::hugeint + dur_ns::hugeint) filter (where kind = 'kernel')
            - min(start_ns) filter (where kind = 'kernel') as kernel_range_ns
    from raw.trace_events
    where run_id in (select unnest($run_ids))
    group by run_id
),

summary_counts as (
    select
        run_id,
        count(*) as summary_rows,
        sum(abs(calls::hugeint)) as summary_calls,
        sum(abs(total_ns::hugeint)) as summary_time_ns
    from raw.trace_kernel_summaries
    where run_id in (select unnest($run_ids))
    group by run_id
),

joined as (
    select
        runs.*,
        coalesce(event_counts.event_rows, 0) as event_rows,
        coalesce(event_counts.kernel_events, 0) as kernel_events,
        coalesce(summary_counts.summary_rows, 0) as summary_rows,
        event_counts.kernel_time_ns::varchar as kernel_time_ns,
        event_counts.kernel_range_ns::varchar as kernel_range_ns,
        summary_counts.summary_calls::varchar as summary_calls,
        summary_counts.summary_time_ns::varchar as summary_time_ns,
        coalesce(event_counts.kernel_time_ns, 0) <= 9223372036854775807
        and coalesce(event_counts.kernel_range_ns, 0) <= 9223372036854775807
        and coalesce(summary_counts.summary_calls, 0) <= 9223372036854775807
        and coalesce(summary_counts.summary_time_ns, 0) <= 9223372036854775807
            as t4_kernel_times_fit
    from runs
    left join event_counts on event_counts.run_id = runs.run_id
    left join summary_counts on summary_counts.run_id = runs.run_id
)

select
    *,
    coalesce(event_count = event_rows, false) as t4_event_count_matches,
    coalesce(
        case when aggregated then kernel_events = 0 and summary_rows > 0 else summary_rows = 0 end,
        false
    ) as t4_aggregated_matches,
    coalesce(
        case when time_base = 'epoch' then origin_ns = 0 else origin_ns is null or origin_ns >= 0 end,
        false
    ) as t4_epoch_origin
from joined
order by run_id
