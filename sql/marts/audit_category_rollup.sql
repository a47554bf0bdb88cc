-- name: marts.audit_category_rollup
-- grain: one row per (run, category) [level = 'run'] and per (run, conv signature, category) [level = 'signature']
-- purpose: where audit time goes by kernel category, per run and per conv signature; shares sum to 1 per (run, signature) and per run
-- incremental: run_id
with runs as (
    select * from staging.runs
),

launches as (
    select * from staging.audit_kernels
),

signatures as (
    -- the shapes of the signature's first audit row (distinct shapes can share a signature
    -- text only through NULL dimensions)
    select run_id, signature, arg_min(input_shape, row_idx) as input_shape,
        arg_min(output_shape, row_idx) as output_shape, count(*) as audit_rows
    from staging.audit_signatures
    group by run_id, signature
),

grouped as (
    select
        run_id,
        case when grouping(signature) = 1 then 'run' else 'signature' end as level,
        signature,
        category,
        -- an exact decimal sum (each duration rounded to 1e-9 us): the same in any row order
        sum(try_cast(duration_us as decimal(38, 9))) as us_exact,
        count(*) as launches,
        count(distinct kernel) as kernels
    from launches
    group by grouping sets ((run_id, signature, category), (run_id, category))
)

select
    grouped.run_id,
    runs.series,
    runs.label,
    runs.captured_at,
    grouped.level,
    grouped.signature,
    signatures.input_shape,
    signatures.output_shape,
    grouped.category,
    grouped.us_exact::double as us,
    grouped.us_exact::double / sum(grouped.us_exact) over (
        partition by grouped.run_id, grouped.level, grouped.signature
    )::double as share,
    grouped.launches,
    grouped.kernels,
    runs.check_status
from grouped
inner join runs on runs.run_id = grouped.run_id
left join signatures
    on signatures.run_id = grouped.run_id and signatures.signature = grouped.signature
order by grouped.run_id, grouped.level, grouped.signature, grouped.us_exact desc, grouped.category
