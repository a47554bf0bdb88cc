"""Every model column is a function of the raw layer alone: whatever the build path (incremental
batches or a full rebuild), the physical order of the raw rows and DuckDB's thread count.

The history is made to provoke choices: a conv-audit kernel whose launches carry two precisions
with exactly tied times (sums that differ in the last bit when added in another order: 0.1 +
0.2 + 0.3 against 0.6), profile kernels whose raw names differ in precision with tied cycles,
kernels of equal total time (rank ties), the example runs, and kernel traces and Nsight Compute
exports with ties of their own (tests/gen_tied_traces.py: Kineto jobs of two ranks with equal
step times, operators and launches tied in time, kernels with equal start and duration, an
unrounded trace for the HTA marts, Nsight Systems and rocprof files with tied ranges, ncu exports
with equal values). Warehouse A ingests the runs in three out-of-order batches and builds after
each (single-threaded); then the same raw layer is copied row for row in a shuffled order into
warehouse B and built in full with four threads; finally A is rebuilt in full with three
threads. Every column of every model must be equal in all three, exactly (floats included), and
the GPU unions equal plain Python's in each.
"""

from __future__ import annotations

import copy
import json
import os
import random

import pytest

from tests import gen_tied_traces
from tests.conftest import AUDIT_SEED, PROFILE_SEED
from tests.test_determinism_traces import assert_unions
from warehouse import db
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.modelling import models

NCHW = "void cudnn::nchwToNhwcKernel<{t}, {t}, {t}, 0, 1, 0>(cudnn::nchw2nhwc_params_t<T3>, " \
    "const T1 *, T2 *)"
F32, F16 = NCHW.format(t="float"), NCHW.format(t="__half")
# tied totals that floating point adds differently by order: 0.1 + 0.2 + 0.3 != 0.3 + 0.2 + 0.1
PARTS_A, PARTS_B = [0.1, 0.2, 0.3], [0.6]


def _audit(i: int) -> bytes:
    d = json.loads(AUDIT_SEED.read_bytes())
    d["scope"] = f"{d['scope']} (determinism {i})"
    rows = d["rows"]
    # the layout kernel: f32 and f16 launches with tied totals in every row (mixed precision)
    for row in rows:
        row["kernels"] = [k for k in row["kernels"] if "nchwToNhwcKernel" not in k["name"]]
    for r, row in enumerate(rows[:4]):
        a, b = (PARTS_A, PARTS_B) if (i + r) % 2 else (PARTS_B, PARTS_A)
        for name, parts in ((F32, a), (F16, b)):
            for us in parts:
                row["kernels"].append({"id": str(len(row["kernels"])), "name": name,
                                       "category": "layout_conversion", "duration_us": us})
        # two more kernels of the same total (a rank tie against each other)
        for name in ("tie_kernel_b_f32", "tie_kernel_a_f32"):
            for us in (PARTS_A if i % 2 else list(reversed(PARTS_A))):
                row["kernels"].append({"id": str(len(row["kernels"])), "name": name,
                                       "category": "elementwise_add", "duration_us": us})
    random.Random(i).shuffle(rows[0]["kernels"])
    return json.dumps(d, indent=1).encode()


def _profile(i: int) -> bytes:
    d = json.loads(PROFILE_SEED.read_bytes())
    d["atOffset"] = i
    groups = d["groups"]
    g = groups[0]
    # the same short kernel under two precisions with tied cycles, three names in all
    for k, name in enumerate((F16, F32, NCHW.format(t="double"))):
        extra = copy.deepcopy(g)
        extra["name"] = name
        extra["phaseCycles"] = 1000 if k else 2000
        extra["workCycles"] = 3000
        groups.append(extra)
    random.Random(i).shuffle(groups)
    return json.dumps(d, indent=1).encode()


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("determinism")
    files = []
    for i in range(8):
        for kind, make in (("audit", _audit), ("profile", _profile)):
            p = tmp / f"{kind}_{i:02d}.json"
            p.write_bytes(make(i))
            # two series, four labels, two repeats of each label (trends get judged)
            label = f"v{i // 2}"
            p.with_name(p.name + ".meta.json").write_text(json.dumps({
                "series": f"det-{kind}", "label": label,
                "captured_at": f"2026-01-0{1 + i // 2}T00:00:0{i % 2}Z"}))
            files.append(p)
    files += [AUDIT_SEED, PROFILE_SEED]
    # kernel traces (Kineto jobs of two ranks, unrounded HTA input, nsys, rocprof) and Nsight
    # Compute exports, with their ties (tests/gen_tied_traces.py)
    files += gen_tied_traces.write_all(tmp / "traces")
    return files


