-- check view: gpu_timeline_invariants
-- table: marts.gpu_timeline
-- grain: one row per (run, device, step) of marts.gpu_timeline among the runs being validated
-- invariants: SCHEMA (the timeline's figures agree: busy + idle = span, each union within busy,
-- the overlap within both classes, a step's figures within the whole run's)
-- parameters: $run_ids (varchar[]): the runs being validated; nothing else is scanned
with timeline as (
    select *
    from marts.gpu_timeline
    where run_id in (select unnest($run_ids))
),

whole as (
    select run_id, device, span_ns as run_span_ns, first_start_ns as run_first_ns,
        last_end_ns as run_last_ns
    from timeline
    where step is null
)

select
    timeline.run_id,
    timeline.device,
    timeline.step,
    timeline.span_ns,
    timeline.busy_ns,
    timeline.idle_ns,
    timeline.compute_ns,
    timeline.communication_ns,
    timeline.memory_ns,
    timeline.comm_compute_overlap_ns,
    coalesce(timeline.busy_ns + timeline.idle_ns = timeline.span_ns and timeline.idle_ns >= 0,
             false) as t1_busy_plus_idle_is_span,
    coalesce(
        greatest(timeline.compute_ns, timeline.communication_ns, timeline.memory_ns)
        <= timeline.busy_ns
        and timeline.busy_ns
        <= timeline.compute_ns + timeline.communication_ns + timeline.memory_ns,
        false
    ) as t2_unions_within_busy,
    coalesce(
        timeline.comm_compute_overlap_ns >= 0
        and timeline.comm_compute_overlap_ns
        <= least(timeline.compute_ns, timeline.communication_ns),
        false
    ) as t3_overlap_within_classes,
    coalesce(
        timeline.step is null
        or (
            timeline.first_start_ns >= whole.run_first_ns
            and timeline.last_end_ns <= whole.run_last_ns
            and timeline.span_ns <= whole.run_span_ns
        ),
        false
    ) as t4_step_within_run
from timeline
left join whole
    on whole.run_id = timeline.run_id
    and whole.device is not distinct from timeline.device
order by timeline.run_id, timeline.device, timeline.step
