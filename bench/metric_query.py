"""The analyst's ``marts.metric_trends`` query for one kernel, at issue 21's target size.

    python -m bench.metric_query                 # 20 kernels x 1,000 metrics x 1,000 labels (20 M rows)
    python -m bench.metric_query --quick         # 20 x 100 x 100 (0.2 M rows): keeps it working
    python -m bench.metric_query --layout name   # the old layout (ordered by the kernel name) beside

Issue 21's goal: on a history of 1,000 reports x 20 launches x 1,000 metrics, a
``marts.metric_trends`` query for one kernel <= 100 ms. One kernel there is 1,000 metrics x
1,000 labels = 1 M rows of the mart's ~20 M. Building that history through the verdict engine
takes hours (``bench/ncu_build.py`` measures the build at smaller sizes), so this bench writes a
table of the mart's columns and types (``tests/test_metric_trends_layout.py`` checks them
against the built model) and the model's physical layout (:data:`ORDER`: rows ordered by
``series, kernel_key, metric, label_seq``, as ``sql/marts/metric_trends.sql`` writes them) with
realistic values: 20 demangled CUTLASS kernel names of 0.3 to 6 KB sharing a 130-byte prefix
(DuckDB's VARCHAR zonemaps keep only the first bytes: a filter on such a name alone prunes
nothing), 1,000 metric names, one run per label, the evidence text of the engine's usual
``mad_guard`` verdict. It is published as the analysts' snapshot (``pwh snapshot``'s code) and
queried through ``warehouse.connect()`` (the analyst connection of ``pwh sql`` and notebooks).

Queries (the analyst guide's recommended filter, :data:`FILTER`; median of ``--reps``, warm):

* ``trend``: the kernel's trend, the columns an analyst plots or tabulates
  (:data:`TREND_COLUMNS`), fetched as Arrow by ``con.sql(sql, params=…).to_arrow_table()``
  (``.pl()`` is the same plus polars); its rows come in (metric, label_seq) order, the order
  they are stored in (DuckDB keeps it for a query without ORDER BY);
* ``trend, execute``: the same through ``con.execute(sql, params).arrow()`` (DuckDB 2.0 copies
  a DB-API result once more before the Arrow conversion);
* ``trend, ordered``: ``trend`` with ``order by metric, label_seq`` (a sort of 1 M rows);
* ``count``: ``count(*)`` of the same rows: the scan and filter alone, no fetch;
* ``all``: ``select *`` of the same rows as Arrow (the evidence text and run_values lists: what
  a wide fetch costs);
* ``name only``: ``trend`` filtered on ``series`` and ``kernel`` alone (no ``kernel_key``):
  what happens without the recommended filter.

Wall and CPU (the process's, every DuckDB thread) of each; ``--json PATH`` writes them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

SERIES = "bench-ncu"
# the mart's physical order (sql/marts/metric_trends.sql's final ORDER BY, without its
# tie-breakers that never apply here)
ORDER = ("series", "kernel_key", "metric", "label_seq")
NAME_ORDER = ("series", "kernel", "metric", "label_seq")  # the layout before kernel_key
KEY_SQL = "('0x' || left(md5({}), 15))::bigint"  # kernel_key as a function of the kernel name
FILTER = f"series = $series and kernel_key = {KEY_SQL.format('$kernel')} and kernel = $kernel"
NAME_FILTER = "series = $series and kernel = $kernel"
TREND_COLUMNS = ("metric", "unit", "label", "label_seq", "median", "baseline_median",
                 "delta_pct", "verdict")
SIZES = {"full": (20, 1000, 1000), "quick": (20, 100, 100)}  # kernels, metrics, labels

# column, type: the model's (tests/test_metric_trends_layout.py compares with a built mart)
COLUMNS = (
    ("series", "VARCHAR"), ("source_format", "VARCHAR"), ("kernel", "VARCHAR"),
    ("kernel_key", "BIGINT"), ("metric", "VARCHAR"), ("unit", "VARCHAR"),
    ("lower_is_better", "BOOLEAN"), ("label", "VARCHAR"), ("label_seq", "BIGINT"),
    ("captured_at", "TIMESTAMP"), ("repeats", "BIGINT"), ("run_values", "DOUBLE[]"),
    ("median", "DOUBLE"), ("baseline_from_label", "VARCHAR"), ("baseline_labels", "BIGINT"),
    ("baseline_runs", "BIGINT"), ("baseline_median", "DOUBLE"), ("baseline_mad", "DOUBLE"),
    ("delta_pct", "DOUBLE"), ("p_value", "DOUBLE"), ("q_value", "DOUBLE"),
    ("min_detectable_pct", "DOUBLE"), ("confirmed_by_label", "VARCHAR"), ("method", "VARCHAR"),
    ("verdict", "VARCHAR"), ("engine_verdict", "VARCHAR"), ("evidence", "VARCHAR"),
    ("change_point", "BOOLEAN"), ("floor_pct", "DOUBLE"), ("alpha", "DOUBLE"),
)

_TILES = ((128, 128, 32), (128, 256, 64), (256, 128, 32), (64, 64, 64), (128, 64, 32))
_ITER = ("cutlass::transform::threadblock::PredicatedTileAccessIterator<cutlass::MatrixShape<"
         "{m}, {k}>, cutlass::half_t, cutlass::layout::RowMajor, {i}, cutlass::transform::"
         "PitchLinearWarpRakedThreadMap<cutlass::PitchLinearShape<{k}, {m}>, 128, cutlass::"
         "PitchLinearShape<4, 8>, 8>, cutlass::AlignedArray<cutlass::half_t, 8, 16>, false>, ")


def kernel_names(n: int) -> list[str]:
    """``n`` demangled CUTLASS kernel names, 0.3 to 6 KB: a 130-byte shared prefix, the tile
    shape and stages late in the name, nested iterator types repeated (real names of 4-7 KB
    are made so)."""
    out = []
    for k in range(n):
        m, nn, kk = _TILES[k % len(_TILES)]
        stages = 3 + k // len(_TILES)
        repeat = (0, 1, 3, 8, 20)[k % 5]
        body = "".join(_ITER.format(m=m, k=kk, i=i) for i in range(repeat))
        out.append("void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::"
                   "threadblock::MmaMultistage<cutlass::gemm::GemmShape<"
                   f"{m}, {nn}, {kk}>, {body}cutlass::arch::OpMultiplyAdd, {stages}>, "
                   f"cutlass_80_tensorop_f16_s16816gemm_relu_f16_{m}x{nn}_{kk}x{stages}_nn_align8"
                   ">::Params)")
    return out


def metric_names(n: int) -> list[str]:
    """``n`` (<= 1,000) Nsight Compute-style metric names: unit__counter.rollup."""
    units = ("sm", "smsp", "dram", "lts", "l1tex", "gpu", "gpc", "tpc", "fbpa", "pcie")
    counters = ("throughput", "cycles_elapsed", "cycles_active", "inst_executed",
                "warps_active", "bytes", "sectors", "requests",
                "pipe_tensor_op_hmma_cycles_active", "memory_throughput")
    rollups = ("sum", "avg", "max", "min", "avg.pct_of_peak_sustained_elapsed",
               "sum.per_second", "avg.per_cycle_active", "sum.pct_of_peak_sustained_active",
               "max.pct_of_peak_sustained_elapsed", "avg.peak_sustained")
    names = [f"{u}__{c}.{r}" for u in units for c in counters for r in rollups]
    if n > len(names):
        raise ValueError(f"at most {len(names)} metric names")
    return names[:n]


def make_mart(con, *, kernels: int, metrics: int, labels: int, order=ORDER) -> int:
    """Create ``marts.metric_trends`` on ``con`` (a read-write DuckDB connection) with
    ``kernels x metrics x labels`` rows in ``order``; returns the row count. Rows are written
    kernel by kernel (in the order's kernel order) from an (metric, label) table sorted once:
    no sort of the long names."""
    names = kernel_names(kernels)
    vals = con.execute("select " + ", ".join(KEY_SQL.format("?") for _ in names),
                       names).fetchall()[0]
    keys = dict(zip(names, vals, strict=True))
    by = "kernel_key" if "kernel_key" in order else "kernel"
    names.sort(key=lambda n: (keys[n], n) if by == "kernel_key" else n.encode())
    mets = sorted(metric_names(metrics), key=str.encode)
    con.execute("create schema if not exists marts")
    cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
    con.execute(f"create or replace table marts.metric_trends ({cols})")
    con.execute("create or replace temp table pwh_ml as "
                "select m.i as m, m.metric, l.l from "
                "(select unnest(?) as metric, generate_subscripts(?, 1) - 1 as i) as m, "
                "range(?) as l(l) order by m.metric, l.l", [mets, mets, labels])
    units = ("case when metric like '%pct%' then '%' when metric like '%bytes%' then 'byte' "
             "when metric like '%cycles%' then 'cycle' when metric like '%per_second' "
             "then '1/s' else '' end")
    for k, name in enumerate(names):
        base = "((100.0 + m) * (1 + 0.5 * $k))"
        v = f"({base} * (1 + ((hash($k, m, l) % 2001)::double - 1000) / 100000))"
        nb = "least(l, 10)"
        con.execute(f"""
            insert into marts.metric_trends
            select
                $series, 'ncu_csv', $kernel, $key, metric, {units},
                metric like '%cycles_elapsed%', 'b' || lpad(l::varchar, 6, '0'), l,
                timestamp '2026-01-01' + to_hours(l), 1, [{v}], {v},
                case when l > 0 then 'b' || lpad(greatest(l - 10, 0)::varchar, 6, '0') end,
                {nb}, {nb}, case when l > 0 then {base} end,
                case when l > 0 then {base} * 0.003 end,
                case when l > 0 then ({v} / {base} - 1) * 100 end,
                null, null, case when l > 0 then 5.0 + (hash(m, l) % 100) / 10 end, null,
                case when l = 0 then 'none' else 'mad_guard' end,
                'inconclusive', 'inconclusive',
                case when l = 0 then 'no baseline: first label of this kernel in the series'
                else printf('%+.1f%% vs median of %d labels within max(3·MAD of label '
                    || 'medians=%.1f%%, 3·MAD of runs=%.1f%%, floor 5%%); too few runs for a '
                    || 'rank test (1 run vs %d baseline runs, smallest attainable p=0.18; a '
                    || 'rank test needs ≥ 2 runs of this label), so no claim of ''unchanged''',
                    ({v} / {base} - 1) * 100, {nb}, (hash(m, l) % 30) / 10,
                    (hash(m, l) % 30) / 10, {nb}) end,
                false, 5.0, 0.05
            from pwh_ml
        """, {"series": SERIES, "kernel": name, "key": keys[name], "k": k})  # noqa: S608
    con.execute("drop table pwh_ml")
    return con.execute("select count(*) from marts.metric_trends").fetchall()[0][0]


def build(work: Path, *, kernels: int, metrics: int, labels: int, order=ORDER, log=print):
    """A warehouse under ``work`` holding only the generated mart, published as the analysts'
    snapshot; returns its settings."""
    from warehouse import db
    from warehouse.config import settings
    from warehouse.serving import snapshot

    s = settings(work / "state" / "warehouse.duckdb")
    if snapshot.current(s) is not None:
        log(f"{s.warehouse}: reusing the generated mart")
        return s
    t = time.perf_counter()
    with db.writer(s.warehouse) as con:
        con.execute("BEGIN TRANSACTION")
        rows = make_mart(con, kernels=kernels, metrics=metrics, labels=labels, order=order)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        log(f"generated marts.metric_trends: {rows:,} rows ({', '.join(order)}) in "
            f"{time.perf_counter() - t:.1f} s")
        snapshot.publish(s, con)
    return s


def queries(with_key: bool = True) -> dict[str, str]:
    where = FILTER if with_key else NAME_FILTER
    cols = ", ".join(TREND_COLUMNS)
    trend = f"select {cols} from marts.metric_trends where {where}"
    out = {"trend": trend, "trend, execute": trend,
           "trend, ordered": f"{trend} order by metric, label_seq",
           "count": f"select count(*) from marts.metric_trends where {where}",
           "all": f"select * from marts.metric_trends where {where}"}
    if with_key:
        out["name only"] = f"select {cols} from marts.metric_trends where {NAME_FILTER}"
    return out


def measure(s, *, reps: int, with_key: bool = True) -> dict[str, dict]:
    """{query: {wall_ms, cpu_ms, rows, sql}}: each query's median over ``reps`` (after one warm
    run), fetched to the end (Arrow for row results) on one analyst connection."""
    import warehouse

    con = warehouse.connect(s.warehouse)
    try:
        kernel = con.execute("select kernel from marts.metric_trends limit 1").fetchall()[0][0]
        args = {"series": SERIES, "kernel": kernel}
        out = {}
        for name, sql in queries(with_key).items():
            def run(sql=sql, name=name):
                if name.endswith("execute"):  # the DB-API path: DuckDB copies the rows first
                    return con.execute(sql, args).arrow().read_all()
                return con.sql(sql, params=args).to_arrow_table()

            got = run()
            walls, cpus = [], []
            for _ in range(reps):
                t, c = time.perf_counter(), time.process_time()
                got = run()
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
            rows = got.column(0)[0].as_py() if name == "count" else got.num_rows
            out[name] = {"wall_ms": statistics.median(walls) * 1000,
                         "cpu_ms": statistics.median(cpus) * 1000, "rows": rows, "sql": sql}
        return out
    finally:
        con.close()


def table(res: dict) -> str:
    lines = [f"marts.metric_trends of {res['rows']:,} rows ({res['kernels']} kernels "
             f"x {res['metrics']} metrics x {res['labels']} labels), analyst connection to the "
             "snapshot, median of "
             f"{res['reps']} (goal: trend <= 100 ms)",
             "  layout                       query             wall ms    CPU ms      rows"]
    for layout, qs in res["layouts"].items():
        for q, m in qs.items():
            lines.append(f"  {layout:28s} {q:15s} {m['wall_ms']:9.1f} {m['cpu_ms']:9.1f} "
                         f"{m['rows']:9,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.metric_query", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20 x 100 x 100 (0.2 M rows)")
    ap.add_argument("--reps", type=int, default=7, help="timed runs per query (7)")
    ap.add_argument("--layout", choices=("key", "name", "both"), default="key",
                    help="key: the model's layout (ordered by kernel_key); name: ordered by "
                         "the kernel name, filtered by name (the layout before kernel_key); "
                         "both (default: key)")
    ap.add_argument("--work", type=Path, default=None,
                    help="work folder, kept: a later run with the same folder reuses its "
                         "generated marts (default: a temporary one, deleted)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    kernels, metrics, labels = SIZES["quick" if a.quick else "full"]

    def log(m):
        print(m, file=sys.stderr, flush=True)

    tmp = None
    work = a.work
    if work is None:
        tmp = tempfile.mkdtemp(prefix="pwh-bench-metric-query-")
        work = Path(tmp)
    res = {"kernels": kernels, "metrics": metrics, "labels": labels,
           "rows": kernels * metrics * labels, "reps": a.reps, "layouts": {}}
    try:
        for layout in (("key", "name") if a.layout == "both" else (a.layout,)):
            order = ORDER if layout == "key" else NAME_ORDER
            s = build(work / layout, kernels=kernels, metrics=metrics, labels=labels,
                      order=order, log=log)
            name = "by kernel_key" if layout == "key" else "by kernel name (before)"
            res["layouts"][name] = measure(s, reps=a.reps, with_key=layout == "key")
            if tmp:
                shutil.rmtree(work / layout, ignore_errors=True)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
