-- name: marts.trace_trends (Spark override)
-- purpose: the parts of trace_trends.sql that would change meaning when transpiled to Spark
-- base: f2f1d050b5d1
-- cells: list(v order by v, run_id) and list(run_id order by v, run_id) -> one sorted array of
--   (v, run_id) structs split in two (a cell has at least one run; value is never NULL)
-- per_fact: list({…} order by key, label_seq) of a non-empty group of non-NULL structs -> the
--   structs sorted by (key, label_seq) with array_sort on a comparator
with cells as (
    select
        points.series,
        points.fact,
        points.key,
        points.label,
        label_order.label_seq,
        transform(array_sort(collect_list(named_struct('v', points.value, 'r', points.run_id))),
            x -> x.v) as run_values,
        transform(array_sort(collect_list(named_struct('v', points.value, 'r', points.run_id))),
            x -> x.r) as run_ids
    from points
    inner join label_order
        on label_order.series = points.series and label_order.label = points.label
    group by points.series, points.fact, points.key, points.label, label_order.label_seq
),

per_fact as (
    select
        series,
        fact,
        array_sort(
            collect_list(named_struct(
                'kind', fact,
                'key', key,
                'label', label,
                'label_seq', label_seq,
                'values', run_values,
                'runs', run_ids
            )),
            (a, b) -> case
                when a.key < b.key then -1 when a.key > b.key then 1
                when a.label_seq < b.label_seq then -1 when a.label_seq > b.label_seq then 1
                else 0 end
        ) as fact_cells
    from cells
    group by series, fact
)

select * from model
