-- name: marts.kernel_run_rollup
-- grain: one row per (run, kernel) for tile profiles and conv audits, per (run, device, kernel) for kernel traces and Nsight Compute runs: every source format in one fact table
-- purpose: per-run kernel time, calls, share of the run, utilisation/occupancy, percentiles and tile imbalance
-- incremental: run_id
with runs as (
    select * from staging.runs
),

profile_kernels as (
    select * from staging.profile_kernels
),

samples as (
    select * from staging.profile_samples
),

tile_busy as (
    select run_id, kernel, physical_tile, sum(duration_cycles) as busy_cycles
    from samples
    group by run_id, kernel, physical_tile
),

imbalance as (
    select
        run_id,
        kernel as kernel_name,
        max(busy_cycles) / avg(busy_cycles) as tile_imbalance,
        count(*) as imbalance_tiles,
        sum(busy_cycles) as sampled_cycles
    from tile_busy
    group by run_id, kernel
),

profile_sample_counts as (
    select run_id, kernel as kernel_name, count(*) as samples_in_file
    from samples
    group by run_id, kernel
),

-- the raw kernel name whose parts (family, arch, tile, precision) a kernel shows when several
-- raw names share its short name (e.g. a mixed-precision build): the one with the most time in
-- the run, ties to the smallest raw name (docs/analyst-guide.md, "Where values meet")
profile_names as (
    select
        run_id,
        kernel,
        kernel_family,
        kernel_arch,
        kernel_tile,
        kernel_precision,
        row_number() over (
            partition by run_id, kernel order by phase_cycles desc, kernel_name
        ) as pick
    from profile_kernels
),

-- sums of floating-point values are exact decimal sums (each value rounded to 1e-9), so that
-- the order in which rows arrive cannot change a result's last bits
profile_rollup as (
    select
        pk.run_id,
        pk.kernel,
        min(pn.kernel_family) as kernel_family,
        min(pn.kernel_arch) as kernel_arch,
        min(pn.kernel_tile) as kernel_tile,
        min(pn.kernel_precision) as kernel_precision,
        count(*) as raw_names,
        sum(pk.calls)::bigint as calls,
        sum(try_cast(pk.total_us as decimal(38, 9)))::double as total_us,
        sum(try_cast(pk.work_us as decimal(38, 9)))::double / sum(pk.calls) as mean_us,
        max(pk.p50_us) as p50_us,
        max(pk.p95_us) as p95_us,
        max(pk.max_us) as max_us,
        sum(try_cast(pk.useful_cycles as decimal(38, 9)))::double
            / nullif(sum(pk.estimated_work_cycles), 0) as useful_utilization,
        sum(try_cast(pk.useful_cycles as decimal(38, 9)))
            filter (where pk.device_useful_utilization is not null)::double
            / nullif(sum(pk.phase_cycles::decimal(38, 0) * pk.device_tiles)
                filter (where pk.device_useful_utilization is not null), 0)::double
            as device_useful_utilization,
        sum(try_cast(pk.work_lane_occupancy * pk.work_cycles as decimal(38, 9)))::double
            / nullif(sum(pk.work_cycles) filter (where pk.work_lane_occupancy is not null), 0)
            as work_lane_occupancy,
        sum(pk.work_cycles)::double / nullif(sum(pk.phase_cycles), 0) as average_active_tiles,
        max(pk.tiles) as tiles,
        null::bigint as signatures,
        sum(coalesce(sc.samples_in_file, 0))::bigint as samples_in_file,
        max(im.tile_imbalance) as tile_imbalance,
        null::varchar as device,
        null::varchar as streams,
        null::varchar as ranks,
        null::bigint as total_ns
    from profile_kernels as pk
    left join profile_sample_counts as sc
        on sc.run_id = pk.run_id and sc.kernel_name = pk.kernel_name
    left join imbalance as im
        on im.run_id = pk.run_id and im.kernel_name = pk.kernel_name
    left join profile_names as pn
        on pn.run_id = pk.run_id and pn.kernel = pk.kernel and pn.pick = 1
    group by pk.run_id, pk.kernel
),

-- the same rule for conv audits: the raw name with the most launch time (an exact sum)
audit_names as (
    select
        run_id,
        kernel,
        kernel_family,
        kernel_arch,
        kernel_tile,
        kernel_precision,
        row_number() over (
            partition by run_id, kernel
            order by sum(try_cast(duration_us as decimal(38, 9))) desc nulls last, kernel_name
        ) as pick
    from staging.audit_kernels
    group by
        run_id, kernel, kernel_name, kernel_family, kernel_arch, kernel_tile, kernel_precision
),

