-- name: marts.op_rollup
-- grain: one row per (run, operator name) of a kernel-trace run (a CPU operator of a Kineto trace, an NVTX / roctx push-pop range of an Nsight Systems or rocprof run), plus one '(unattributed)' row per run for kernels launched outside any operator
-- purpose: GPU kernel time per operator: the kernels whose launching runtime call the operator encloses innermost (kernels, kernel_ns), and the operator's own calls and inclusive CPU time (calls, cpu_ns)
-- incremental: run_id

-- op: the innermost operator enclosing the runtime call that launched the kernel (same
-- correlation id; staging.trace_gpu_events). Operators are staging.trace_cpu_events.is_operator:
-- Kineto's CPU operators; for Nsight Systems (nsys_sqlite) the NVTX push/pop ranges on the
-- launching call's thread (a CUDA runtime/driver call), named by their message verbatim; for
-- rocprof the roctx push/pop ranges. '(unattributed)': kernels with no launching call in the
-- trace, or whose call no operator encloses (or whose thread is not properly nested); its
-- calls and cpu_ns are 0. Kernels are GPU activities of kind kernel (memcpy/memset are not).
-- calls, cpu_ns: every event of the operator's name in the run (nested calls of one name count
-- each, so cpu_ns can exceed the wall time).
with runs as (
    select run_id, series, job from staging.runs
),

kernels as (
    select
        gpu.run_id,
        gpu.rank,
        coalesce(gpu.op, '(unattributed)') as op,
        count(*) as kernels,
        sum(gpu.dur_ns) as kernel_ns
    from staging.trace_gpu_events as gpu
    where gpu.kind = 'kernel'
    group by gpu.run_id, gpu.rank, coalesce(gpu.op, '(unattributed)')
),

operators as (
    select
        cpu.run_id,
        min(cpu.rank) as rank,
        cpu.name as op,
        count(*) as calls,
        sum(cpu.dur_ns) as cpu_ns
    from staging.trace_cpu_events as cpu
    where cpu.is_operator
    group by cpu.run_id, cpu.name
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
