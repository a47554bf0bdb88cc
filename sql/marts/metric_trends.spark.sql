-- name: marts.metric_trends (Spark override)
-- purpose: the parts of metric_trends.sql that would change meaning when transpiled to Spark
-- base: 23eec0713eb6
-- cells: list(v order by v, run_id) and list(run_id order by v, run_id) -> one sorted array of
--   (v, run_id) structs split in two (a cell has at least one run; value is never NULL)
-- per_metric: list({…} order by kernel, kind, label_seq) of a non-empty group of non-NULL
--   structs -> the structs sorted by (key, kind, label_seq) with array_sort on a comparator
-- kernel_keys: ('0x' || hex)::bigint reads hex on DuckDB only (NULL on Spark) -> conv(hex, 16, 10)
with cells as (
    select
        points.series,
        points.metric,
        points.source_format || '|' || points.unit as kind,
        points.kernel,
        points.label,
        label_order.label_seq,
        transform(array_sort(collect_list(named_struct('v', points.value, 'r', points.run_id))),
            x -> x.v) as run_values,
        transform(array_sort(collect_list(named_struct('v', points.value, 'r', points.run_id))),
            x -> x.r) as run_ids
    from points
    inner join label_order
        on label_order.series = points.series and label_order.label = points.label
    group by
        points.series, points.metric, points.source_format, points.unit, points.kernel,
        points.label, label_order.label_seq
),

kernel_keys as (
    select kernel, cast(conv(left(md5(kernel), 15), 16, 10) as bigint) as kernel_key
    from (select distinct kernel from cells)
),

per_metric as (
    select
        series,
        metric,
        array_sort(
            collect_list(named_struct(
                'kind', kind,
                'key', kernel,
                'label', label,
                'label_seq', label_seq,
                'values', run_values,
                'runs', run_ids
            )),
            (a, b) -> case
                when a.key < b.key then -1 when a.key > b.key then 1
                when a.kind < b.kind then -1 when a.kind > b.kind then 1
                when a.label_seq < b.label_seq then -1 when a.label_seq > b.label_seq then 1
                else 0 end
        ) as metric_cells
    from cells
    group by series, metric
)

select * from model
