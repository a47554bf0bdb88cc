-- name: staging.trace_cpu_events
-- grain: one row per CPU-side event of a kernel-trace run: CPU operator, user annotation (ProfilerStep#N among them), NVTX / roctx range or runtime call
-- purpose: the CPU side with its nesting per thread (per thread and NVTX domain for nsys push-pop ranges): how many operators (Kineto) or NVTX / roctx push-pop ranges (Nsight Systems, rocprof) enclose each event and which is the innermost (parent_op_idx), computed exactly from integer-ns times; nesting_ok is false where the thread's operators (of the range's domain) are not properly nested
-- incremental: run_id

-- Operators (is_operator) are, per source format (raw.trace_runs.source_format):
-- - kineto_trace: the events of kind cpu_op except ProfilerStep#N (an older trace writes its
--   steps as operators); its user annotations are never operators;
-- - nsys_sqlite: the NVTX push/pop ranges (kind annotation, category NVTX_EVENTS,
--   args.eventType 59, NvtxPushPopRange); start/end ranges (60) may overlap anything and end
--   on another thread: they are rows here but never operators;
-- - nsys_trace_csv: the rows of an nvtx_pushpop_trace report (push/pop ranges);
-- - rocprof_db: the roctx push/pop ranges of the rocTX table (kind annotation, args.__lane not
--   0: tblextr writes start/stop ranges on lane 0) longer than 1 ns (a roctxMark is written as
--   a 1 ns row);
-- - rocprof_csv: the roctx markers of a marker API trace (kind annotation) longer than 0 ns.
-- Every other event is no operator.
-- Nesting domains: NVTX push/pop ranges form a stack per thread per NVTX domain, so the ranges of
-- an nsys_sqlite run nest per (run, pid, tid, args.domainId) (no domainId: one domain); every
-- other format's operators have one domain per thread. Ranges of two domains may overlap in any
-- way. An operator is nested among the operators of its own domain only (depth, parent_op_idx,
-- nesting_ok: of its (thread, domain)); every other event (a runtime call, a free range) among
-- each domain of its thread: its depth is the number of operators of all domains enclosing it,
-- its parent_op_idx the innermost of the domains' innermost enclosing operators: the latest
-- start, then the earliest end, then the last in the file (greatest event_idx); its nesting_ok
-- is true only where every domain of its thread is properly nested (else no parent is guessed).
-- With one domain per thread (Kineto, rocprof) this is exactly the nesting per thread.
-- On one domain of a thread (run, pid, tid, domain) (run, pid, tid) the events are ordered by start, then end
-- descending, then operators before the other events, then file position ("k order": a parent
-- before its children). An operator encloses an event when it starts at or before the event's
-- start and ends at or after its end, the event not starting at the operator's end (touching is
-- disjoint; a zero-length event at an operator's start is inside it; of two events with the
-- same start and end, the one first in k order encloses the other). Where the operators are properly nested (any two are disjoint or one
-- encloses the other), the operators enclosing an event are the
-- operators before it in k order minus those that ended before it started, and its innermost
-- enclosing operator is the last operator before it in k order one level up. Both are computed
-- with window sums (no quadratic join); each parent is then verified to enclose its event
-- (start <= start and end >= end): where it does not, the thread was not properly nested and
-- nesting_ok is false for that event (its parent_op_idx is then null, never a guess). A free
-- range (an nsys / rocprof annotation that is no operator: an NVTX start/end range, a roctx
-- start/stop range or mark) may cross operators' bounds without failing its thread: its
-- depth and parent are then null.
-- A run whose times cannot be summed in bigint ns has no rows here (its checks fail it).
with cpu as (
    select
        events.run_id,
        events.event_idx,
        events.kind,
        events.name,
        events.pid,
        events.tid,
        events.rank,
        events.start_ns,
        events.dur_ns,
        coalesce(case
            when events.kind = 'cpu_op' then events.name not like 'ProfilerStep#%'
            when events.kind <> 'annotation' then false
            when trace_runs.source_format = 'nsys_sqlite'
                then events.category = 'NVTX_EVENTS'
                and regexp_matches(cast(events.args as varchar), '"eventType": *59 *[,}]')
            when trace_runs.source_format = 'nsys_trace_csv'
                then events.category = 'nvtx_pushpop_trace'
            when trace_runs.source_format = 'rocprof_db'
                then events.category = 'rocTX'
                and not regexp_matches(cast(events.args as varchar), '"__lane": *"?0"? *[,}]')
                and events.dur_ns > 1
            when trace_runs.source_format = 'rocprof_csv' then events.dur_ns > 0
            else false
        end, false) as is_operator,
        -- the nesting domain of an operator: the NVTX domain of an nsys push/pop range
        case
            when trace_runs.source_format = 'nsys_sqlite' and events.kind = 'annotation'
                then coalesce(regexp_extract(
                    cast(events.args as varchar), '"domainId": *(-?[0-9]+) *[,}]', 1
                ), '')
            else ''
        end as dom,
        -- a free range: an annotation of an nsys / rocprof run that is no operator (an NVTX
        -- start/end range, a roctx start/stop range or mark) may cross operators' bounds
        coalesce(
            events.kind = 'annotation' and trace_runs.source_format <> 'kineto_trace', false
        ) as is_free
    from raw.trace_events as events
    left join raw.trace_runs as trace_runs on trace_runs.run_id = events.run_id
    where events.kind in ('cpu_op', 'annotation', 'runtime')
),

