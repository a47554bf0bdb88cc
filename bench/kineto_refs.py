"""The msgspec floor of a Kineto trace: a typed decode of the whole file, in its own process.

``python -m bench.kineto_refs FILE`` reads the file (gzip undone), decodes it with msgspec into
a typed schema of Chrome-trace events (``ts``/``dur`` as floats, ``args`` as a dict: what a
typed reader of these files would write), GC off, frees it, and prints
``{"seconds": decode time, "events": n}``. The harness times the whole process too.
"""

from __future__ import annotations

import gc
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

import msgspec


class Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: dict[str, Any] | None = None
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None


class Trace(msgspec.Struct):
    traceEvents: list[Event]  # noqa: N815


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    data = Path(argv[0]).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    gc.disable()
    t0 = time.perf_counter()
    doc = msgspec.json.decode(data, type=Trace)
    seconds = time.perf_counter() - t0
    n = len(doc.traceEvents)
    del doc
    print(json.dumps({"seconds": seconds, "events": n}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
