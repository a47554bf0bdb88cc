-- name: staging.audit_kernels
-- grain: one row per (run, audit row, kernel launch) of a conv audit
-- purpose: kernel launches with parsed CUDA kernel names (short name, family, arch, tile, precision) and their conv signature
-- incremental: run_id
with launches as (
    select * from raw.audit_kernels
),

signatures as (
    select run_id, row_idx, signature from staging.audit_signatures
),

distinct_names as (
    select distinct name from launches
),

parsed as (
    select name, pwh_kernel_name(name) as parts from distinct_names
),

names as (
    select
        name,
        parts.short as kernel,
        parts.family as kernel_family,
        parts.arch as kernel_arch,
        parts.tile as kernel_tile,
        parts.precision as kernel_precision,
        parts.variant as kernel_variant
    from parsed
)

select
    launches.run_id,
    launches.row_idx,
    signatures.signature,
    launches.kernel_idx,
    launches.kernel_id,
    launches.name as kernel_name,
    names.kernel,
    names.kernel_family,
    names.kernel_arch,
    names.kernel_tile,
    names.kernel_precision,
    names.kernel_variant,
    launches.category,
    launches.duration_us
from launches
inner join signatures
    on signatures.run_id = launches.run_id and signatures.row_idx = launches.row_idx
left join names on names.name = launches.name
