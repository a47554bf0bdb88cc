"""Write a static HTML report of the published snapshot: kernel trends across builds, verdicts,
label vs baseline, and every run's rollup.

The report is self-contained and works offline from disk (file://): plotly.js comes from the
installed plotly package and is written once per report folder; no CDN, no server. It reads
only the published snapshot, so it never makes ingestion wait. Run it again after a build:
only the series whose data changed are read again, and only pages whose content changed are
rewritten (manifest.json in the folder keeps the hashes).

pages: index.html (every series and the changes in effect: each confirmed regression and
improvement not reverted since, with the label it began at, its size and the time it adds per
run; reverted ones in a folded history), series/<series>.html (a plot per kernel; for a
trace series the verdicts of step time, idle share, communication and GPU time per operator),
labels/<series>/<label>.html (label vs baseline, as `pwh compare`), runs/<run_id>.html.
See docs/report.md."""

from __future__ import annotations

import sys

COMMAND = (60, "report", "write the static HTML trend report of the published snapshot")


def add_arguments(p):
    p.add_argument("--out", metavar="DIR",
                   help="report folder (default <state>/report, beside the warehouse)")
    p.add_argument("--series", nargs="+", metavar="S",
                   help="refresh only these series' pages (and the index)")
    p.add_argument("--open", action="store_true", help="open the index in a web browser")
    p.add_argument("--serve", nargs="?", const=8765, type=int, metavar="PORT",
                   help="then serve the folder over HTTP on --host (default 127.0.0.1) and "
                        "PORT (default 8765) until Ctrl-C, for people on another machine")
    p.add_argument("--host", default="127.0.0.1",
                   help="address for --serve (default 127.0.0.1: this machine only)")


def run(args, settings) -> int:
    from warehouse.serving.report import UnknownSeries, build_report

    try:
        res = build_report(settings, args.out, args.series)
    except UnknownSeries as exc:
        print(f"pwh report: {exc}", file=sys.stderr)
        return 2
    print(res.summary(), flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(res.index.as_uri())
    if args.serve is not None:
        serve(res.out, args.host, args.serve)
    return 0


def serve(folder, host: str, port: int) -> None:
    """Serve the report folder read-only over HTTP until Ctrl-C."""
    import functools
    import http.server

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    with http.server.ThreadingHTTPServer((host, port), handler) as httpd:
        print(f"serving {folder} on http://{host}:{httpd.server_address[1]}/ (Ctrl-C stops)",
              flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
