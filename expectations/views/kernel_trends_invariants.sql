-- check view: kernel_trends_invariants
-- table: marts.kernel_trends
-- grain: one row per (validated run, trend row of the run's series and label)
-- invariants: SCHEMA (what holds for any verdict method: verdict in its set, p and q values in
--   [0, 1], no NaN, one row per (series, kernel_kind, kernel, label), delta_pct consistent with
--   the medians it compares)
-- parameters: $run_ids (varchar[]): the runs being validated; each run answers for the trend
--   rows of its own series and label
with validated as (
    select run_id, series, label
    from staging.runs
    where run_id in (select unnest($run_ids))
),

trends as (
    select
        series,
        kernel_kind,
        kernel,
        label,
        verdict,
        p_value,
        q_value,
        median_us,
        baseline_median_us,
        delta_pct,
        count(*) over (partition by series, kernel_kind, kernel, label) as rows_per_key,
        len(list_filter(
            [median_us, baseline_median_us, baseline_mad_us, delta_pct, p_value, q_value,
                min_attainable_p, floor_pct, alpha],
            lambda x: isnan(x)
        )) as nan_values
    from marts.kernel_trends
    where series in (select series from validated)
)

select
    validated.run_id,
    trends.* exclude (delta_pct),
    trends.delta_pct,
    -- scaled error of delta_pct against 100 x (median / baseline median - 1); a delta without
    -- both medians is an infinite error, a missing delta where both exist as well
    case
        when trends.median_us is null or trends.baseline_median_us is null
            then case when trends.delta_pct is null then 0.0 else 'infinity'::double end
        when trends.baseline_median_us = 0 then 0.0
        when trends.delta_pct is null then 'infinity'::double
        else abs(trends.delta_pct - 100 * (trends.median_us / trends.baseline_median_us - 1))
            / greatest(1.0, abs(trends.delta_pct))
    end as delta_error
from validated
inner join trends
    on trends.series = validated.series and trends.label = validated.label
order by validated.run_id, trends.kernel_kind, trends.kernel
