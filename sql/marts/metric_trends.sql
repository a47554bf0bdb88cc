-- name: marts.metric_trends
-- grain: one row per (series, kernel, metric, label) of Nsight Compute runs: every numeric metric
-- purpose: label-over-label trend of every Nsight Compute metric of every kernel with a verdict from the same engine as marts.kernel_trends (pwh_judge_series): increased, decreased, unchanged or inconclusive; regressed / improved only for the lower-is-better metrics (durations, elapsed cycles)
-- incremental: series
with metrics as (
    select *
    from marts.kernel_metrics
    where
        check_status <> 'failed'
        and value is not null
        -- NaN and ±inf are no level to judge (written so on Spark too: no isnan/isinf there)
        and value not in ('NaN'::double, 'Infinity'::double, '-Infinity'::double)
),

-- a run's value of a kernel's metric: the mean over the kernel's launches in the run, an exact
-- decimal sum (each value rounded to 1e-9; beyond 1e29 a value counts as unknown) so that no
-- order of the launches moves a last bit
points as (
    select
        run_id,
        series,
        label,
        source_format,
        kernel,
        metric,
        unit,
        min(captured_at) as captured_at,
        (
            sum(try_cast(value as decimal(38, 9)))
            / count(try_cast(value as decimal(38, 9)))
        )::double as value
    from metrics
    group by run_id, series, label, source_format, kernel, metric, unit
),

labels as (
    select series, label, min(captured_at) as captured_at
    from (select distinct series, label, captured_at from marts.kernel_metrics)
    group by series, label
),

label_order as (
    select
        series,
        label,
        captured_at,
        row_number() over (partition by series order by captured_at, label) - 1 as label_seq
    from labels
),

cells as (
    select
        points.series,
        points.metric,
        points.source_format || '|' || points.unit as kind,
        points.kernel,
        points.label,
        label_order.label_seq,
        list(points.value order by points.value, points.run_id) as run_values,
        list(points.run_id order by points.value, points.run_id) as run_ids
    from points
    inner join label_order
        on label_order.series = points.series and label_order.label = points.label
    group by
        points.series, points.metric, points.source_format, points.unit, points.kernel,
        points.label, label_order.label_seq
),

-- kernel_key: the first 60 bits of md5(kernel) as an integer, a function of the name alone. The
-- mart is ordered by it, so a filter on it (docs/analyst-guide.md) lets DuckDB's zonemaps skip
-- the other kernels' row groups; the name's own zonemap keeps only its first bytes, which
-- demangled names share. Computed once per kernel, and a cheap sort key besides
kernel_keys as (
    select kernel, ('0x' || left(md5(kernel), 15))::bigint as kernel_key
    from (select distinct kernel from cells)
),

-- one call of the verdict engine per (series, metric): the kernels of one metric share the
-- run-wide factor split, as the kernels of one series do in marts.kernel_trends
per_metric as (
    select
        series,
        metric,
        list({
            'kind': kind,
            'key': kernel,
            'label': label,
            'label_seq': label_seq,
            'values': run_values,
            'runs': run_ids
        } order by kernel, kind, label_seq) as metric_cells
    from cells
    group by series, metric
),

judged as (
    select series, metric, unnest(pwh_judge_series(metric_cells)) as v
    from per_metric
),

-- the documented lower-is-better metrics (docs/analyst-guide.md): durations and elapsed cycles
directed as (
    select
        judged.*,
        split_part(judged.v.kind, '|', 1) as source_format,
        substr(judged.v.kind, strpos(judged.v.kind, '|') + 1) as unit,
        (
            judged.metric like 'gpu\_\_time\_duration%' escape '\'
            or judged.metric like '%\_\_cycles\_elapsed.%' escape '\'
            or judged.metric in ('Duration', 'Elapsed Cycles')
        ) as lower_is_better
    from judged
)

select
    directed.series,
    directed.source_format,
    directed.v.key as kernel,
    kernel_keys.kernel_key,
    directed.metric,
    directed.unit,
    directed.lower_is_better,
    directed.v.label as label,
    directed.v.label_seq as label_seq,
    label_order.captured_at,
    directed.v.repeats as repeats,
    directed.v.run_values as run_values,
    directed.v.median as median,
    directed.v.baseline_from_label as baseline_from_label,
    directed.v.baseline_labels as baseline_labels,
    directed.v.baseline_runs as baseline_runs,
    directed.v.baseline_median as baseline_median,
    directed.v.baseline_mad as baseline_mad,
    directed.v.delta_pct as delta_pct,
    directed.v.p_value as p_value,
    directed.v.q_value as q_value,
    directed.v.min_detectable_pct as min_detectable_pct,
    directed.v.confirmed_by_label as confirmed_by_label,
    directed.v.method as method,
    case
        when directed.v.verdict not in ('regressed', 'improved') then directed.v.verdict
        when directed.lower_is_better then directed.v.verdict
        when directed.v.verdict = 'regressed' then 'increased'
        else 'decreased'
    end as verdict,
    directed.v.verdict as engine_verdict,
    directed.v.evidence as evidence,
    directed.v.change_point as change_point,
    directed.v.floor_pct as floor_pct,
    directed.v.alpha as alpha
from directed
inner join label_order
    on label_order.series = directed.series and label_order.label = directed.v.label
left join kernel_keys on kernel_keys.kernel = directed.v.key
-- the physical layout analysts' reads rely on (tests/test_metric_trends_layout.py): a series'
-- rows together, then one kernel's (by kernel_key), then metric and label order
order by
    directed.series, kernel_key, directed.metric, label_seq, directed.source_format,
    directed.unit, kernel
