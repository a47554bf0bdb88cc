-- name: marts.kernel_trends (Spark override)
-- purpose: the parts of kernel_trends.sql that would change meaning when transpiled to Spark
-- base: c36678208703
-- cells: list(v order by v, run_id) and list(run_id order by v, run_id) -> one sorted array of
--   (v, run_id) structs split in two (a cell has at least one run; value_us is never NULL)
-- per_series: list({…}) of a non-empty group of non-NULL structs: same on both engines, the
--   verdict function orders cells by label_seq itself
with cells as (
    select
        points.series,
        points.kernel_kind,
        points.kernel,
        points.label,
        label_order.label_seq,
        transform(array_sort(collect_list(named_struct('v', points.value_us, 'r', points.run_id))),
            x -> x.v) as run_values_us,
        transform(array_sort(collect_list(named_struct('v', points.value_us, 'r', points.run_id))),
            x -> x.r) as run_ids
    from points
    inner join label_order
        on label_order.series = points.series and label_order.label = points.label
    group by points.series, points.kernel_kind, points.kernel, points.label, label_order.label_seq
),

per_series as (
    select
        series,
        collect_list(named_struct(
            'kind', kernel_kind,
            'key', kernel,
            'label', label,
            'label_seq', label_seq,
            'values', run_values_us,
            'runs', run_ids
        )) as series_cells
    from cells
    group by series
)

select * from model
