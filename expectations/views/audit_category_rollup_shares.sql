-- check view: audit_category_rollup_shares
-- table: marts.audit_category_rollup
-- grain: one row per (run, level, signature) of marts.audit_category_rollup among the runs being
--   validated: level 'run' (signature NULL) and level 'signature'
-- invariants: SUM_TO_ONE (category shares sum to 1 per run and per (run, signature))
-- parameters: $run_ids (varchar[]): the runs being validated
with categories as (
    select run_id, level, signature, category, share
    from marts.audit_category_rollup
    where run_id in (select unnest($run_ids))
),

per_group as (
    select
        run_id,
        level,
        signature,
        count(*) as category_count,
        sum(share) as share_sum,
        count(*) filter (where share is null or isnan(share)) as undefined_shares
    from categories
    group by run_id, level, signature
)

select
    *,
    -- scaled error: |a - 1| / max(1, |a|); an undefined share makes the sum undefined: infinite
    case when undefined_shares = 0
        then abs(share_sum - 1) / greatest(1.0, abs(share_sum))
        else 'infinity'::double
    end as share_sum_error
from per_group
order by run_id, level, signature
