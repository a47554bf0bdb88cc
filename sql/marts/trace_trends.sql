-- name: marts.trace_trends
-- grain: one row per (series, fact, key, label) of Kineto runs with the CPU side: step time, GPU idle share, communication time (key '(run)'), step time per rank (key 'rank N', in series of more than one rank) and GPU kernel time per CPU operator (key = the operator)
-- purpose: label-over-label trends of why a run got slower, judged by the same verdict engine as marts.kernel_trends (pwh_judge_series; one call per series and fact): regressed means the figure rose (slower steps, more idle, more communication, more GPU time under an operator)
-- incremental: series

-- a run's values (runs whose checks failed are left out): step_time = the mean step duration in
-- ns (marts.step_times), under key '(run)' and, where the series holds runs of more than one
-- rank (the rank files of distributed jobs), under key 'rank N' too: a straggler's own trend
-- (one rank in N barely moves the pooled '(run)' median); gpu_idle_share = idle / span summed
-- over the run's devices (marts.gpu_timeline, whole run); communication_ns = the run's communication union summed over
-- its devices; op_kernel_ns = an operator's kernel_ns (marts.op_rollup; operators that launched
-- kernels). An operator keeps its trend when its kernels are swapped for others. Ratios: exact
-- integer sums, each made a double before the one division (the same on Spark, where a
-- decimal division rounds to 6 decimals).
with runs as (
    select run_id, series, label, captured_at
    from staging.runs
    where in_trends
),

step_runs as (
    select
        step_times.run_id,
        step_times.series,
        min(step_times.rank) as rank,
        sum(step_times.duration_ns::decimal(38, 0))::double / count(*) as value
    from marts.step_times as step_times
    group by step_times.run_id, step_times.series
),

-- series whose runs come from more than one rank (the rank files of distributed jobs)
ranked_series as (
    select step_runs.series
    from step_runs
    where step_runs.rank is not null
    group by step_runs.series
    having count(distinct step_runs.rank) > 1
),

step_points as (
    select step_runs.run_id, 'step_time' as fact, '(run)' as key, step_runs.value
    from step_runs
    union all
    select step_runs.run_id, 'step_time' as fact, 'rank ' || step_runs.rank as key,
        step_runs.value
    from step_runs
    inner join ranked_series on ranked_series.series = step_runs.series
    where step_runs.rank is not null
),

timeline as (
    select
        gpu_timeline.run_id,
        sum(gpu_timeline.idle_ns::decimal(38, 0)) as idle_ns,
        sum(gpu_timeline.span_ns::decimal(38, 0)) as span_ns,
        sum(gpu_timeline.communication_ns::decimal(38, 0)) as communication_ns
    from marts.gpu_timeline as gpu_timeline
    where gpu_timeline.step is null
    group by gpu_timeline.run_id
),

timeline_points as (
    select run_id, 'gpu_idle_share' as fact, '(run)' as key,
        idle_ns::double / span_ns::double as value
    from timeline
    where span_ns > 0
    union all
    select run_id, 'communication_ns' as fact, '(run)' as key,
        communication_ns::double as value
    from timeline
),

op_points as (
    select op_rollup.run_id, 'op_kernel_ns' as fact, op_rollup.op as key,
        op_rollup.kernel_ns::double as value
    from marts.op_rollup as op_rollup
    where op_rollup.kernels > 0
),

facts as (
    select * from step_points
    union all
    select * from timeline_points
    union all
    select * from op_points
),

points as (
    select runs.series, runs.label, runs.captured_at, facts.*
    from facts
    inner join runs on runs.run_id = facts.run_id
),

labels as (
    select series, label, min(captured_at) as captured_at
    from points
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
        points.fact,
        points.key,
        points.label,
        label_order.label_seq,
        list(points.value order by points.value, points.run_id) as run_values,
        list(points.run_id order by points.value, points.run_id) as run_ids
    from points
    inner join label_order
        on label_order.series = points.series and label_order.label = points.label
    group by points.series, points.fact, points.key, points.label, label_order.label_seq
),

per_fact as (
    select
        series,
        fact,
        list({
            'kind': fact,
            'key': key,
            'label': label,
            'label_seq': label_seq,
            'values': run_values,
            'runs': run_ids
        } order by key, label_seq) as fact_cells
    from cells
    group by series, fact
),

judged as (
    select series, fact, unnest(pwh_judge_series(fact_cells)) as v
    from per_fact
)

select
    judged.series,
    judged.fact,
    judged.v.key as key,
    judged.v.label as label,
    judged.v.label_seq as label_seq,
    label_order.captured_at,
    judged.v.repeats as repeats,
    judged.v.run_values as run_values,
    judged.v.median as median,
    judged.v.baseline_from_label as baseline_from_label,
    judged.v.baseline_labels as baseline_labels,
    judged.v.baseline_runs as baseline_runs,
    judged.v.baseline_median as baseline_median,
    judged.v.baseline_mad as baseline_mad,
    judged.v.delta_pct as delta_pct,
    judged.v.p_value as p_value,
    judged.v.q_value as q_value,
    judged.v.min_detectable_pct as min_detectable_pct,
    judged.v.confirmed_by_label as confirmed_by_label,
    judged.v.method as method,
    judged.v.verdict as verdict,
    judged.v.evidence as evidence,
    judged.v.change_point as change_point,
    judged.v.floor_pct as floor_pct,
    judged.v.alpha as alpha
from judged
inner join label_order
    on label_order.series = judged.series and label_order.label = judged.v.label
order by judged.series, judged.fact, key, label_seq
