-- check view: trace_summary_invariants
-- table: raw.trace_kernel_summaries
-- grain: one row per per-kernel summary row of the aggregated trace runs being validated
-- invariants: SCHEMA (a kernel total lies between calls x shortest and calls x longest call)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with summaries as (
    select run_id, row_idx, name, calls, total_ns, min_ns, max_ns
    from raw.trace_kernel_summaries
    where run_id in (select unnest($run_ids))
)

select
    run_id,
    row_idx,
    left(name, 200) as name,
    calls,
    total_ns,
    min_ns,
    max_ns,
    coalesce(
        (min_ns is null or calls::hugeint * min_ns <= total_ns)
        and (max_ns is null or total_ns <= calls::hugeint * max_ns)
        and (min_ns is null or max_ns is null or min_ns <= max_ns),
        false
    ) as t5_total_within_calls
from summaries
order by run_id, row_idx
