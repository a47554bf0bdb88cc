-- check view: ncu_rollup_invariants
-- table: marts.kernel_run_rollup
-- grain: one row per Nsight Compute run of marts.kernel_run_rollup among the runs being validated
-- invariants: SCHEMA (the rollup's calls and total_ns equal the sums of the raw launches: every
-- launch counted once, the timed ones' integer ns summed exactly, null when none is timed)
-- parameters: $run_ids (varchar[]): the runs being validated
with rollup as (
    select
        run_id,
        sum(calls) as rollup_calls,
        sum(total_ns::hugeint) as rollup_ns,
        count(*) filter (where total_ns is null) as rollup_untimed_kernels
    from marts.kernel_run_rollup
    where run_id in (select unnest($run_ids)) and source_format in ('ncu_rep', 'ncu_csv')
    group by run_id
),

kernels as (
    select run_id, device, kernel, count(dur_ns) as timed
    from raw.ncu_launches
    where run_id in (select unnest($run_ids))
    group by run_id, device, kernel
),

raw_sums as (
    select
        launches.run_id,
        count(*) as raw_calls,
        sum(launches.dur_ns::hugeint) as raw_ns
    from raw.ncu_launches as launches
    where launches.run_id in (select unnest($run_ids))
    group by launches.run_id
),

untimed as (
    select run_id, count(*) filter (where timed = 0) as raw_untimed_kernels
    from kernels
    group by run_id
)

select
    rollup.run_id,
    rollup.rollup_calls,
    raw_sums.raw_calls,
    rollup.rollup_ns::varchar as rollup_ns,
    raw_sums.raw_ns::varchar as raw_ns,
    rollup.rollup_untimed_kernels,
    untimed.raw_untimed_kernels,
    coalesce(rollup.rollup_calls = raw_sums.raw_calls, false) as n2_calls_match,
    coalesce(rollup.rollup_ns = raw_sums.raw_ns, rollup.rollup_ns is null and raw_sums.raw_ns is null)
        as n2_total_ns_matches,
    coalesce(rollup.rollup_untimed_kernels = untimed.raw_untimed_kernels, false)
        as n2_untimed_kernels_match
from rollup
left join raw_sums on raw_sums.run_id = rollup.run_id
left join untimed on untimed.run_id = rollup.run_id
order by rollup.run_id
