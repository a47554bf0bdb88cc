-- name: marts.kernel_trends
-- grain: one row per (series, kernel, label); kernel is a tile-profile kernel, an audit kernel family or an audit (signature, category)
-- purpose: label-over-label trend of each kernel with a regression verdict (run-wide factor split from each kernel's own, per-kernel rank test, candidate changes confirmed by the next label and written on their own label, power check, MAD guard, change points) and its evidence
-- incremental: series
with points as (
    select * from staging.trend_points
),

labels as (
    select series, label, min(captured_at) as captured_at, count(distinct run_id) as label_runs
    from points
    group by series, label
),

label_order as (
    select
        series,
        label,
        captured_at,
        label_runs,
        row_number() over (partition by series order by captured_at, label) - 1 as label_seq
    from labels
),

kernels as (
    select
        series,
        kernel_kind,
        kernel,
        min(source_format) as source_format,
        min(kernel_family) as kernel_family,
        min(signature) as signature,
        min(category) as category
    from points
    group by series, kernel_kind, kernel
),

cells as (
    select
        points.series,
        points.kernel_kind,
        points.kernel,
        points.label,
        label_order.label_seq,
        list(points.value_us order by points.value_us, points.run_id) as run_values_us,
        list(points.run_id order by points.value_us, points.run_id) as run_ids
    from points
    inner join label_order
        on label_order.series = points.series and label_order.label = points.label
    group by points.series, points.kernel_kind, points.kernel, points.label, label_order.label_seq
),

per_series as (
    select
        series,
        list({
            'kind': kernel_kind,
            'key': kernel,
            'label': label,
            'label_seq': label_seq,
            'values': run_values_us,
            'runs': run_ids
        }) as series_cells
    from cells
    group by series
),

judged as (
    select series, unnest(pwh_judge_series(series_cells)) as v
    from per_series
)

select
    judged.series,
    kernels.source_format,
    judged.v.kind as kernel_kind,
    judged.v.key as kernel,
    kernels.kernel_family,
    kernels.signature,
    kernels.category,
    judged.v.label as label,
    judged.v.label_seq as label_seq,
    label_order.captured_at,
    judged.v.repeats as repeats,
    judged.v.run_values as run_values_us,
    judged.v.run_factors as run_factors,
    judged.v.median as median_us,
    judged.v.baseline_from_label as baseline_from_label,
    judged.v.baseline_labels as baseline_labels,
    judged.v.baseline_runs as baseline_runs,
    judged.v.baseline_median as baseline_median_us,
    judged.v.baseline_mad as baseline_mad_us,
    judged.v.delta_pct as delta_pct,
    judged.v.kernel_delta_pct as kernel_delta_pct,
    judged.v.run_wide_pct as run_wide_pct,
    judged.v.run_wide_verdict as run_wide_verdict,
    judged.v.p_value as p_value,
    judged.v.q_value as q_value,
    judged.v.min_attainable_p as min_attainable_p,
    judged.v.min_detectable_pct as min_detectable_pct,
    judged.v.runs_needed as runs_needed,
    judged.v.confirmed_by_label as confirmed_by_label,
    judged.v.method as method,
    judged.v.verdict as verdict,
    judged.v.evidence as evidence,
    judged.v.change_point as change_point,
    judged.v.floor_pct as floor_pct,
    judged.v.alpha as alpha
from judged
inner join kernels
    on kernels.series = judged.series
    and kernels.kernel_kind = judged.v.kind
    and kernels.kernel = judged.v.key
inner join label_order
    on label_order.series = judged.series and label_order.label = judged.v.label
order by judged.series, kernel_kind, kernel, label_seq
