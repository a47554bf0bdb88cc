-- check view: op_rollup_invariants
-- table: marts.op_rollup
-- grain: one row per run of marts.op_rollup among the runs being validated
-- invariants: SCHEMA (every kernel of the run is in exactly one operator row: the rows' kernels
-- and kernel time sum to the run's kernels and kernel time in raw.trace_events)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with rollup as (
    select
        run_id,
        sum(kernels) as rollup_kernels,
        sum(kernel_ns::hugeint) as rollup_kernel_ns,
        max(kernel_ns) as max_op_kernel_ns,
        count(*) filter (where op = '(unattributed)') as unattributed_rows
    from marts.op_rollup
    where run_id in (select unnest($run_ids))
    group by run_id
),

raw_kernels as (
    select run_id, count(*) as raw_kernels, sum(dur_ns::hugeint) as raw_kernel_ns
    from raw.trace_events
    where run_id in (select unnest($run_ids)) and kind = 'kernel'
    group by run_id
)

select
    rollup.run_id,
    rollup.rollup_kernels,
    rollup.rollup_kernel_ns::varchar as rollup_kernel_ns,
    coalesce(raw_kernels.raw_kernels, 0) as raw_kernels,
    raw_kernels.raw_kernel_ns::varchar as raw_kernel_ns,
    rollup.unattributed_rows,
    coalesce(
        rollup.rollup_kernels = coalesce(raw_kernels.raw_kernels, 0)
        and rollup.rollup_kernel_ns = coalesce(raw_kernels.raw_kernel_ns, 0),
        false
    ) as t1_kernels_sum_to_the_run,
    coalesce(rollup.max_op_kernel_ns <= coalesce(raw_kernels.raw_kernel_ns, 0), false)
        as t2_op_within_run,
    rollup.unattributed_rows <= 1 as t3_one_unattributed_row
from rollup
left join raw_kernels on raw_kernels.run_id = rollup.run_id
order by rollup.run_id
