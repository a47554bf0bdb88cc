"""One minimal mutation per invariant (tests/mutations.py): `pwh check` fails naming exactly that
invariant, the run is marked failed, and after `pwh build` it is out of trends and baselines
while marts.run_summary still shows it."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED, ro
from tests.mutations import CONTROL, MUTATIONS, edit, ingest, plan_warehouses
from warehouse import checks, db
from warehouse.cli import main
from warehouse.config import settings
from warehouse.modelling import models


def pwh(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(list(argv))
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every mutation applied, grouped into as few warehouses as stay independent
    (``plan_warehouses``), each with an untouched control run; per warehouse: build, edit,
    `pwh check` of the mutants (every suite), `pwh build` again so trends see the statuses.
    The control stays unchecked (validating it would only cost time: seeds passing every suite
    is tested in test_checks.py); unchecked runs are in trends like passed ones."""
    out: dict[str, dict] = {}
    for i, group in enumerate(plan_warehouses([MUTATIONS[n] for n in sorted(MUTATIONS)])):
        root = tmp_path_factory.mktemp(f"w{i}")
        s = settings(root / "state" / "warehouse.duckdb")
        d = root / "seeds"
        d.mkdir()
        seeds = {"profile": Path(shutil.copy(PROFILE_SEED, d / PROFILE_SEED.name)),
                 "audit": Path(shutil.copy(AUDIT_SEED, d / AUDIT_SEED.name))}
        ids = {m.name: ingest(m, s, seeds, root / "mutated") for m in group}
        control = ingest(CONTROL, s, seeds, root / "mutated")
        with db.writer(s.warehouse) as con:
            models.build(con)  # marts exist before the edits (SUM_TO_ONE edits one)
            for m in group:
                edit(m, con, s, ids[m.name])
        w = str(s.warehouse)
        check = pwh("--warehouse", w, "check", *ids.values())
        build_rc, _ = pwh("--warehouse", w, "build")
        _, runs_csv = pwh("--warehouse", w, "runs", "--format", "csv")
        con = ro(s)
        try:
            status = checks.run_status(con, [*ids.values(), control])
            summary = dict(con.execute(
                "select run_id, check_status from marts.run_summary").fetchall())
            points = dict(con.execute(
                "select run_id, count(*) from staging.trend_points group by run_id").fetchall())
            trend_labels = {r[0] for r in con.execute(
                "select distinct label from marts.kernel_trends").fetchall()}
            labels = dict(con.execute("select sha256, label from raw.files").fetchall())
            results = checks.latest_results(con, ids.values())
        finally:
            con.close()
        for m in group:
            run_id = ids[m.name]
            out[m.name] = dict(
                mutation=m, run_id=run_id, control_id=control, check=check,
                lines=[ln for ln in check[1].splitlines() if run_id[:12] in ln],
                build_rc=build_rc, status=status, summary=summary, points=points,
                trend_labels=trend_labels, labels=labels, runs_csv=runs_csv,
                results=[r for r in results if r.run_id == run_id], group=len(group))
    return out


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_breaks_exactly_its_invariant(outcomes, name):
    o = outcomes[name]
    inv = o["mutation"].invariant_id
    rc, out = o["check"]
    assert rc == 1, out
    fails = [ln.split() for ln in o["lines"] if ln.startswith("FAIL")]
    assert fails and {f[1] for f in fails} == {inv}, out
    assert all(int(f[3]) >= 1 for f in fails)  # a count of failing rows or mismatches
    summary = next(ln for ln in o["lines"] if ln.startswith("run "))
    assert f"FAILED ({inv})" in summary
    st = o["status"]
    assert st[o["run_id"]].status == "failed"
    assert st[o["run_id"]].failed_invariants == (inv,)
    assert st[o["control_id"]].status == "unchecked"
    # every failing result names the invariant and carries a sample of what failed
    bad = [r for r in o["results"] if not r.success]
    assert bad and all(r.invariant_id == inv and r.critical for r in bad)
    assert all(r.sample_failures for r in bad)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_failed_run_is_shown_but_kept_out_of_trends(outcomes, name):
    o = outcomes[name]
    run_id, control = o["run_id"], o["control_id"]
    assert o["build_rc"] == 0
    assert o["summary"][run_id] == "failed"  # kept and shown, never dropped
    assert o["summary"][control] == "unchecked"
    assert run_id not in o["points"]  # no trend point, so no trend or baseline uses it
    assert o["points"].get(control, 0) > 0
    assert o["labels"][run_id] not in o["trend_labels"]
    assert o["labels"][control] in o["trend_labels"]
    row = next(ln for ln in o["runs_csv"].splitlines() if ln.startswith(run_id[:12]))
    assert ",failed," in row and o["mutation"].invariant_id in row


def test_every_invariant_has_a_mutation():
    assert {m.invariant_id for m in MUTATIONS.values()} == set(checks.INVARIANT_IDS)


def test_seed_mutations_are_minimal(tmp_path):
    """Document mutations change one value (or swap two), nothing else."""
    import json

    from tests.mutations import write_mutated

    def leaves(x, path=()):
        if isinstance(x, dict):
            for k, v in x.items():
                yield from leaves(v, (*path, k))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from leaves(v, (*path, i))
        else:
            yield path, x

    for m in MUTATIONS.values():
        if m.edit_document is None:
            continue
        seed = PROFILE_SEED if m.seed == "profile" else AUDIT_SEED
        before = dict(leaves(json.loads(seed.read_bytes())))
        after = dict(leaves(json.loads(write_mutated(m, seed, tmp_path).read_bytes())))
        assert before.keys() == after.keys(), m.name
        changed = [p for p in before if before[p] != after[p]]
        limit = 3 if m.name == "A1" else 2  # A1 nudges each fraction of one row
        assert 1 <= len(changed) <= limit, (m.name, changed)
