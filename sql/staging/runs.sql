-- name: staging.runs
-- grain: one row per ingested run (run_id = raw.files.sha256)
-- purpose: run identity (series, label, captured_at; for a rank file of a distributed job: job, rank, world_size), format facts (kernel traces: tool and version; Nsight Compute: launches and untimed launches) and check status, read by every model downstream
-- incremental: run_id
with files as (
    select * from raw.files
),

profiles as (
    select * from raw.profile_runs
),

audits as (
    select * from raw.audit_documents
),

traces as (
    select * from raw.trace_runs
),

ncu_runs as (
    select * from raw.ncu_runs
),

-- a rank file of a distributed job (raw.trace_jobs; null for every other run)
jobs as (
    select * from raw.trace_jobs
),

check_status as (
    select * from checks.run_status
)

select
    files.sha256 as run_id,
    files.source_format,
    files.parser_version,
    files.series,
    files.label,
    files.captured_at,
    files.ingested_at,
    files.file_name,
    files.meta_source,
    profiles.clock_hz,
    profiles.tile_count as device_tiles,
    profiles.sample_count,
    profiles.matched_sample_count,
    profiles.samples_in_file,
    profiles.profile_span_cycles::double / profiles.clock_hz * 1e6 as profile_span_us,
    audits.row_count as signatures,
    audits.scope as audit_scope,
    coalesce(check_status.status, 'unchecked') as check_status,
    check_status.failed_invariants,
    check_status.validated_at,
    coalesce(check_status.status, 'unchecked') <> 'failed' as in_trends,
    traces.tool,
    traces.tool_version,
    traces.event_count as trace_events,
    jobs.job,
    cast(jobs.rank as varchar) as rank,
    jobs.world_size,
    jobs.job_source,
    ncu_runs.launch_count as ncu_launches,
    ncu_runs.untimed_launches
from files
left join profiles on profiles.run_id = files.sha256
left join audits on audits.run_id = files.sha256
left join traces on traces.run_id = files.sha256
left join ncu_runs on ncu_runs.run_id = files.sha256
left join jobs on jobs.run_id = files.sha256
left join check_status on check_status.run_id = files.sha256