runs_that_fit as (
    select run_id
    from cpu
    group by run_id
    having
        min(dur_ns) >= 0
        and max(start_ns::decimal(38, 0) + dur_ns::decimal(38, 0)) <= 9223372036854775807
        and max(start_ns::decimal(38, 0) + dur_ns::decimal(38, 0)) - min(start_ns)
        <= 9223372036854775807
        and sum(dur_ns::decimal(38, 0)) <= 9223372036854775807
),

fitting as (
    select
        cpu.run_id,
        cpu.event_idx,
        cpu.kind,
        cpu.name,
        cpu.pid,
        cpu.tid,
        cpu.rank,
        cpu.start_ns,
        cpu.dur_ns,
        cpu.start_ns + cpu.dur_ns as end_ns,
        cpu.is_operator,
        cpu.is_free and not cpu.is_operator as is_free,
        cpu.dom
    from cpu
    inner join runs_that_fit on runs_that_fit.run_id = cpu.run_id
),

-- the nesting domains of each thread's operators
domains as (
    select distinct run_id, pid, tid, dom
    from fitting
    where is_operator
),

-- an operator in its own domain; every other event once per domain of its thread (once on a
-- thread without operators)
placed as (
    select fitting.*
    from fitting
    where fitting.is_operator
    union all
    select
        fitting.run_id,
        fitting.event_idx,
        fitting.kind,
        fitting.name,
        fitting.pid,
        fitting.tid,
        fitting.rank,
        fitting.start_ns,
        fitting.dur_ns,
        fitting.end_ns,
        fitting.is_operator,
        fitting.is_free,
        coalesce(domains.dom, '') as dom
    from fitting
    left join domains
        on domains.run_id = fitting.run_id
        and domains.pid is not distinct from fitting.pid
        and domains.tid is not distinct from fitting.tid
    where not fitting.is_operator
),

ordered as (
    select
        placed.*,
        row_number() over (
            partition by placed.run_id, placed.pid, placed.tid, placed.dom
            order by
                placed.start_ns,
                placed.end_ns desc,
                case when placed.is_operator then 0 else 1 end,
                placed.event_idx
        ) as kpos
    from placed
),

