-- name: staging.ncu_launches
-- grain: one row per profiled kernel launch of an Nsight Compute run (.ncu-rep report or ncu --csv export)
-- purpose: each launch's kernel (the demangled name; a CSV's Kernel Name), normalised kernel family, device, grid and block, context and stream, NVTX ranges and duration in integer ns (null when the launch has no time)
-- incremental: run_id
with ncu_runs as (
    select run_id, source_format, layout
    from raw.ncu_runs
),

launches as (
    select * from raw.ncu_launches
),

distinct_names as (
    select distinct kernel from launches
),

families as (
    select kernel, pwh_kernel_family(kernel) as kernel_family
    from distinct_names
)

select
    launches.run_id,
    ncu_runs.source_format,
    ncu_runs.layout,
    launches.launch_idx,
    launches.range_idx,
    launches.action_idx,
    launches.kernel,
    families.kernel_family,
    launches.function_name,
    launches.mangled_name,
    launches.device,
    launches.device_name,
    launches.grid,
    launches.block,
    launches.context,
    launches.stream,
    launches.nvtx,
    launches.dur_ns,
    launches.time_state,
    launches.metric_count
from launches
inner join ncu_runs on ncu_runs.run_id = launches.run_id
left join families on families.kernel = launches.kernel
