-- check view: audit_component_invariants
-- table: raw.audit_components
-- grain: one row per (conv-audit run, signature row, component)
-- invariants: A3
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with audit_rows as (
    select run_id, row_idx, total_profiled_us
    from raw.audit_rows
    where run_id in (select unnest($run_ids))
),

components as (
    select run_id, row_idx, component_idx, category, us, fraction_of_profiled_sum
    from raw.audit_components
    where run_id in (select unnest($run_ids))
),

joined as (
    select
        components.*,
        audit_rows.total_profiled_us,
        components.us / audit_rows.total_profiled_us as expected_fraction
    from components
    left join audit_rows using (run_id, row_idx)
)

select
    *,
    -- scaled error: |a - b| / max(1, |a|, |b|); NULL (no row, zero total) counts as infinite
    coalesce(
        abs(fraction_of_profiled_sum - expected_fraction)
        / greatest(1.0, abs(fraction_of_profiled_sum), abs(expected_fraction)),
        'infinity'::double
    ) as a3_fraction_error
from joined
order by run_id, row_idx, component_idx
