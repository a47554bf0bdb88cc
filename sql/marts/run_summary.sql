-- name: marts.run_summary
-- grain: one row per ingested run
-- purpose: what each run is (format, series, label, capture time, tool and version), its total kernel time, top kernel and check status; for kernel traces the kernel calls, busy time (union of kernel intervals) and per-device kernel and busy time
-- incremental: run_id
with runs as (
    select * from staging.runs
),

kernels as (
    select * from marts.kernel_run_rollup
),

-- one row per (run, kernel): a trace's rollup has a row per device, a kernel counts once
-- sums of floating-point microseconds are exact decimal sums (each value rounded to 1e-9 us):
-- the order in which rows arrive cannot change a total, nor which kernel is on top
kernel_totals as (
    select run_id, kernel, sum(try_cast(total_us as decimal(38, 9))) as total_us
    from kernels
    group by run_id, kernel
),

totals as (
    select run_id, sum(total_us) as total_us, count(*) as kernel_count
    from kernel_totals
    group by run_id
),

trace_devices as (
    select * from staging.trace_devices
),

device_times as (
    select
        run_id,
        sum(kernel_calls)::bigint as kernel_calls,
        sum(busy_ns) / 1000.0 as busy_us,  -- an integer sum: the same in any order
        count(*) as devices,
        string_agg(distinct device_name, ', ' order by device_name) as device_names,
        list({
            'device': device,
            'device_name': device_name,
            'kernel_calls': kernel_calls,
            'kernel_us': kernel_us,
            'busy_us': busy_us
        } order by device nulls first) as per_device
    from trace_devices
    group by run_id
),

ranked_kernels as (
    select
        kernel_totals.run_id,
        kernel_totals.kernel,
        kernel_totals.total_us::double / totals.total_us::double as share_of_run,
        row_number() over (
            partition by kernel_totals.run_id
            order by kernel_totals.total_us desc, kernel_totals.kernel
        ) as rank_in_run
    from kernel_totals
    inner join totals on totals.run_id = kernel_totals.run_id
),

top_kernel as (
    select run_id, kernel as top_kernel, share_of_run as top_kernel_share
    from ranked_kernels
    where rank_in_run = 1
)

select
    runs.run_id,
    runs.source_format,
    runs.series,
    runs.label,
    runs.captured_at,
    coalesce(totals.total_us::double, 0) as total_us,
    coalesce(totals.kernel_count, 0) as kernel_count,
    top_kernel.top_kernel,
    top_kernel.top_kernel_share,
    runs.check_status,
    runs.failed_invariants,
    runs.validated_at,
    runs.in_trends,
    runs.profile_span_us,
    runs.sample_count,
    runs.samples_in_file,
    runs.signatures,
    runs.audit_scope,
    runs.parser_version,
    runs.file_name,
    runs.ingested_at,
    runs.tool,
    runs.tool_version,
    case when runs.tool is not null then coalesce(device_times.kernel_calls, 0) end
        as kernel_calls,
    device_times.busy_us,
    device_times.device_names,
    device_times.per_device,
    runs.meta_source,
    runs.untimed_launches
from runs
left join totals on totals.run_id = runs.run_id
left join top_kernel on top_kernel.run_id = runs.run_id
left join device_times on device_times.run_id = runs.run_id
order by runs.series, runs.captured_at, runs.run_id
