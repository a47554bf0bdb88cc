-- name: marts.hta_kernel_type_breakdown
-- grain: one row per (Kineto run, HTA kernel type or overlap of types) with time in it
-- purpose: HTA 0.5's kernel-type breakdown (get_gpu_kernel_breakdown, memory kernels included) reproduced from the warehouse: time with COMPUTATION, COMMUNICATION and MEMORY kernels running, and each overlap of them ('COMPUTATION overlapping COMMUNICATION', ...), in HTA's microseconds and as a share of their sum
-- incremental: run_id

-- On HTA's events (staging.hta_events): per type (COMPUTATION = 1, COMMUNICATION = 2, MEMORY =
-- 4) the events are merged into groups (as marts.hta_temporal_breakdown merges them); each
-- group adds its bit at its start and removes it at its end; between consecutive times the
-- running sum names the types running (in that order, joined by ' overlapping '); sum_us = the
-- time spent with each running set; percentage = 100 * sum_us / the run's total, rounded half
-- to even to 1 decimal. Sets with no time are not rows (HTA may list them with sum 0).
with hta as (
    select * from staging.hta_events
),

typed as (
    select
        run_id,
        kernel_type,
        case kernel_type when 'COMPUTATION' then 1 when 'COMMUNICATION' then 2 else 4 end
            as bit,
        ts_us,
        end_us,
        event_idx
    from hta
    where kernel_type in ('COMPUTATION', 'COMMUNICATION', 'MEMORY')
),

ordered as (
    select
        typed.*,
        max(typed.end_us) over (
            partition by typed.run_id, typed.kernel_type
            order by typed.ts_us, typed.end_us desc, typed.event_idx
            rows between unbounded preceding and 1 preceding
        ) as reach_before
    from typed
),

grouped as (
    select
        ordered.*,
        sum(case when ordered.ts_us > ordered.reach_before then 1 else 0 end) over (
            partition by ordered.run_id, ordered.kernel_type
            order by ordered.ts_us, ordered.end_us desc, ordered.event_idx
            rows unbounded preceding
        ) as grp
    from ordered
),

merged as (
    select run_id, bit, grp, min(ts_us) as ts_us, max(end_us) as end_us
    from grouped
    group by run_id, bit, grp
),

points as (
    select run_id, ts_us as t, bit as delta from merged
    union all
    select run_id, end_us as t, -bit as delta from merged
),

at_times as (
    select run_id, t, sum(delta) as delta
    from points
    group by run_id, t
),

running as (
    select
        run_id,
        t,
        sum(delta) over (partition by run_id order by t rows unbounded preceding) as running,
        lead(t) over (partition by run_id order by t) - t as dur_us
    from at_times
),

labelled as (
    select
        run_id,
        concat_ws(
            ' overlapping ',
            case when running & 1 <> 0 then 'COMPUTATION' end,
            case when running & 2 <> 0 then 'COMMUNICATION' end,
            case when running & 4 <> 0 then 'MEMORY' end
        ) as kernel_type,
        dur_us
    from running
    where running > 0 and dur_us is not null
),

-- exact sums (each duration rounded to 1e-9 us, a decimal sum): no order of addition moves a
-- last bit, a zero or a rounded percentage (a trace HTA does not round has fractional us)
sums as (
    select run_id, kernel_type, sum(cast(dur_us as decimal(38, 9))) as sum_exact
    from labelled
    group by run_id, kernel_type
    having sum(cast(dur_us as decimal(38, 9))) <> 0
),

ranks as (
    select run_id, min(rank) as rank
    from hta
    group by run_id
),

shares as (
    select
        sums.run_id,
        sums.kernel_type,
        sums.sum_exact::double as sum_us,
        sums.sum_exact::double
        / (sum(sums.sum_exact) over (partition by sums.run_id))::double * 100.0 * 10.0 as x
    from sums
)

-- numpy's round(x, 1): x * 10 rounded half to even (rint), / 10
select
    shares.run_id,
    ranks.rank,
    shares.kernel_type,
    shares.sum_us,
    case
        when shares.x - floor(shares.x) = 0.5 then floor(shares.x) + floor(shares.x) % 2
        else round(shares.x)
    end / 10.0 as percentage
from shares
inner join ranks on ranks.run_id = shares.run_id