def _model_rows(con, project) -> dict[str, list]:
    out = {}
    for name in project.order:
        rows = con.execute(f"select * from {name}").fetchall()  # noqa: S608
        cols = [c[0] for c in con.description]
        out[name] = (cols, sorted(rows, key=repr))
    return out


def _diff(a: dict, b: dict, what: str) -> list[str]:
    out = []
    for name in a:
        (ca, ra), (cb, rb) = a[name], b[name]
        if ca != cb:
            out.append(f"{what}: {name} columns {ca} != {cb}")
            continue
        if ra == rb:
            continue
        if len(ra) != len(rb):
            out.append(f"{what}: {name} has {len(ra)} rows against {len(rb)}")
            continue
        for col_i, col in enumerate(ca):
            va = sorted(repr(r[col_i]) for r in ra)
            vb = sorted(repr(r[col_i]) for r in rb)
            if va != vb:
                ex = next((x, y) for x, y in zip(va, vb, strict=True) if x != y)
                out.append(f"{what}: {name}.{col} differs, e.g. {ex[0]} against {ex[1]}")
        if not any(f"{name}." in o for o in out):
            out.append(f"{what}: {name} rows pair differently (same values per column)")
    return out


def test_every_model_column_is_the_same_whatever_the_build_path_order_and_threads(
        run_files, tmp_path):
    project = models.load_project()
    a = settings(tmp_path / "a" / "warehouse.duckdb")
    order = list(run_files)
    random.Random(7).shuffle(order)
    batches = [order[: len(order) // 2], order[len(order) // 2: 3 * len(order) // 4],
               order[3 * len(order) // 4:]]
    with db.writer(a.warehouse) as con:
        con.execute("set threads = 1")
        for batch in batches:
            for p in batch:
                r = loader.ingest_file(a, p, con=con)
                assert r.status == "ingested", r.message
            models.build(con, project)
        # a check result fails one run (it leaves the trends; its models are rebuilt)
        con.execute("insert into checks.results select sha256, 'suite', 'e', 'P1', true, false, "
                    "1, null, timestamp '2026-02-01' from raw.files order by sha256 limit 1")
        modes = {r.model: r.mode for r in models.build(con, project)}
        assert "incremental" in modes.values(), modes
        incremental = _model_rows(con, project)
        assert_unions(con, "incremental")

    # the mixed-precision kernel is in the history, with its tie
    rollup = dict(zip(incremental["marts.kernel_run_rollup"][0], zip(
        *incremental["marts.kernel_run_rollup"][1], strict=True), strict=True))
    assert "cudnn::nchwToNhwcKernel" in rollup["kernel"]

    # B: the same raw layer, every table's rows in a shuffled order, built in full on 4 threads
    b = settings(tmp_path / "b" / "warehouse.duckdb")
    with db.writer(b.warehouse) as con:
        con.execute(f"attach '{a.warehouse}' as a (read_only)")
        tables = con.execute("select schema_name, table_name from duckdb_tables() where "
                             "database_name = 'a' and schema_name in ('raw', 'checks')"
                             ).fetchall()
        con.execute("select setseed(0.25)")
        con.execute("begin")
        for schema, table in tables:
            con.execute(f"delete from {schema}.{table}")  # noqa: S608
            con.execute(f"insert into {schema}.{table} select * from a.{schema}.{table} "  # noqa: S608
                        "order by random()")
        con.execute("commit")
        for schema, table in tables:  # the same rows, in another physical order
            q = f"select * from {{}}{schema}.{table} order by all"  # noqa: S608
            assert con.execute(q.format("a.")).fetchall() == \
                con.execute(q.format("")).fetchall(), table
        con.execute("detach a")
        con.execute("set threads = 4")
        assert {r.mode for r in models.build(con, project)} == {"full"}
        full_b = _model_rows(con, project)
        assert_unions(con, "full, shuffled raw rows, 4 threads")

    with db.writer(a.warehouse) as con:
        con.execute("set threads = 3")
        models.build(con, project, full_refresh=True)
        full_a = _model_rows(con, project)
        assert_unions(con, "full, 3 threads")

    problems = _diff(incremental, full_a, "incremental vs full (3 threads)")
    problems += _diff(full_a, full_b, "full vs full of shuffled raw rows (4 threads)")
    assert not problems, "\n".join(problems)


def test_mixed_precisions_follow_the_documented_rule(run_files, tmp_path):
    """kernel_precision (family, arch, tile) of a kernel whose launches carry several: those of
    the raw kernel name with the most time in the run, ties to the smallest raw name."""
    s = settings(tmp_path / "w" / "warehouse.duckdb")
    with db.writer(s.warehouse) as con:
        for p in run_files[:4]:
            assert loader.ingest_file(s, p, con=con).status == "ingested"
        models.build(con)
        got = con.execute("select source_format, kernel_precision, rank_in_run from "
                          "marts.kernel_run_rollup where kernel = 'cudnn::nchwToNhwcKernel' "
                          "order by all").fetchall()
        ties = con.execute("select kernel, rank_in_run from marts.kernel_run_rollup where "
                           "kernel like 'tie_kernel_%' order by run_id, rank_in_run").fetchall()
    # audits: f32 and f16 tie (0.6 us in every row): the smaller raw name ("…<__half" < "…<float")
    # profiles: f16 has 2000 cycles, f32 and f64 1000 each: f16 carries the most time
    assert [(f, p) for f, p, _ in got] == [("conv_audit", "f16")] * 2 + [
        ("tile_profile", "f16")] * 2, got
    # equal totals rank by kernel name, in every run
    assert [k for k, _ in ties] == ["tie_kernel_a_f32", "tie_kernel_b_f32"] * 2, ties




def test_random_sequences_of_ingests_checks_and_builds_equal_a_full_rebuild(run_files, tmp_path):
    """A seeded random sequence (``PWH_DETERMINISM_SEED`` replays one; the seed is printed):
    batches of runs in random order, check results that fail or pass a random run, random
    thread counts; after every build each model equals, exactly, its full rebuild on another
    thread count."""
    seed = int(os.environ.get("PWH_DETERMINISM_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"determinism seed: {seed} (PWH_DETERMINISM_SEED={seed} replays)")
    rng = random.Random(seed)
    project = models.load_project()
    s = settings(tmp_path / "w" / "warehouse.duckdb")
    pending = list(run_files)
    rng.shuffle(pending)
    step = 0
    with db.writer(s.warehouse) as con:
        while pending:
            step += 1
            n = rng.randint(2, 7)
            batch, pending = pending[:n], pending[n:]
            for p in batch:
                assert loader.ingest_file(s, p, con=con).status == "ingested"
            if rng.random() < 0.5:  # a check fails or passes a random run, later than before
                con.execute("insert into checks.results select sha256, 'suite', 'e', 'P1', true, "
                            "?, 0, null, timestamp '2026-02-01' + to_seconds(?) from raw.files "
                            "order by sha256 limit 1 offset ?",
                            [rng.random() < 0.5, step, rng.randrange(
                                con.execute("select count(*) from raw.files").fetchone()[0])])
            con.execute(f"set threads = {rng.randint(1, 4)}")
            models.build(con, project)
            incremental = _model_rows(con, project)
            assert_unions(con, f"seed {seed}, step {step}")
            con.execute(f"set threads = {rng.randint(1, 4)}")
            models.build(con, project, full_refresh=True)
            problems = _diff(incremental, _model_rows(con, project),
                             f"seed {seed}, step {step} ({n} runs)")
            assert not problems, "\n".join(problems)
    assert step >= 3