audit_rollup as (
    select
        ak.run_id,
        ak.kernel,
        min(an.kernel_family) as kernel_family,
        min(an.kernel_arch) as kernel_arch,
        min(an.kernel_tile) as kernel_tile,
        min(an.kernel_precision) as kernel_precision,
        count(distinct ak.kernel_name) as raw_names,
        count(*) as calls,
        sum(try_cast(ak.duration_us as decimal(38, 9)))::double as total_us,
        sum(try_cast(ak.duration_us as decimal(38, 9)))::double
            / nullif(count(ak.duration_us), 0) as mean_us,
        null::double as p50_us,
        null::double as p95_us,
        null::double as max_us,
        null::double as useful_utilization,
        null::double as device_useful_utilization,
        null::double as work_lane_occupancy,
        null::double as average_active_tiles,
        null::bigint as tiles,
        count(distinct ak.row_idx) as signatures,
        null::bigint as samples_in_file,
        null::double as tile_imbalance,
        null::varchar as device,
        null::varchar as streams,
        null::varchar as ranks,
        null::bigint as total_ns
    from staging.audit_kernels as ak
    left join audit_names as an
        on an.run_id = ak.run_id and an.kernel = ak.kernel and an.pick = 1
    group by ak.run_id, ak.kernel
),

trace_rollup as (
    select
        run_id,
        kernel,
        min(kernel_family) as kernel_family,
        null::varchar as kernel_arch,
        null::varchar as kernel_tile,
        null::varchar as kernel_precision,
        1::bigint as raw_names,
        sum(calls)::bigint as calls,
        sum(total_ns) / 1000.0 as total_us,
        sum(total_ns) / 1000.0 / nullif(sum(calls), 0) as mean_us,
        null::double as p50_us,
        null::double as p95_us,
        max(max_ns) / 1000.0 as max_us,
        null::double as useful_utilization,
        null::double as device_useful_utilization,
        null::double as work_lane_occupancy,
        null::double as average_active_tiles,
        null::bigint as tiles,
        null::bigint as signatures,
        null::bigint as samples_in_file,
        null::double as tile_imbalance,
        device,
        string_agg(distinct stream, ',' order by stream) as streams,
        string_agg(distinct rank, ',' order by rank) as ranks,
        sum(total_ns)::bigint as total_ns
    from staging.trace_kernels
    group by run_id, device, kernel
),

-- Nsight Compute: calls = launches; total_ns sums the timed launches, null when none is timed
-- (staging.runs.untimed_launches says how many launches of the run have no time)
ncu_rollup as (
    select
        run_id,
        kernel,
        min(kernel_family) as kernel_family,
        null::varchar as kernel_arch,
        null::varchar as kernel_tile,
        null::varchar as kernel_precision,
        count(distinct coalesce(function_name, kernel)) as raw_names,
        count(*)::bigint as calls,
        sum(dur_ns) / 1000.0 as total_us,
        sum(dur_ns) / 1000.0 / nullif(count(dur_ns), 0) as mean_us,
        null::double as p50_us,
        null::double as p95_us,
        max(dur_ns) / 1000.0 as max_us,
        null::double as useful_utilization,
        null::double as device_useful_utilization,
        null::double as work_lane_occupancy,
        null::double as average_active_tiles,
        null::bigint as tiles,
        null::bigint as signatures,
        null::bigint as samples_in_file,
        null::double as tile_imbalance,
        device,
        string_agg(distinct stream::varchar, ',' order by stream::varchar) as streams,
        null::varchar as ranks,
        sum(dur_ns)::bigint as total_ns
    from staging.ncu_launches
    group by run_id, device, kernel
),

unioned as (
    select * from profile_rollup
    union all by name
    select * from audit_rollup
    union all by name
    select * from trace_rollup
    union all by name
    select * from ncu_rollup
)

select
    unioned.run_id,
    runs.series,
    runs.label,
    runs.captured_at,
    runs.source_format,
    unioned.kernel,
    unioned.kernel_family,
    unioned.kernel_arch,
    unioned.kernel_tile,
    unioned.kernel_precision,
    unioned.raw_names,
    unioned.calls,
    unioned.total_us,
    unioned.total_us / sum(try_cast(unioned.total_us as decimal(38, 9))) over (
        partition by unioned.run_id
    )::double as share_of_run,
    row_number() over (
        partition by unioned.run_id
        order by unioned.total_us desc, unioned.kernel, unioned.device nulls first
    ) as rank_in_run,
    unioned.mean_us,
    unioned.p50_us,
    unioned.p95_us,
    unioned.max_us,
    unioned.useful_utilization,
    unioned.device_useful_utilization,
    unioned.work_lane_occupancy,
    unioned.average_active_tiles,
    unioned.tiles,
    unioned.signatures,
    unioned.samples_in_file,
    unioned.tile_imbalance,
    runs.check_status,
    unioned.device,
    unioned.streams,
    unioned.ranks,
    unioned.total_ns
from unioned
inner join runs on runs.run_id = unioned.run_id
order by unioned.run_id, rank_in_run