-- operators before each event in k order
before as (
    select
        ordered.*,
        coalesce(sum(case when ordered.is_operator then 1 else 0 end) over (
            partition by ordered.run_id, ordered.pid, ordered.tid, ordered.dom
            order by ordered.kpos
            rows between unbounded preceding and 1 preceding
        ), 0) as ops_before
    from ordered
),

-- the operators before an event in k order that do not enclose it (properly nested: they ended
-- by its start) counted on one time line per thread: operator ends and event starts; the end of
-- an operator with a length at the same ns as a start is counted first (an operator encloses
-- [start, end): an event starting at its end is outside it), the end of a zero-length operator
-- after (a zero-length operator at an event's start is not before it in k order, or encloses it)
points as (
    select
        placed.run_id,
        placed.pid,
        placed.tid,
        placed.dom,
        placed.end_ns as t,
        case when placed.end_ns > placed.start_ns then 0 else 2 end as prio,
        1 as is_end,
        placed.event_idx
    from placed
    where placed.is_operator
    union all
    select
        placed.run_id,
        placed.pid,
        placed.tid,
        placed.dom,
        placed.start_ns as t,
        1 as prio,
        0 as is_end,
        placed.event_idx
    from placed
),

ended as (
    select
        points.run_id,
        points.dom,
        points.event_idx,
        points.is_end,
        sum(points.is_end) over (
            partition by points.run_id, points.pid, points.tid, points.dom
            order by points.t, points.prio, points.is_end desc
            rows between unbounded preceding and current row
        ) as ended_before
    from points
),

depths as (
    select
        before.*,
        before.ops_before - ended.ended_before as enclosing_ops
    from before
    inner join ended
        on ended.run_id = before.run_id
        and ended.dom = before.dom
        and ended.event_idx = before.event_idx
        and ended.is_end = 0
),

-- the last operator before an event in k order at the depth one above it: each operator is a
-- candidate at its own depth, each event asks at its depth - 1
slots as (
    select
        depths.run_id,
        depths.pid,
        depths.tid,
        depths.dom,
        depths.kpos,
        depths.enclosing_ops as slot_depth,
        depths.event_idx,
        1 as is_candidate
    from depths
    where depths.is_operator
    union all
    select
        depths.run_id,
        depths.pid,
        depths.tid,
        depths.dom,
        depths.kpos,
        depths.enclosing_ops - 1 as slot_depth,
        depths.event_idx,
        0 as is_candidate
    from depths
    where depths.enclosing_ops > 0
),

asked as (
    select
        slots.run_id,
        slots.pid,
        slots.tid,
        slots.dom,
        slots.event_idx,
        slots.is_candidate,
        max(case when slots.is_candidate = 1 then slots.kpos end) over (
            partition by slots.run_id, slots.pid, slots.tid, slots.dom, slots.slot_depth
            order by slots.kpos
            rows between unbounded preceding and 1 preceding
        ) as parent_kpos
    from slots
),

parents as (
    select
        asked.run_id,
        asked.dom,
        asked.event_idx,
        ordered.event_idx as parent_idx,
        ordered.name as parent_name,
        ordered.start_ns as parent_start_ns,
        ordered.end_ns as parent_end_ns
    from asked
    inner join ordered
        on ordered.run_id = asked.run_id
        and ordered.pid is not distinct from asked.pid
        and ordered.tid is not distinct from asked.tid
        and ordered.dom = asked.dom
        and ordered.kpos = asked.parent_kpos
    where asked.is_candidate = 0
),

nested as (
    select
        depths.run_id,
        depths.event_idx,
        depths.kind,
        depths.name,
        depths.pid,
        depths.tid,
        depths.rank,
        depths.start_ns,
        depths.dur_ns,
        depths.end_ns,
        depths.is_operator,
        depths.is_free,
        depths.dom,
        depths.enclosing_ops,
        parents.parent_idx,
        parents.parent_name,
        parents.parent_start_ns,
        parents.parent_end_ns,
        depths.enclosing_ops >= 0
        and (
            depths.enclosing_ops = 0
            or (
                parents.parent_idx is not null
                and parents.parent_start_ns <= depths.start_ns
                and parents.parent_end_ns >= depths.end_ns
                and (
                    depths.start_ns < parents.parent_end_ns
                    or parents.parent_end_ns = parents.parent_start_ns
                )
            )
        ) as encloses
    from depths
    left join parents
        on parents.run_id = depths.run_id
        and parents.dom = depths.dom
        and parents.event_idx = depths.event_idx
),

threads as (
    select run_id, pid, tid, dom, bool_and(encloses or is_free) as thread_ok
    from nested
    group by run_id, pid, tid, dom
),

-- how many nesting domains each thread has (1 for every Kineto and rocprof thread)
thread_domains as (
    select run_id, pid, tid, count(*) as domain_count
    from threads
    group by run_id, pid, tid
),

-- per event and domain: whether that domain's nesting holds for it
judged as (
    select
        nested.*,
        threads.thread_ok,
        threads.thread_ok and nested.encloses as placed_ok,
        thread_domains.domain_count
    from nested
    inner join threads
        on threads.run_id = nested.run_id
        and threads.pid is not distinct from nested.pid
        and threads.tid is not distinct from nested.tid
        and threads.dom = nested.dom
    inner join thread_domains
        on thread_domains.run_id = nested.run_id
        and thread_domains.pid is not distinct from nested.pid
        and thread_domains.tid is not distinct from nested.tid
),

-- an event placed once (an operator, or any event of a thread with one domain): its row
single as (
    select
        judged.run_id,
        judged.event_idx,
        judged.kind,
        judged.name,
        judged.pid,
        judged.tid,
        judged.rank,
        judged.start_ns,
        judged.dur_ns,
        judged.end_ns,
        judged.is_operator,
        judged.enclosing_ops,
        judged.parent_idx,
        judged.parent_name,
        judged.placed_ok,
        judged.thread_ok
    from judged
    where judged.is_operator or judged.domain_count = 1
),

-- an event placed in several domains: which domain's parent is the innermost (latest start,
-- then earliest end, then greatest event_idx)
ranked as (
    select
        judged.*,
        row_number() over (
            partition by judged.run_id, judged.event_idx
            order by
                case when judged.parent_idx is null or not judged.encloses then 1 else 0 end,
                judged.parent_start_ns desc,
                judged.parent_end_ns asc,
                judged.parent_idx desc
        ) as parent_rank
    from judged
    where not judged.is_operator and judged.domain_count > 1
),

