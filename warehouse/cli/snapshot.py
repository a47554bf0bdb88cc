"""Publish the live warehouse as the snapshot analysts read, or list the published snapshots.

A snapshot is published automatically after each successful build; run this after ingesting
without building, or to check that publishing works. Publishing waits for the writer lock like
any writer, swaps the new snapshot in atomically (open analyst connections keep theirs) and
deletes old snapshots that no reader holds. See docs/operations.md."""

from __future__ import annotations

COMMAND = (35, "snapshot", "publish the read-only snapshot analysts query (or --list them)")


def add_arguments(p):
    p.add_argument("--list", action="store_true", help="list published snapshots, newest first")
    p.add_argument("--full", action="store_true",
                   help="make a fresh full copy instead of updating a spare snapshot in place")
    p.add_argument("--keep", type=int, metavar="N",
                   help="snapshots to keep, the current one included (default $PWH_SNAPSHOT_KEEP "
                        "or 2); snapshots an open connection still reads are always kept")


def run(args, settings) -> int:
    from warehouse.serving import snapshot

    if args.list:
        cur = snapshot.current(settings)
        snaps = snapshot.list_snapshots(settings)
        if not snaps:
            print(f"no snapshot published yet in {settings.snapshot_dir} (run `pwh snapshot`)")
            return 0
        for p in snaps:
            flags = []
            if p == cur:
                flags.append("current")
            if snapshot.in_use(p):
                flags.append("open by a reader")
            print(f"{snapshot.version_of(p)}  {p.stat().st_size / 1e6:8.1f} MB  "
                  f"{', '.join(flags)}")
        return 0
    r = snapshot.publish(settings, keep=args.keep, full=args.full)
    print(r.summary() + (f"; pruned {len(r.pruned)}" if r.pruned else "")
          + f" [{r.path}]")
    return 0
