"""Validate runs against the expectation suites (expectations/) and show the results.

Without --rerun, what is pending is validated now (every suite of a run never validated; the
staging and marts suites once a `pwh build` has included the run) and the rest is shown from
the stored results. --rerun validates every applicable suite again (after a fix, this clears a
failed status). Results land in checks.results; a run's status (checks.run_status) comes from its
latest validation. A failing critical expectation marks the run failed: trends and baselines
exclude it after the next `pwh build`, and `pwh runs` and marts.run_summary show it. Nothing is
deleted. The results of one check are recorded in one transaction: an interrupted check (Ctrl-C,
kill -9) records nothing, and running it again validates everything that was pending.

Output: one line per failing expectation (invariant ID, table, failing count, rule), then one
summary line per run. What each invariant means and what to do: docs/checks.md.

RUN is a run id (SHA-256) or a unique prefix of it (as `pwh runs` prints), or a file name as
ingested. Default: every run.

exit status: 0 every selected run passes; 1 a critical expectation fails; 2 usage error
(e.g. an unknown run).
"""

from __future__ import annotations

import json
import sys

COMMAND = (40, "check", "validate runs against the expectation suites; show failing invariants")


def add_arguments(p):
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="run id, unique id prefix or file name (default: every run)")
    p.add_argument("--rerun", action="store_true",
                   help="validate again even if results exist (clears a status after a fix)")
    p.add_argument("--samples", action="store_true",
                   help="print the sample of failing rows under each failure")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="json: every result of the latest validation, one object each")
    p.add_argument("--list", action="store_true",
                   help="list the suites, their tables and the invariants they check; no run")


def _resolve(con, selectors: list[str]) -> tuple[list[str], list[str]]:
    """Selectors -> run ids, plus error messages for unknown or ambiguous selectors."""
    if not selectors:
        rows = con.execute("select sha256 from raw.files order by captured_at, sha256").fetchall()
        return [r[0] for r in rows], []
    ids, errors = [], []
    for sel in selectors:
        rows = con.execute(
            "select sha256 from raw.files where starts_with(sha256, lower(?)) or file_name = ? "
            "order by captured_at, sha256", [sel, sel]).fetchall()
        if not rows:
            errors.append(f"no run matches {sel!r} (see `pwh runs`)")
        elif len(rows) > 1 and not any(r[0] == sel for r in rows):
            errors.append(f"{sel!r} matches {len(rows)} runs; give more of the id")
        else:
            ids.extend(r[0] for r in rows if len(rows) == 1 or r[0] == sel)
    return list(dict.fromkeys(ids)), errors


def _list_suites() -> int:
    from warehouse.checks import load_suites

    for s in load_suites():
        invs = sorted({e.invariant_id for e in s.expectations})
        fmt = s.source_format or "any format"
        print(f"{s.name}\n    table: {s.table} ({fmt}); batch: {s.batch_kind} "
              f"{next(iter(s.batch.values()))}\n    invariants: {', '.join(invs)}; "
              f"{len(s.expectations)} expectation(s)")
    return 0


def _line(r, info) -> str:
    kind = "FAIL" if r.critical else "WARN"
    count = "?" if r.unexpected_count is None else str(r.unexpected_count)
    name = info.get(r.run_id, {}).get("file_name", "")
    what = r.rule or r.expectation
    extra = f" ({r.sample_failures[0]['error']})" if r.error or (
        r.sample_failures and "error" in r.sample_failures[0]) else ""
    return (f"{kind} {r.invariant_id:<12} {r.table:<24} {count:>6} failing  run {r.run_id[:12]} "
            f"{name}: {what}{extra}  [{r.suite}: {r.expectation}]")


def run(args, settings) -> int:
    if args.list:
        return _list_suites()
    from warehouse import checks, db
    from warehouse.errors import PwhError

    if not settings.warehouse.exists():
        raise PwhError(f"{settings.warehouse}: no warehouse here yet "
                       "(run `pwh ingest` first, or set --warehouse)")
    # read-write sessions (with the "busy, retrying" wait) even to read: a read-only open fails
    # at once while an ingest or build holds the file
    with db.writer(settings.warehouse) as con:
        run_ids, errors = _resolve(con, args.runs)
        if errors:
            for e in errors:
                print(f"pwh check: {e}", file=sys.stderr)
            return 2
        if not run_ids:
            print(f"no runs in {settings.warehouse} (ingest some with `pwh ingest`)")
            return 0
        info = {r[0]: {"file_name": r[1], "source_format": r[2]} for r in con.execute(
            "select sha256, file_name, source_format from raw.files "
            "where sha256 in (select unnest($ids))", {"ids": run_ids}).fetchall()}
        pending = (checks.applicable_suites(con, run_ids) if args.rerun
                   else checks.pending_suites(con, run_ids))
        pending = {r: s for r, s in pending.items() if s}
        if not pending:
            results = checks.latest_results(con, run_ids)
            status = checks.run_status(con, run_ids)
    if pending:
        groups: dict[tuple[str, ...], list[str]] = {}
        for run_id, suites in pending.items():
            groups.setdefault(tuple(s.name for s in suites), []).append(run_id)
        print(f"validating {len(pending)} run(s)…", file=sys.stderr, flush=True)
        checks.warm_up()  # import GX before taking the writer lock (it takes seconds)
        with db.writer(settings.warehouse) as con:
            fresh = []
            for names, runs in groups.items():
                fresh.extend(checks.validate_runs(con, runs, [checks.get_suite(n) for n in names]))
            # one transaction for the whole validation: killed at any point, checks.results
            # is as before or holds every result of this check (the next run validates the rest)
            checks.record_results(con, fresh)
            results = checks.latest_results(con, run_ids)
            status = checks.run_status(con, run_ids)
    if args.format == "json":
        from warehouse.serving.results import to_json

        print(to_json([r.to_dict() for r in results]))
    else:
        _print_text(results, status, info, set(pending), args.samples)
    return 1 if any(s.status == "failed" for s in status.values()) else 0


def _print_text(results, status, info, validated_now: set[str], samples: bool) -> None:
    by_run: dict[str, list] = {}
    for r in results:
        by_run.setdefault(r.run_id, []).append(r)
    for r in results:
        if r.success:
            continue
        print(_line(r, info))
        if samples:
            for row in r.sample_failures:
                print(f"      {json.dumps(row, default=str)}")
    for run_id, st in status.items():
        rs = by_run.get(run_id, [])
        bad = [r for r in rs if not r.success]
        warn = sorted({r.invariant_id for r in bad if not r.critical})
        when = "validated now" if run_id in validated_now else f"validated {st.validated_at}"
        tail = f"; warnings: {', '.join(warn)}" if warn else ""
        label = (f"FAILED ({', '.join(st.failed_invariants)})" if st.status == "failed"
                 else st.status)
        meta = info.get(run_id, {})
        print(f"run {run_id[:12]} {meta.get('source_format', '')} {meta.get('file_name', '')}: "
              f"{label}, {len(rs) - len(bad)}/{len(rs)} expectations pass{tail} ({when})")
