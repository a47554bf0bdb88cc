-- name: marts.run_summary
-- grain: one row per ingested run
-- purpose: what each run is (format, series, label, capture time), its total kernel time, top kernel and check status
-- incremental: run_id
with runs as (
    select * from staging.runs
),

kernels as (
    select * from marts.kernel_run_rollup
),

totals as (
    select run_id, sum(total_us) as total_us, count(*) as kernel_count
    from kernels
    group by run_id
),

top_kernel as (
    select run_id, kernel as top_kernel, share_of_run as top_kernel_share
    from kernels
    where rank_in_run = 1
)

select
    runs.run_id,
    runs.source_format,
    runs.series,
    runs.label,
    runs.captured_at,
    coalesce(totals.total_us, 0) as total_us,
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
    runs.meta_source
from runs
left join totals on totals.run_id = runs.run_id
left join top_kernel on top_kernel.run_id = runs.run_id
order by runs.series, runs.captured_at, runs.run_id
