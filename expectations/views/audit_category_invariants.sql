-- check view: audit_category_invariants
-- table: raw.audit_kernels
-- grain: one row per (conv-audit run, signature row, category) found in components or kernels
-- invariants: A4
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with components as (
    select
        run_id,
        row_idx,
        category,
        count(*) as component_entries,
        sum(us) as component_us
    from raw.audit_components
    where run_id in (select unnest($run_ids))
    group by run_id, row_idx, category
),

kernels as (
    select
        run_id,
        row_idx,
        category,
        count(*) as kernel_count,
        sum(duration_us) as kernel_us
    from raw.audit_kernels
    where run_id in (select unnest($run_ids))
    group by run_id, row_idx, category
),

joined as (
    select
        run_id,
        row_idx,
        category,
        coalesce(components.component_entries, 0) as component_entries,
        coalesce(components.component_us, 0) as component_us,
        coalesce(kernels.kernel_count, 0) as kernel_count,
        coalesce(kernels.kernel_us, 0) as kernel_us
    from components
    full outer join kernels using (run_id, row_idx, category)
)

select
    *,
    -- scaled error: |a - b| / max(1, |a|, |b|)
    abs(kernel_us - component_us) / greatest(1.0, abs(kernel_us), abs(component_us))
        as a4_kernel_us_error,
    component_entries = 1 as a4_category_listed_once
from joined
order by run_id, row_idx, category
