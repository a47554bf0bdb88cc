"""Build the SQL models under sql/ (staging -> marts) in dependency order. Dependencies are
derived from each model's SQL; each model is updated in one transaction. Incremental models
(header '-- incremental: run_id' or 'series') rebuild only the runs, or the series of the runs,
whose inputs changed since their last build; --full-refresh rebuilds everything. After a successful
build the warehouse is published as the analysts' read-only snapshot (pwh sql, pwh shell read
it), unless --no-publish.

verdicts (marts.kernel_trends): the options below override the documented defaults; the same
knobs can be set for every build (CLI and Dagster) with environment variables
PWH_VERDICT_<NAME>, e.g. PWH_VERDICT_FLOOR_PCT=3. Method: docs/analyst-guide.md.
"""

from __future__ import annotations

import sys

COMMAND = (30, "build", "build the SQL models under sql/ (staging, marts)")


def add_arguments(p):
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="build only these (schema.table) and what they need (default: all)")
    p.add_argument("--list", action="store_true", help="list models, their grain and deps")
    p.add_argument("--floor-pct", type=float, metavar="PCT",
                   help="practical floor: smallest change called regressed/improved (default 5)")
    p.add_argument("--alpha", type=float,
                   help="significance level of the rank test of one label (default 0.05; a "
                        "change confirmed by later labels needs PWH_VERDICT_CONFIRM_ALPHA, 0.005)")
    p.add_argument("--window-labels", type=int, metavar="N",
                   help="at most N previous labels form a baseline (default 10)")
    p.add_argument("--full-refresh", action="store_true",
                   help="rebuild every selected model from all history, not incrementally")
    p.add_argument("--no-publish", action="store_true",
                   help="do not publish the analysts' snapshot after the build")


def run(args, settings) -> int:
    from warehouse import db
    from warehouse.modelling import models, stats

    project = models.load_project()
    if args.list:
        for n in project.order:
            m = project.models[n]
            print(f"{n}\n    grain: {m.grain}\n    purpose: {m.purpose}\n"
                  f"    incremental by: {m.incremental or '- (rebuilt in full)'}\n"
                  f"    reads: {', '.join(m.deps)}")
        return 0
    unknown = [m for m in args.models if m not in project.models]
    if unknown:
        print(f"pwh build: unknown model(s): {', '.join(unknown)} "
              f"(known: {', '.join(project.order)})", file=sys.stderr)
        return 2
    try:
        config = stats.VerdictConfig.from_env(floor_pct=args.floor_pct, alpha=args.alpha,
                                              window_labels=args.window_labels)
    except ValueError as exc:
        print(f"pwh build: {exc}", file=sys.stderr)
        return 2
    with db.writer(settings.warehouse) as con:
        results = models.build(
            con, project, args.models or None,
            progress=lambda r: print(f"built {r.model}: {r.rows} rows, {_how(r)} "
                                     f"({r.seconds:.2f} s)", flush=True),
            config=config, full_refresh=args.full_refresh)
        con.execute("CHECKPOINT")
        print(f"{len(results)} model(s) built [warehouse {settings.warehouse}]", flush=True)
        if not args.no_publish:
            from warehouse.serving import snapshot

            print(snapshot.publish(settings, con).summary())
    return 0


def _how(r) -> str:
    if r.mode == "incremental":
        return f"incremental: {r.keys} run(s)/series rebuilt"
    return "unchanged" if r.mode == "unchanged" else "full rebuild"
