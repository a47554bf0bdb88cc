-- name: staging.audit_signatures
-- grain: one row per (run, audit row) of a conv audit
-- purpose: conv signatures keyed by input and output shape (NCTHW), with their profiled totals
-- incremental: run_id
with audit_rows as (
    select * from raw.audit_rows
),

launches as (
    -- an exact decimal sum (each duration rounded to 1e-9 us): the same in any row order
    select
        run_id,
        row_idx,
        count(*) as launches,
        sum(try_cast(duration_us as decimal(38, 9)))::double as kernel_us
    from raw.audit_kernels
    group by run_id, row_idx
)

select
    audit_rows.run_id,
    audit_rows.row_idx,
    array_to_string(audit_rows.input_shape, 'x') || '->'
        || array_to_string(audit_rows.output_shape, 'x') as signature,
    audit_rows.input_shape,
    audit_rows.output_shape,
    audit_rows.input_shape[1] as batch,
    audit_rows.input_shape[2] as in_channels,
    audit_rows.output_shape[2] as out_channels,
    audit_rows.input_shape[3] as in_frames,
    audit_rows.input_shape[4] as in_height,
    audit_rows.input_shape[5] as in_width,
    audit_rows.output_shape[3] as out_frames,
    audit_rows.output_shape[4] as out_height,
    audit_rows.output_shape[5] as out_width,
    audit_rows.input_sha256,
    audit_rows.total_profiled_us,
    coalesce(launches.launches, 0) as launches,
    coalesce(launches.kernel_us, 0) as kernel_us,
    audit_rows.ncu_output
from audit_rows
left join launches
    on launches.run_id = audit_rows.run_id and launches.row_idx = audit_rows.row_idx
