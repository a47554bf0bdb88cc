-- name: staging.trend_points
-- grain: one row per (run, trend kernel): tile-profile kernels, audit kernel families, audit (signature, category) and kernel-trace kernels
-- purpose: the per-run value (total microseconds) every trend compares; runs whose checks failed are left out
-- incremental: run_id
with runs as (
    select run_id, series, label, captured_at, source_format
    from staging.runs
    where in_trends
),

profile_kernels as (
    select
        run_id,
        'kernel' as kernel_kind,
        kernel,
        any_value(kernel_family) as kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(total_us) as value_us
    from staging.profile_kernels
    group by run_id, kernel
),

audit_families as (
    select
        run_id,
        'family' as kernel_kind,
        kernel_family as kernel,
        kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(duration_us) as value_us
    from staging.audit_kernels
    group by run_id, kernel_family
),

audit_signature_categories as (
    select
        run_id,
        'signature_category' as kernel_kind,
        signature || ' / ' || category as kernel,
        null::varchar as kernel_family,
        signature,
        category,
        sum(duration_us) as value_us
    from staging.audit_kernels
    group by run_id, signature, category
),

trace_kernels as (
    -- the kind names the source format: durations from different tools never share a series
    select
        run_id,
        'trace_kernel/' || any_value(source_format) as kernel_kind,
        kernel,
        any_value(kernel_family) as kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(total_ns) / 1000.0 as value_us
    from staging.trace_kernels
    group by run_id, kernel
),

points as (
    select * from profile_kernels
    union all
    select * from audit_families
    union all
    select * from audit_signature_categories
    union all
    select * from trace_kernels
)

select
    runs.run_id,
    runs.series,
    runs.label,
    runs.captured_at,
    runs.source_format,
    points.kernel_kind,
    points.kernel,
    points.kernel_family,
    points.signature,
    points.category,
    points.value_us
from points
inner join runs on runs.run_id = points.run_id
