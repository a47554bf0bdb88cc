-- name: staging.trend_points
-- grain: one row per (run, trend kernel): tile-profile kernels, audit kernel families, audit (signature, category), kernel-trace kernels and Nsight Compute kernels
-- purpose: the per-run value (total microseconds) every trend compares; runs whose checks failed are left out
-- incremental: run_id
with runs as (
    select run_id, series, label, captured_at, source_format
    from staging.runs
    where in_trends
),

-- a kernel's family when several raw names share its short name: that of the raw name with the
-- most time in the run, ties to the smallest raw name (as marts.kernel_run_rollup)
profile_names as (
    select
        run_id,
        kernel,
        kernel_family,
        row_number() over (
            partition by run_id, kernel order by phase_cycles desc, kernel_name
        ) as pick
    from staging.profile_kernels
),

-- sums of floating-point microseconds are exact decimal sums (each value rounded to 1e-9 us):
-- the order in which rows arrive cannot change a value's last bits
profile_kernels as (
    select
        pk.run_id,
        'kernel' as kernel_kind,
        pk.kernel,
        min(pn.kernel_family) as kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(try_cast(pk.total_us as decimal(38, 9)))::double as value_us
    from staging.profile_kernels as pk
    left join profile_names as pn
        on pn.run_id = pk.run_id and pn.kernel = pk.kernel and pn.pick = 1
    group by pk.run_id, pk.kernel
),

audit_families as (
    select
        run_id,
        'family' as kernel_kind,
        kernel_family as kernel,
        kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(try_cast(duration_us as decimal(38, 9)))::double as value_us
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
        sum(try_cast(duration_us as decimal(38, 9)))::double as value_us
    from staging.audit_kernels
    group by run_id, signature, category
),

trace_kernels as (
    -- the kind names the source format: durations from different tools never share a series
    select
        run_id,
        'trace_kernel/' || min(source_format) as kernel_kind,
        kernel,
        min(kernel_family) as kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(total_ns) / 1000.0 as value_us
    from staging.trace_kernels
    group by run_id, kernel
),

-- Nsight Compute: a kernel's launches summed; a kernel with an untimed launch in the run has
-- no point there (a partial sum is no comparable value)
ncu_kernels as (
    select
        run_id,
        'ncu_kernel/' || min(source_format) as kernel_kind,
        kernel,
        min(kernel_family) as kernel_family,
        null::varchar as signature,
        null::varchar as category,
        sum(dur_ns) / 1000.0 as value_us
    from staging.ncu_launches
    group by run_id, kernel
    having count(dur_ns) = count(*)
),

points as (
    select * from profile_kernels
    union all
    select * from audit_families
    union all
    select * from audit_signature_categories
    union all
    select * from trace_kernels
    union all
    select * from ncu_kernels
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
