-- name: staging.profile_samples (Spark override)
-- purpose: the parts of profile_samples.sql that would change meaning when transpiled to Spark
-- base: 2b0afe1a4985
-- pivoted: list(x order by meta_idx) -> the (meta_idx, name, value) structs sorted by meta_idx
--   (collect_list keeps no order, and would drop NULL values: a struct is never NULL)
-- final select: try_cast(text as bigint[]) -> from_json(text, 'array<bigint>') (NULL when not
--   a JSON array of integers, as DuckDB's try_cast)
with pivoted as (
    select
        run_id,
        sample_idx,
        min_by(value, meta_idx) filter (where name = 'usefulCycles') as useful_cycles,
        min_by(value, meta_idx) filter (where name = 'physicalWorkCycles') as physical_work_cycles,
        min_by(value, meta_idx) filter (where name = 'uniformInvocations') as uniform_invocations,
        min_by(value, meta_idx) filter (where name = 'arguments') as arguments,
        min_by(value, meta_idx) filter (where name = 'invocations') as invocations,
        min_by(value, meta_idx) filter (where name = 'kernelSpec') as kernel_spec,
        min_by(value, meta_idx) filter (where name = 'reason') as reason,
        map_from_entries(transform(
            array_sort(collect_list(named_struct('i', meta_idx, 'k', name, 'v', value))),
            e -> struct(e.k, e.v))) as metadata
    from metadata
    group by run_id, sample_idx
)

select
    samples.run_id,
    samples.sample_idx,
    samples.kernel,
    samples.physical_tile,
    samples.phase,
    samples.epoch,
    samples.kind,
    samples.operation,
    samples.offset_cycles,
    samples.duration_cycles,
    cast(samples.offset_cycles as double) / runs.clock_hz * 1e6 as offset_us,
    cast(samples.duration_cycles as double) / runs.clock_hz * 1e6 as duration_us,
    try_cast(pivoted.useful_cycles as bigint) as useful_cycles,
    try_cast(pivoted.physical_work_cycles as bigint) as physical_work_cycles,
    try_cast(pivoted.uniform_invocations as boolean) as uniform_invocations,
    from_json(pivoted.arguments, 'array<bigint>') as arguments,
    try_cast(pivoted.invocations as bigint) as invocations,
    pivoted.kernel_spec,
    pivoted.reason,
    pivoted.metadata
from samples
inner join runs on runs.run_id = samples.run_id
left join pivoted
    on pivoted.run_id = samples.run_id and pivoted.sample_idx = samples.sample_idx
