"""Build the SQL models under sql/ (staging -> marts) in dependency order. Dependencies are
derived from each model's SQL; each model is replaced in one transaction."""

from __future__ import annotations

COMMAND = (30, "build", "build the SQL models under sql/ (staging, marts)")


def add_arguments(p):
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="build only these (schema.table) and what they need (default: all)")
    p.add_argument("--list", action="store_true", help="list models, their grain and deps")


def run(args, settings) -> int:
    from .. import db, models

    project = models.load_project()
    if args.list:
        for n in project.order:
            m = project.models[n]
            print(f"{n}\n    grain: {m.grain}\n    purpose: {m.purpose}\n"
                  f"    reads: {', '.join(m.deps)}")
        return 0
    unknown = [m for m in args.models if m not in project.models]
    if unknown:
        print(f"pwh build: unknown model(s): {', '.join(unknown)}")
        return 2
    with db.writer(settings.warehouse) as con:
        results = models.build(
            con, project, args.models or None,
            progress=lambda r: print(f"built {r.model}: {r.rows} rows ({r.seconds:.2f} s)",
                                     flush=True))
        con.execute("CHECKPOINT")
    print(f"{len(results)} model(s) built [warehouse {settings.warehouse}]")
    return 0
