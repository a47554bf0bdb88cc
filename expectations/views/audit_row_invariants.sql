-- check view: audit_row_invariants
-- table: raw.audit_rows
-- grain: one row per (conv-audit run, conv signature row)
-- invariants: A1, A2, A7
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with audit_rows as (
    select run_id, row_idx, input_sha256, input_shape, output_shape, total_profiled_us
    from raw.audit_rows
    where run_id in (select unnest($run_ids))
),

component_sums as (
    select
        run_id,
        row_idx,
        count(*) as component_count,
        sum(fraction_of_profiled_sum) as fraction_sum,
        sum(us) as component_us_sum
    from raw.audit_components
    where run_id in (select unnest($run_ids))
    group by run_id, row_idx
),

joined as (
    select
        audit_rows.*,
        coalesce(component_sums.component_count, 0) as component_count,
        coalesce(component_sums.fraction_sum, 0) as fraction_sum,
        coalesce(component_sums.component_us_sum, 0) as component_us_sum
    from audit_rows
    left join component_sums using (run_id, row_idx)
)

select
    *,
    -- scaled error: |a - b| / max(1, |a|, |b|)
    abs(fraction_sum - 1) / greatest(1.0, abs(fraction_sum)) as a1_fraction_sum_error,
    coalesce(
        abs(component_us_sum - total_profiled_us)
        / greatest(1.0, abs(component_us_sum), abs(total_profiled_us)),
        'infinity'::double
    ) as a2_component_us_sum_error,
    coalesce(len(input_shape) = 5 and list_min(input_shape) > 0, false)
        as a7_input_shape_is_5_positive_ints,
    coalesce(len(output_shape) = 5 and list_min(output_shape) > 0, false)
        as a7_output_shape_is_5_positive_ints,
    coalesce(input_shape[1] = output_shape[1], false) as a7_batch_preserved
from joined
order by run_id, row_idx
