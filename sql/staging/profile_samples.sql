-- name: staging.profile_samples
-- grain: one row per (run, sample) of a tile profile (only the samples the file carries)
-- purpose: samples with their metadata pivoted into typed columns and cycles converted to microseconds
-- incremental: run_id
with samples as (
    select * from raw.profile_samples
),

runs as (
    select run_id, clock_hz from raw.profile_runs
),

metadata as (
    select * from raw.profile_sample_metadata
),

pivoted as (
    select
        run_id,
        sample_idx,
        arg_min(value, meta_idx) filter (where name = 'usefulCycles') as useful_cycles,
        arg_min(value, meta_idx) filter (where name = 'physicalWorkCycles') as physical_work_cycles,
        arg_min(value, meta_idx) filter (where name = 'uniformInvocations') as uniform_invocations,
        arg_min(value, meta_idx) filter (where name = 'arguments') as arguments,
        arg_min(value, meta_idx) filter (where name = 'invocations') as invocations,
        arg_min(value, meta_idx) filter (where name = 'kernelSpec') as kernel_spec,
        arg_min(value, meta_idx) filter (where name = 'reason') as reason,
        map(list(name order by meta_idx), list(value order by meta_idx)) as metadata
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
    samples.offset_cycles::double / runs.clock_hz * 1e6 as offset_us,
    samples.duration_cycles::double / runs.clock_hz * 1e6 as duration_us,
    try_cast(pivoted.useful_cycles as bigint) as useful_cycles,
    try_cast(pivoted.physical_work_cycles as bigint) as physical_work_cycles,
    try_cast(pivoted.uniform_invocations as boolean) as uniform_invocations,
    try_cast(pivoted.arguments as bigint[]) as arguments,
    try_cast(pivoted.invocations as bigint) as invocations,
    pivoted.kernel_spec,
    pivoted.reason,
    pivoted.metadata
from samples
inner join runs on runs.run_id = samples.run_id
left join pivoted
    on pivoted.run_id = samples.run_id and pivoted.sample_idx = samples.sample_idx
