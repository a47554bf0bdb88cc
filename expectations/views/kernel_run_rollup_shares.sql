-- check view: kernel_run_rollup_shares
-- table: marts.kernel_run_rollup
-- grain: one row per run of marts.kernel_run_rollup among the runs being validated
-- invariants: SUM_TO_ONE (share_of_run sums to 1 within each run)
-- parameters: $run_ids (varchar[]): the runs being validated
-- a kernel without any time (an Nsight Compute kernel none of whose launches is timed: total_us
-- null) has no share and is left out
with kernels as (
    select run_id, kernel, share_of_run
    from marts.kernel_run_rollup
    where run_id in (select unnest($run_ids)) and total_us is not null
),

per_run as (
    select
        run_id,
        count(*) as kernel_count,
        sum(share_of_run) as share_sum,
        count(*) filter (where share_of_run is null or isnan(share_of_run)) as undefined_shares
    from kernels
    group by run_id
)

select
    *,
    -- scaled error: |a - 1| / max(1, |a|); an undefined share makes the sum undefined: infinite
    case when undefined_shares = 0
        then abs(share_sum - 1) / greatest(1.0, abs(share_sum))
        else 'infinity'::double
    end as share_sum_error
from per_run
order by run_id
