-- name: marts.op_rollup
-- grain: one row per (run, operator name) of a kernel-trace run (a CPU operator of a Kineto trace, an NVTX / roctx push-pop range of an Nsight Systems or rocprof run), plus one '(unattributed)' row per run for kernels launched outside any operator
-- purpose: GPU kernel time per operator: the kernels whose launching runtime call the operator encloses innermost (kernels, kernel_ns), and the operator's own calls and inclusive CPU time (calls, cpu_ns)
-- incremental: run_id

-- op: the innermost operator enclosing the runtime call that launched the kernel (same
-- correlation id; staging.trace_gpu_events). Operators are staging.trace_cpu_events.is_operator:
-- Kineto's CPU operators; for Nsight Systems (nsys_sqlite) the NVTX push/pop ranges (of any NVTX
-- domain) on the launching call's thread (a CUDA runtime/driver call), named by their message (see below); for
-- rocprof the roctx push/pop ranges. '(unattributed)': kernels with no launching call in the
-- trace, or whose call no operator encloses (or whose thread is not properly nested); its
-- calls and cpu_ns are 0 (but see below). Kernels are GPU activities of kind kernel (memcpy/memset are not).
-- calls, cpu_ns: every event of the operator's name in the run (nested calls of one name count
-- each, so cpu_ns can exceed the wall time).
-- op of an NVTX / roctx range (every run but a Kineto trace's) is its message up to the first
-- ", seq = <n>", ", op_id = <n>", ", sizes = " or ", input_op_ids = " (the suffixes PyTorch's
-- emit_nvtx / emit_itt appends to an operator's name, in that order, each optional): the ranges
-- "aten::addmm, seq = 23, op_id = 5, sizes = [[16, 32], [32, 8]]" and "aten::addmm, op_id = 9"
-- are one op "aten::addmm"; staging keeps the message verbatim. Kineto operator names are
-- reported verbatim. A range literally named "(unattributed)" merges with the unattributed
-- row (its kernels, calls and cpu_ns add to that row's).
with runs as (
    select run_id, series, job, source_format from staging.runs
),

-- the operator name reported: a range's message without PyTorch's emit_nvtx suffixes
gpu_named as (
    select
        gpu.run_id,
        gpu.rank,
        gpu.dur_ns,
        case
            when gpu.op is null then '(unattributed)'
            when coalesce(runs.source_format, '') = 'kineto_trace' then gpu.op
            else regexp_replace(
                gpu.op, ', (seq = -?[0-9]+|op_id = [0-9]+|sizes = |input_op_ids = ).*$', ''
            )
        end as op
    from staging.trace_gpu_events as gpu
    left join runs on runs.run_id = gpu.run_id
    where gpu.kind = 'kernel'
),

cpu_named as (
    select
        cpu.run_id,
        cpu.rank,
        cpu.dur_ns,
        case
            when coalesce(runs.source_format, '') = 'kineto_trace' then cpu.name
            else regexp_replace(
                cpu.name, ', (seq = -?[0-9]+|op_id = [0-9]+|sizes = |input_op_ids = ).*$', ''
            )
        end as op
    from staging.trace_cpu_events as cpu
    left join runs on runs.run_id = cpu.run_id
    where cpu.is_operator
),

kernels as (
    select
        gpu_named.run_id,
        gpu_named.rank,
        gpu_named.op,
        count(*) as kernels,
        sum(gpu_named.dur_ns) as kernel_ns
    from gpu_named
    group by gpu_named.run_id, gpu_named.rank, gpu_named.op
),

operators as (
    select
        cpu_named.run_id,
        min(cpu_named.rank) as rank,
        cpu_named.op,
        count(*) as calls,
        sum(cpu_named.dur_ns) as cpu_ns
    from cpu_named
    group by cpu_named.run_id, cpu_named.op
)

select
    coalesce(kernels.run_id, operators.run_id) as run_id,
    runs.series,
    runs.job,
    coalesce(kernels.rank, operators.rank) as rank,
    coalesce(kernels.op, operators.op) as op,
    coalesce(kernels.kernels, 0) as kernels,
    coalesce(kernels.kernel_ns, 0)::bigint as kernel_ns,
    coalesce(operators.calls, 0) as calls,
    coalesce(operators.cpu_ns, 0)::bigint as cpu_ns
from kernels
full outer join operators
    on operators.run_id = kernels.run_id
    and operators.op = kernels.op
left join runs on runs.run_id = coalesce(kernels.run_id, operators.run_id)
