-- name: marts.run_summary (Spark override)
-- purpose: the part of run_summary.sql that would change meaning when transpiled to Spark
-- base: f9450bb11d8f
-- device_times: list({…} order by device nulls first) -> the structs sorted by (device is not
--   null, device) then unwrapped (collect_list keeps no order; a struct is never NULL, so
--   nothing is dropped; a group has at least one row, so never [] for NULL);
--   string_agg(distinct x order by x) -> the sorted distinct values joined, NULL when there
--   are none (as string_agg)
with device_times as (
    select
        run_id,
        cast(sum(kernel_calls) as bigint) as kernel_calls,
        cast(sum(busy_ns) as double) / 1000.0 as busy_us,
        count(*) as devices,
        case when count(device_name) = 0 then null
             else array_join(array_sort(collect_set(device_name)), ', ') end as device_names,
        transform(
            array_sort(collect_list(named_struct(
                'has_device', device is not null,
                'device_key', device,
                'v', named_struct(
                    'device', device,
                    'device_name', device_name,
                    'kernel_calls', kernel_calls,
                    'kernel_us', kernel_us,
                    'busy_us', busy_us
                )
            ))),
            e -> e.v
        ) as per_device
    from trace_devices
    group by run_id
)

select * from model
