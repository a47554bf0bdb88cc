-- name: marts.kernel_metrics
-- grain: one row per (run, launch, metric) of an Nsight Compute run
-- purpose: every metric of every kernel launch, queryable without the raw tables: the value converted to its base unit (times to ns, rates per s, K/M/G/T/P prefixes undone as powers of ten) so that exports written with different units compare, the unit and value as written beside it, text values as text
-- incremental: run_id
with runs as (
    select run_id, series, label, captured_at, check_status
    from staging.runs
),

launches as (
    select run_id, launch_idx, kernel, source_format
    from staging.ncu_launches
),

metrics as (
    select * from raw.ncu_metrics
),

-- a unit is "<numerator>" or "<numerator>/<denominator>"; each part scales to its base: a
-- time to ns (as a denominator, to s: byte/usecond -> byte/s), K/M/G/T/P prefixes by 1000
parts as (
    select
        unit,
        split_part(unit, '/', 1) as num_unit,
        case when unit like '%/%' then split_part(unit, '/', 2) end as den_unit
    from (select distinct unit from metrics)
),

scaled as (
    select
        parts.unit,
        case
            when num_unit in ('ns', 'nsecond') then 'ns'
            when num_unit in ('us', 'usecond') then 'ns'
            when num_unit in ('ms', 'msecond') then 'ns'
            when num_unit in ('s', 'second') then 'ns'
            when regexp_matches(num_unit, '^[KMGTP][a-z]') then substr(num_unit, 2)
            else num_unit
        end as num_base,
        case
            when num_unit in ('ns', 'nsecond') then 1e0
            when num_unit in ('us', 'usecond') then 1e3
            when num_unit in ('ms', 'msecond') then 1e6
            when num_unit in ('s', 'second') then 1e9
            when regexp_matches(num_unit, '^K[a-z]') then 1e3
            when regexp_matches(num_unit, '^M[a-z]') then 1e6
            when regexp_matches(num_unit, '^G[a-z]') then 1e9
            when regexp_matches(num_unit, '^T[a-z]') then 1e12
            when regexp_matches(num_unit, '^P[a-z]') then 1e15
            else 1e0
        end as num_factor,
        case
            when den_unit in ('ns', 'nsecond', 'us', 'usecond', 'ms', 'msecond', 's', 'second')
                then 's'
            when regexp_matches(den_unit, '^[KMGTP][a-z]') then substr(den_unit, 2)
            else den_unit
        end as den_base,
        case
            when den_unit in ('ns', 'nsecond') then 1e9
            when den_unit in ('us', 'usecond') then 1e6
            when den_unit in ('ms', 'msecond') then 1e3
            when regexp_matches(den_unit, '^K[a-z]') then 1e-3
            when regexp_matches(den_unit, '^M[a-z]') then 1e-6
            when regexp_matches(den_unit, '^G[a-z]') then 1e-9
            when regexp_matches(den_unit, '^T[a-z]') then 1e-12
            when regexp_matches(den_unit, '^P[a-z]') then 1e-15
            else 1e0
        end as den_factor
    from parts
)

select
    metrics.run_id,
    runs.series,
    runs.label,
    runs.captured_at,
    launches.source_format,
    launches.kernel,
    metrics.launch_idx,
    metrics.metric_idx,
    metrics.section,
    metrics.name as metric,
    case when scaled.den_base is null then scaled.num_base
        else scaled.num_base || '/' || scaled.den_base end as unit,
    metrics.value * scaled.num_factor * scaled.den_factor as value,
    metrics.text_value,
    metrics.unit as unit_as_written,
    metrics.value as value_as_written,
    runs.check_status
from metrics
inner join scaled on scaled.unit = metrics.unit
inner join launches
    on launches.run_id = metrics.run_id and launches.launch_idx = metrics.launch_idx
inner join runs on runs.run_id = metrics.run_id
