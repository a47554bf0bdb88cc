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
    select run_id, signature, any_value(input_shape) as input_shape,
        any_value(output_shape) as output_shape, count(*) as audit_rows
    from staging.audit_signatures
    group by run_id, signature
),

grouped as (
    select
        run_id,
        case when grouping(signature) = 1 then 'run' else 'signature' end as level,
        signature,
        category,
        sum(duration_us) as us,
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
    grouped.us,
    grouped.us / sum(grouped.us) over (
        partition by grouped.run_id, grouped.level, grouped.signature
    ) as share,
    grouped.launches,
    grouped.kernels,
    runs.check_status
from grouped
inner join runs on runs.run_id = grouped.run_id
left join signatures
    on signatures.run_id = grouped.run_id and signatures.signature = grouped.signature
order by grouped.run_id, grouped.level, grouped.signature, grouped.us desc
