"""Nsight Compute reports (``ncu -o report``: binary ``.ncu-rep``) through NVIDIA's ``ncu_report``.

Content decides: a report starts with the magic ``NVR\\0`` (the registry offers such files to
this module, kind ``binary``). The reader is NVIDIA's PyPI package ``ncu-report`` (the ``ncu``
extra: ``pip install 'profile-warehouse[ncu]'``); without it a report is refused naming the
extra to install.

The native reader never runs in the ingesting process: the file's bytes are written to a
private temporary folder and read by a child process (:mod:`.ncu_rep_read`, started with
``python -I -S``: :class:`forking.Isolated`) that limits its own address space
(``PWH_NCU_MEM_MB``, 1024) and CPU time and is killed after ``PWH_NCU_TIMEOUT_S`` seconds (120)
from its start; its answer is read back only up to ``MAX_ANSWER`` (128 MiB, the child's file
size limit). ``pwh ingest`` starts that child for a report named on its command line before it
imports anything heavy (:func:`forking.prestart`); it is used here when the bytes are the same. A crash (a signal), a timeout, a memory
limit or a refusal of the reader becomes a :class:`FormatError` naming the file and the reason:
the batch goes on with its other files, and the ingesting process never dies by a signal.

Before that, the report's block framing (``NVR\\0``, a length-prefixed file header, then
length-prefixed block headers whose field 5 is the payload size) is walked: a file that ends
inside a block is refused as truncated (``ncu_report`` reads such a file silently, with fewer
launches or none). A report without any launch is refused too.

Every action (launch) of every range becomes a row of ``raw.ncu_launches``; every metric of it
a row of ``raw.ncu_metrics`` (metrics in name order; instanced metrics keep their aggregate value
and the number of instances). ``kernel`` is the demangled name; the duration is
``gpu__time_duration.sum`` converted exactly to integer ns, NULL when absent or NaN.
The report's session block (host name, executable path, command line) is never read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import struct

from warehouse.errors import FormatError
from warehouse.ingesting import forking
from warehouse.ingesting.formats import ncu
from warehouse.ingesting.formats.base import Parsed

NAME = "ncu_rep"
PARSER_VERSION = "ncu_rep/1"
KIND = "binary"
TABLES = ncu.TABLES
MAGIC = b"NVR\x00"
EXTRA = "ncu"
CHILD = forking.NCU_REPORT.path  # ncu_rep_read.py

WORKLOADS = {0: "kernel", 1: "range", 2: "cmdlist", 3: "graph", 4: "subgrid_schedule"}


def sniff(head: bytes, path: str) -> bool:
    return head.startswith(MAGIC)


# The reader's answer (msgpack; ~100 bytes a metric) is read back at most this long, and its
# memory limit defaults to MEM_MB (PWH_NCU_MEM_MB): together with the report's bytes, a hostile
# report costs the ingesting process and its reader no more than 1 GiB.
MAX_ANSWER = forking.NCU_REPORT.max_answer  # 128 MiB
MEM_MB = 1024


def timeout_s() -> float:
    return float(os.environ.get("PWH_NCU_TIMEOUT_S", "120"))


def available() -> bool:
    return importlib.util.find_spec("ncu_report") is not None


# ------------------------------------------------------------------ framing


def _varint(b: bytes, i: int) -> tuple[int, int]:
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return x, i
        if s > 63:
            raise ValueError("varint too long")


def _payload_size(h: bytes) -> int:
    """Field 5 (varint) of a block header protobuf, 0 when absent."""
    i, size = 0, 0
    while i < len(h):
        key, i = _varint(h, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(h, i)
            if f == 5:
                size = v
        elif wt == 2:
            n, i = _varint(h, i)
            i += n
        elif wt == 5:
            i += 4
        elif wt == 1:
            i += 8
        else:
            raise ValueError(f"wire type {wt}")
        if i > len(h):
            raise ValueError("field past the header")
    return size


def check_framing(data: bytes, path: str) -> int:
    """The number of blocks; refuses a file that ends inside a block. A framing this walk does
    not understand (another file-format version) is left to ``ncu_report``: returns -1."""
    if len(data) < 8:
        raise FormatError(path, f"byte {len(data)}", "a complete Nsight Compute report (the "
                          "file ends inside its header: truncated)", kind="malformed")
    pos = 8 + struct.unpack_from("<I", data, 4)[0]
    blocks = 0
    try:
        while pos < len(data):
            if pos + 4 > len(data):
                break
            hl = struct.unpack_from("<I", data, pos)[0]
            if pos + 4 + hl > len(data):
                break
            pos += 4 + hl + _payload_size(data[pos + 4:pos + 4 + hl])
            blocks += 1
    except (ValueError, IndexError):
        return -1
    if pos != len(data):
        raise FormatError(path, f"byte {len(data)}", "a complete Nsight Compute report; the "
                          f"file ends inside block {blocks + 1} (truncated)", kind="malformed")
    return blocks


# ------------------------------------------------------------------ the child process


def _script() -> forking.Script:
    """The reader script as configured now (:data:`CHILD`, :data:`MAX_ANSWER`, :data:`MEM_MB`:
    tests put stand-in readers there)."""
    return dataclasses.replace(forking.NCU_REPORT, path=CHILD, max_answer=MAX_ANSWER,
                               env=(("PWH_NCU_MEM_MB", str(MEM_MB)),))


def read_report(data: bytes, path: str) -> dict:
    """The child's document for the report ``data`` (see :mod:`.ncu_rep_read`). The child
    ``pwh ingest`` started ahead for these bytes (:func:`forking.prestart`) is used if there is
    one; else one is started here."""
    import msgspec

    if not available():
        raise FormatError(path, "$", "the Nsight Compute report reader: install the "
                          f"'{EXTRA}' extra (pip install 'profile-warehouse[{EXTRA}]', which "
                          "installs NVIDIA's ncu-report)", kind="unsupported")
    script = _script()
    # the child's memory limit counts towards ours (peak RSS <= 1 GiB for any input)
    child = forking.claim_early(script, data) or forking.Isolated(script, data)
    try:
        returncode = child.wait(timeout_s())
        if returncode is None:
            raise FormatError(path, "$", f"a report the reader reads within {timeout_s():g} s "
                              "(PWH_NCU_TIMEOUT_S); it was stopped", kind="malformed")
        if child.answer_too_long():
            raise FormatError(path, "$", f"a report whose reading is at most "
                              f"{MAX_ANSWER >> 20} MiB (its launches and metrics); the "
                              "reader's answer was longer", kind="malformed")
        stderr = child.reason()
        stdout = child.answer() if returncode == 0 else b""
    finally:
        child.close()
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"signal {-returncode}"
        raise FormatError(path, "$", f"a report the reader can read; ncu_report died by {sig} "
                          "(corrupt or hostile file)", kind="malformed")
    if returncode != 0:
        why = stderr.decode("utf-8", "replace").strip().splitlines()
        reason = why[-1][:300] if why else f"exit status {returncode}"
        if "MemoryError" in reason or "bad_alloc" in reason:
            reason = "the reader ran out of its memory limit (PWH_NCU_MEM_MB)"
        raise FormatError(path, "$", f"a report ncu_report can read: {reason}",
                          kind="malformed")
    try:
        return msgspec.msgpack.decode(stdout)
    except msgspec.MsgspecError as exc:
        raise FormatError(path, "$", f"a complete answer from the report reader ({exc})",
                          kind="malformed") from None


# ------------------------------------------------------------------ tables


def _dims(lookup, prefix: str) -> list[int] | None:
    dims = [ncu.whole(lookup(f"{prefix}_{c}")) for c in "xyz"]
    return None if any(d is None for d in dims) else dims


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    if not data.startswith(MAGIC):
        raise FormatError(path, "byte 0", "an Nsight Compute report (magic 'NVR\\0')",
                          kind="malformed")
    blocks = check_framing(data, path)
    doc = read_report(data, path)
    launches = doc["launches"]
    if not launches:
        raise FormatError(path, "$", "a report with at least one profiled launch; ncu_report "
                          "read none (corrupt or truncated file)", kind="malformed")
    L: dict[str, list] = {c: [] for c, _, _ in ncu.LAUNCHES.columns}
    M: dict[str, list] = {c: [] for c, _, _ in ncu.METRICS.columns}
    untimed = 0
    for li, a in enumerate(launches):
        names, values, texts, units = a["names"], a["values"], a["texts"], a["units"]
        index = {n: i for i, n in enumerate(names)}

        def num(key, index=index, values=values):
            i = index.get(key)
            return None if i is None else values[i]

        def txt(key, index=index, texts=texts):
            i = index.get(key)
            return None if i is None else texts[i]

        where = f"range {a['range']}, launch {a['action']}, metric {ncu.DURATION}"
        if ncu.DURATION in index:
            i = index[ncu.DURATION]
            dur, state = ncu.duration_ns(values[i], a["written"][i], units[i], path, where)
        else:
            dur, state = None, "absent"
        untimed += dur is None
        for name in (a["function"], a["demangled"], a["mangled"]):
            if len(name) > ncu.MAX_NAME:
                raise FormatError(path, f"range {a['range']}, launch {a['action']}",
                                  f"a kernel name of at most {ncu.MAX_NAME} characters",
                                  kind="schema")
        dev = ncu.whole(num("launch__device_id"))
        row = {
            "run_id": run_id, "launch_idx": li, "range_idx": a["range"],
            "action_idx": a["action"], "launch_id": None,
            "kernel": a["demangled"] or a["function"], "function_name": a["function"],
            "demangled_name": a["demangled"], "mangled_name": a["mangled"] or None,
            "device": None if dev is None else str(dev),
            "device_name": txt("device__attribute_display_name"),
            "grid": _dims(num, "launch__grid_dim"), "block": _dims(num, "launch__block_dim"),
            "context": ncu.whole(num("launch__context_id")),
            "stream": ncu.whole(num("launch__stream_id")),
            "nvtx": None if a["nvtx"] is None else json.dumps(a["nvtx"], ensure_ascii=False),
            "dur_ns": dur, "time_state": state, "metric_count": len(names),
            "extra": json.dumps({"workload": WORKLOADS.get(a["workload"], a["workload"])}),
        }
        for c, v in row.items():
            L[c].append(v)
        n = len(names)
        M["run_id"].extend([run_id] * n)
        M["launch_idx"].extend([li] * n)
        M["metric_idx"].extend(range(n))
        M["row_idx"].extend([None] * n)
        M["section"].extend([None] * n)
        M["name"].extend(names)
        M["unit"].extend(units)
        M["value"].extend(values)
        M["text_value"].extend(texts)
        M["as_written"].extend(a["written"])
        M["instances"].extend(a["instances"])
    meta = {"file_format_blocks": blocks, "reader": "ncu_report"}
    runs = {"run_id": [run_id], "source_format": [NAME], "layout": ["report"],
            "tool_version": [doc.get("version")], "range_count": [doc["ranges"]],
            "launch_count": [len(launches)], "untimed_launches": [untimed],
            "metric_rows": [len(M["name"])], "metadata": [json.dumps(meta)]}
    tables = {ncu.RUNS.name: ncu.RUNS.arrow(runs), ncu.LAUNCHES.name: ncu.LAUNCHES.arrow(L),
              ncu.METRICS.name: ncu.METRICS.arrow(M),
              ncu.RULES.name: ncu.RULES.arrow({c: [] for c, _, _ in ncu.RULES.columns})}
    return Parsed(NAME, PARSER_VERSION, tables,
                  {"launches": len(launches), "metrics": len(M["name"]),
                   "untimed launches": untimed})


def rebuild(con, run_id: str) -> dict:
    """What ``ncu_report`` read, from the raw tables: per launch (file order) its names,
    range/action position and every metric ``name -> (unit, value, text_value, as_written,
    instances)``. The archive keeps the report's bytes."""
    out = {"launches": []}
    launches = con.execute(
        "select launch_idx, range_idx, action_idx, function_name, demangled_name, "
        "mangled_name from raw.ncu_launches where run_id = ? order by launch_idx",
        [run_id]).fetchall()
    metrics: dict[int, dict] = {}
    for li, name, unit, value, text, written, inst in con.execute(
            "select launch_idx, name, unit, value, text_value, as_written, instances "
            "from raw.ncu_metrics where run_id = ? order by launch_idx, metric_idx",
            [run_id]).fetchall():
        metrics.setdefault(li, {})[name] = (unit, value, text, written, inst)
    for li, ri, ai, fn, dm, mg in launches:
        out["launches"].append({"range": ri, "action": ai, "function": fn, "demangled": dm,
                                "mangled": mg or "", "metrics": metrics.get(li, {})})
    return out