multi as (
    select
        ranked.run_id,
        ranked.event_idx,
        min(ranked.kind) as kind,
        min(ranked.name) as name,
        min(ranked.pid) as pid,
        min(ranked.tid) as tid,
        min(ranked.rank) as rank,
        min(ranked.start_ns) as start_ns,
        min(ranked.dur_ns) as dur_ns,
        min(ranked.end_ns) as end_ns,
        bool_and(ranked.is_operator) as is_operator,
        sum(ranked.enclosing_ops) as enclosing_ops,
        max(case when ranked.parent_rank = 1 then ranked.parent_idx end) as parent_idx,
        max(case when ranked.parent_rank = 1 then ranked.parent_name end) as parent_name,
        bool_and(ranked.placed_ok) as placed_ok,
        bool_and(ranked.thread_ok) as thread_ok
    from ranked
    group by ranked.run_id, ranked.event_idx
),

events as (
    select * from single
    union all
    select * from multi
)

select
    events.run_id,
    events.event_idx,
    events.kind,
    events.name,
    events.pid,
    events.tid,
    events.rank,
    events.start_ns,
    events.dur_ns,
    events.end_ns,
    events.is_operator,
    case when events.placed_ok then events.enclosing_ops end as depth,
    case when events.placed_ok then events.parent_idx end as parent_op_idx,
    case when events.placed_ok then events.parent_name end as parent_op,
    events.thread_ok as nesting_ok
from events
