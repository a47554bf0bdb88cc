-- name: staging.trace_cpu_events
-- grain: one row per CPU-side event of a kernel-trace run: CPU operator, user annotation (ProfilerStep#N among them), NVTX / roctx range or runtime call
-- purpose: the CPU side with its nesting per thread: how many operators (Kineto) or NVTX / roctx push-pop ranges (Nsight Systems, rocprof) enclose each event and which is the innermost (parent_op_idx), computed exactly from integer-ns times; nesting_ok is false where the thread's operators are not properly nested
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
-- Every other event is no operator. On one thread (run, pid, tid) the events are ordered by start, then end
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
        cpu.is_free and not cpu.is_operator as is_free
    from cpu
    inner join runs_that_fit on runs_that_fit.run_id = cpu.run_id
),

ordered as (
    select
        fitting.*,
        row_number() over (
            partition by fitting.run_id, fitting.pid, fitting.tid
            order by
                fitting.start_ns,
                fitting.end_ns desc,
                case when fitting.is_operator then 0 else 1 end,
                fitting.event_idx
        ) as kpos
    from fitting
),

-- operators before each event in k order
before as (
    select
        ordered.*,
        coalesce(sum(case when ordered.is_operator then 1 else 0 end) over (
            partition by ordered.run_id, ordered.pid, ordered.tid
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
        fitting.run_id,
        fitting.pid,
        fitting.tid,
        fitting.end_ns as t,
        case when fitting.end_ns > fitting.start_ns then 0 else 2 end as prio,
        1 as is_end,
        fitting.event_idx
    from fitting
    where fitting.is_operator
    union all
    select
        fitting.run_id,
        fitting.pid,
        fitting.tid,
        fitting.start_ns as t,
        1 as prio,
        0 as is_end,
        fitting.event_idx
    from fitting
),

ended as (
    select
        points.run_id,
        points.event_idx,
        points.is_end,
        sum(points.is_end) over (
            partition by points.run_id, points.pid, points.tid
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
        slots.event_idx,
        slots.is_candidate,
        max(case when slots.is_candidate = 1 then slots.kpos end) over (
            partition by slots.run_id, slots.pid, slots.tid, slots.slot_depth
            order by slots.kpos
            rows between unbounded preceding and 1 preceding
        ) as parent_kpos
    from slots
),

parents as (
    select
        asked.run_id,
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
        depths.enclosing_ops,
        parents.parent_idx,
        parents.parent_name,
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
        and parents.event_idx = depths.event_idx
),

threads as (
    select run_id, pid, tid, bool_and(encloses or is_free) as thread_ok
    from nested
    group by run_id, pid, tid
)

select
    nested.run_id,
    nested.event_idx,
    nested.kind,
    nested.name,
    nested.pid,
    nested.tid,
    nested.rank,
    nested.start_ns,
    nested.dur_ns,
    nested.end_ns,
    nested.is_operator,
    case when threads.thread_ok and nested.encloses then nested.enclosing_ops end as depth,
    case when threads.thread_ok and nested.encloses then nested.parent_idx end as parent_op_idx,
    case when threads.thread_ok and nested.encloses then nested.parent_name end as parent_op,
    threads.thread_ok as nesting_ok
from nested
inner join threads
    on threads.run_id = nested.run_id
    and threads.pid is not distinct from nested.pid
    and threads.tid is not distinct from nested.tid
