-- check view: audit_input_shapes_across_runs
-- table: raw.audit_rows
-- grain: one row per (conv-audit run, signature row) of the runs being validated
-- invariants: INPUT_SHAPES (one input_sha256 always comes with the same shapes, across runs)
-- parameters: $run_ids (varchar[]): the runs being validated. Other runs are read only where
--   they share an input_sha256 with them (a semi-join on the new runs' hashes), never in full.
with validated as (
    select run_id, row_idx, input_sha256, input_shape, output_shape
    from raw.audit_rows
    where run_id in (select unnest($run_ids))
),

same_input as (
    select run_id as other_run_id, input_sha256, input_shape, output_shape
    from raw.audit_rows
    where input_sha256 in (select input_sha256 from validated)
),

conflicts as (
    select
        validated.run_id,
        validated.row_idx,
        count(*) as conflicting_rows,
        min(same_input.other_run_id) as example_other_run_id,
        min(same_input.input_shape::varchar || ' -> ' || same_input.output_shape::varchar)
            as example_other_shapes
    from validated
    inner join same_input
        on same_input.input_sha256 = validated.input_sha256
        and same_input.other_run_id <> validated.run_id
        and (
            same_input.input_shape <> validated.input_shape
            or same_input.output_shape <> validated.output_shape
        )
    group by validated.run_id, validated.row_idx
)

select
    validated.run_id,
    validated.row_idx,
    validated.input_sha256,
    validated.input_shape::varchar || ' -> ' || validated.output_shape::varchar as shapes,
    coalesce(conflicts.conflicting_rows, 0) as conflicting_rows,
    conflicts.example_other_run_id,
    conflicts.example_other_shapes
from validated
left join conflicts using (run_id, row_idx)
order by validated.run_id, validated.row_idx
