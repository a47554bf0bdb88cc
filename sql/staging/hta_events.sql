-- name: staging.hta_events
-- grain: one row per GPU event of a Kineto run as HolisticTraceAnalysis (HTA) 0.5 keeps it for its breakdowns
-- purpose: HTA's view of a trace, reproduced from the raw layer: its microsecond times (rounded as HTA rounds fractional-us traces), its GPU/CPU split, its dropping of the last step and of kernels without a CPU launch, and its kernel type; read by marts.hta_temporal_breakdown and marts.hta_kernel_type_breakdown
-- incremental: run_id

-- HTA 0.5 (hta/common/trace_parser.py, trace.py, trace_filter.py, utils/utils.py), step by step:
-- 1. events: complete events with a category other than 'Trace'; ts and dur are the doubles
--    Python's json reads from the file's decimal text (the text is rebuilt from the exact ns).
-- 2. a trace whose ts are fractional (HTA: a float ts column; here: any complete event's ts
--    not a whole us) is rounded: ts up (ceil), end = ts + dur (double) down (floor).
-- 3. stream = args.stream when it is an integer or a string of digits (Python's int(); a
--    ROCm "0x0" is -1), else -1; correlation = args.correlation (else -1);
--    GPU events: stream >= 0 and correlation >= 0, or named 'Event Sync' / 'Context Sync'.
-- 4. with two or more distinct names containing 'ProfilerStep': the CPU events starting
--    before the last ProfilerStep's start are kept, and the GPU events whose correlation one
--    of them has; the rest is dropped (the last step, kernels without a CPU launch).
-- 5. the breakdowns read the kept events with stream <> -1 ("kernels": memcpy, memset and
--    syncs included); kernel type by name: COMMUNICATION ^nccl.*Kernel, MEMORY
--    ^(Memcpy|Memset|dma), OTHER ^(.*Memcpy|Memset|.*Sync), else COMPUTATION.
with kineto_runs as (
    select trace_runs.run_id
    from raw.trace_runs as trace_runs
    where trace_runs.source_format = 'kineto_trace'
),

events as (
    select
        events.run_id,
        events.event_idx,
        events.rank,
        events.name,
        events.start_ns,
        events.dur_ns,
        case
            when regexp_matches(events.stream, '^ *[+-]?[0-9]+ *$')
                then coalesce(try_cast(trim(events.stream) as bigint), -1)
            else -1
        end as stream_h,
        coalesce(events.correlation, -1) as corr_h
    from raw.trace_events as events
    inner join kineto_runs on kineto_runs.run_id = events.run_id
    where events.category is not null and events.category <> 'Trace'
),

rounding as (
    select run_id, bool_or(start_ns % 1000 <> 0) as rounded
    from events
    group by run_id
),

-- the decimal texts of ts and dur (us), read as doubles the way Python's json reads them
texts as (
    select
        events.*,
        (
            case when events.start_ns < 0 then '-' else '' end
            || (abs(events.start_ns) // 1000)::varchar || '.'
            || lpad((abs(events.start_ns) % 1000)::varchar, 3, '0')
        )::double as ts_d,
        (
            (events.dur_ns // 1000)::varchar || '.'
            || lpad((events.dur_ns % 1000)::varchar, 3, '0')
        )::double as dur_d
    from events
),

timed as (
    select
        texts.run_id,
        texts.event_idx,
        texts.rank,
        texts.name,
        texts.stream_h,
        texts.corr_h,
        case when rounding.rounded then ceil(texts.ts_d) else texts.ts_d end as ts_us,
        case
            when rounding.rounded then floor(texts.ts_d + texts.dur_d)
            else texts.ts_d + texts.dur_d
        end as end_us,
        (texts.stream_h >= 0 and texts.corr_h >= 0)
        or texts.name in ('Event Sync', 'Context Sync') as is_gpu
    from texts
    inner join rounding on rounding.run_id = texts.run_id
),

step_names as (
    select run_id, count(distinct name) as names
    from timed
    where name like '%ProfilerStep%'
    group by run_id
),

last_step as (
    select run_id, max(ts_us) as last_start_us
    from timed
    where not is_gpu and name like '%ProfilerStep%'
    group by run_id
),

filtering as (
    select
        rounding.run_id,
        coalesce(step_names.names, 0) >= 2 as filtered,
        last_step.last_start_us
    from rounding
    left join step_names on step_names.run_id = rounding.run_id
    left join last_step on last_step.run_id = rounding.run_id
),

cpu_kept as (
    select timed.run_id, timed.event_idx, timed.corr_h
    from timed
    inner join filtering on filtering.run_id = timed.run_id
    where not timed.is_gpu and (not filtering.filtered or timed.ts_us < filtering.last_start_us)
),

launched as (
    select distinct cpu_kept.run_id, cpu_kept.corr_h
    from cpu_kept
),

kept as (
    select timed.*
    from timed
    inner join cpu_kept
        on cpu_kept.run_id = timed.run_id
        and cpu_kept.event_idx = timed.event_idx
    union all
    select timed.*
    from timed
    inner join filtering on filtering.run_id = timed.run_id
    where timed.is_gpu and not filtering.filtered
    union all
    select timed.*
    from timed
    inner join filtering on filtering.run_id = timed.run_id
    inner join launched
        on launched.run_id = timed.run_id
        and launched.corr_h = timed.corr_h
    where timed.is_gpu and filtering.filtered
)

select
    kept.run_id,
    kept.event_idx,
    kept.rank,
    kept.name,
    kept.stream_h as stream,
    kept.corr_h as correlation,
    kept.ts_us,
    kept.end_us,
    kept.is_gpu,
    case
        when regexp_matches(kept.name, '^nccl.*Kernel') then 'COMMUNICATION'
        when regexp_matches(kept.name, '^(Memcpy|Memset|dma)') then 'MEMORY'
        when regexp_matches(kept.name, '^(.*Memcpy|Memset|.*Sync)') then 'OTHER'
        else 'COMPUTATION'
    end as kernel_type
from kept
where kept.stream_h <> -1
