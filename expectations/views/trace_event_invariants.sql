-- check view: trace_event_invariants
-- table: raw.trace_events
-- grain: one row per event of the kernel-trace runs being validated
-- invariants: SCHEMA (durations >= 0; end >= start within BIGINT ns; integer ns times)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with events as (
    select run_id, event_idx, kind, name, start_ns, dur_ns
    from raw.trace_events
    where run_id in (select unnest($run_ids))
)

select
    run_id,
    event_idx,
    kind,
    left(name, 200) as name,
    start_ns,
    dur_ns,
    coalesce(dur_ns >= 0, false) as t1_dur_non_negative,
    coalesce(
        start_ns::hugeint + dur_ns::hugeint >= start_ns::hugeint
        and start_ns::hugeint + dur_ns::hugeint <= 9223372036854775807::hugeint,
        false
    ) as t2_end_after_start,
    start_ns is not null and dur_ns is not null as t3_integer_ns
from events
order by run_id, event_idx
