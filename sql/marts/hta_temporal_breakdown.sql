-- name: marts.hta_temporal_breakdown
-- grain: one row per Kineto run that HolisticTraceAnalysis 0.5 can break down (it has GPU events HTA keeps)
-- purpose: HTA's get_temporal_breakdown reproduced from the warehouse (same definitions, same numbers): idle, compute and non-compute time in HTA's microseconds and their shares of HTA's kernel time; beside the plain ns figures of marts.gpu_timeline
-- incremental: run_id

-- On HTA's events (staging.hta_events: its rounding, its dropping of the last step and of
-- kernels without a CPU launch, memcpy/memset/syncs counted as kernels), per run (= HTA's rank):
-- the events sorted by start are merged into groups (a group ends when an event starts after
-- every end so far); kernel_time = the last group's end - the first group's start; idle =
-- kernel_time - the sum of the groups' lengths; compute = the same sum over COMPUTATION
-- kernels only; non_compute = kernel_time - compute - idle; each pctg = 100 * x / kernel_time
-- rounded half to even to 2 decimals (numpy's round), as HTA computes them. The groups' lengths
-- are added exactly (each rounded to 1e-9 us, a decimal sum): no order of addition moves a last
-- bit (a trace HTA does not round has fractional microseconds).
with hta as (
    select * from staging.hta_events
),

sets as (
    select run_id, 'all' as set_name, ts_us, end_us, event_idx from hta
    union all
    select run_id, 'compute' as set_name, ts_us, end_us, event_idx
    from hta
    where kernel_type = 'COMPUTATION'
),

ordered as (
    select
        sets.*,
        max(sets.end_us) over (
            partition by sets.run_id, sets.set_name
            order by sets.ts_us, sets.end_us desc, sets.event_idx
            rows between unbounded preceding and 1 preceding
        ) as reach_before
    from sets
),

grouped as (
    select
        ordered.*,
        sum(case when ordered.ts_us > ordered.reach_before then 1 else 0 end) over (
            partition by ordered.run_id, ordered.set_name
            order by ordered.ts_us, ordered.end_us desc, ordered.event_idx
            rows unbounded preceding
        ) as grp
    from ordered
),

merged as (
    select run_id, set_name, grp, min(ts_us) as ts_us, max(end_us) as end_us
    from grouped
    group by run_id, set_name, grp
),

ends as (
    select
        merged.run_id,
        merged.set_name,
        sum(cast(merged.end_us - merged.ts_us as decimal(38, 9)))::double as run_time_us,
        max(merged.grp) as last_grp
    from merged
    group by merged.run_id, merged.set_name
),

figures as (
    select
        ends.run_id,
        last_group.end_us - first_group.ts_us as kernel_time_us,
        last_group.end_us - first_group.ts_us - ends.run_time_us as idle_time_us,
        coalesce(compute.run_time_us, 0) as compute_time_us
    from ends
    inner join merged as first_group
        on first_group.run_id = ends.run_id
        and first_group.set_name = ends.set_name
        and first_group.grp = 0
    inner join merged as last_group
        on last_group.run_id = ends.run_id
        and last_group.set_name = ends.set_name
        and last_group.grp = ends.last_grp
    left join ends as compute
        on compute.run_id = ends.run_id
        and compute.set_name = 'compute'
    where ends.set_name = 'all'
),

ranks as (
    select run_id, min(rank) as rank
    from hta
    group by run_id
),

-- numpy's round(x, 2): x * 100 rounded half to even (rint), / 100
scaled as (
    select
        figures.*,
        figures.kernel_time_us - figures.compute_time_us - figures.idle_time_us
            as non_compute_time_us,
        100.0 * (figures.idle_time_us / figures.kernel_time_us) * 100.0 as idle_x,
        100.0 * (figures.compute_time_us / figures.kernel_time_us) * 100.0 as compute_x,
        100.0 * (
            (figures.kernel_time_us - figures.compute_time_us - figures.idle_time_us)
            / figures.kernel_time_us
        ) * 100.0 as non_compute_x
    from figures
)

select
    scaled.run_id,
    ranks.rank,
    scaled.idle_time_us,
    scaled.compute_time_us,
    scaled.non_compute_time_us,
    scaled.kernel_time_us,
    case
        when scaled.idle_x - floor(scaled.idle_x) = 0.5
            then floor(scaled.idle_x) + floor(scaled.idle_x) % 2
        else round(scaled.idle_x)
    end / 100.0 as idle_time_pctg,
    case
        when scaled.compute_x - floor(scaled.compute_x) = 0.5
            then floor(scaled.compute_x) + floor(scaled.compute_x) % 2
        else round(scaled.compute_x)
    end / 100.0 as compute_time_pctg,
    case
        when scaled.non_compute_x - floor(scaled.non_compute_x) = 0.5
            then floor(scaled.non_compute_x) + floor(scaled.non_compute_x) % 2
        else round(scaled.non_compute_x)
    end / 100.0 as non_compute_time_pctg
from scaled
inner join ranks on ranks.run_id = scaled.run_id
