-- check view: audit_kernel_invariants
-- table: raw.audit_kernels
-- grain: one row per (conv-audit run, signature row, kernel launch)
-- invariants: A5
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with kernels as (
    select run_id, row_idx, kernel_idx, kernel_id, name, category, duration_us
    from raw.audit_kernels
    where run_id in (select unnest($run_ids))
)

select
    *,
    -- kernel_idx is the launch position 0..n-1, so "ids are 0..n-1, unique and in launch order"
    -- is exactly: every id is the decimal text of its own position
    cast(kernel_idx as varchar) as expected_kernel_id
from kernels
order by run_id, row_idx, kernel_idx
