"""Ingestion is one path in layers (issue 20, item 5): no import circle inside
``warehouse/ingesting/``, the loader alone orchestrates, and readers never reach up to the
writer or the loader. Checked on the source's own import statements (function-level lazy
imports included), so a circle cannot hide behind a deferred import."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "warehouse" / "ingesting"


def _modules() -> dict[str, Path | None]:
    """Module name -> its source (``None``: a compiled extension, which imports nothing of
    ours; its name is known whether it is built or not)."""
    out: dict[str, Path | None] = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    for f in PKG.rglob("*.c"):
        out[".".join(f.relative_to(ROOT).with_suffix("").parts)] = None
    return out


def _imports(name: str, file: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``file`` imports (``from p import m`` counts as p.m when
    m is a module)."""
    pkg = name if file.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    mods = _modules()
    known = set(mods)
    return {name: frozenset(_imports(name, f, known) if f else ()) for name, f in mods.items()}


def graph() -> dict[str, set[str]]:
    return {k: set(v) for k, v in _graph().items()}


def _cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_scan_sees_the_ingestion_modules():
    g = graph()
    for m in ("loader", "writer", "reading", "readers", "snapshot", "forking", "trace_stream",
              "profile_stream", "formats", "formats.kineto_stream", "formats._kscan"):
        assert f"warehouse.ingesting.{m}" in g
    assert "warehouse.ingesting.reading" in g["warehouse.ingesting.loader"]
    assert "warehouse.ingesting.formats.kineto_stream" in g["warehouse.ingesting.trace_stream"]


def test_no_import_circle_in_warehouse_ingesting():
    assert _cycle(graph()) is None, " -> ".join(_cycle(graph()))


def test_the_cycle_finder_finds_a_planted_circle():
    g = graph()
    g["warehouse.ingesting.reading"] = g["warehouse.ingesting.reading"] | {
        "warehouse.ingesting.loader"}
    cycle = _cycle(g)
    assert cycle is not None and cycle[0] == cycle[-1]


def _reaches(g: dict[str, set[str]], a: str, b: str) -> bool:
    seen, todo = set(), [a]
    while todo:
        n = todo.pop()
        if n == b:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(g[n])
    return False


@pytest.mark.parametrize("lower", ["forking", "snapshot", "runmeta", "reading", "readers",
                                   "trace_stream", "profile_stream", "formats", "writer"])
def test_a_lower_layer_never_reaches_the_loader(lower):
    assert not _reaches(graph(), f"warehouse.ingesting.{lower}", "warehouse.ingesting.loader")


@pytest.mark.parametrize("reader", ["reading", "readers", "trace_stream", "profile_stream",
                                    "formats"])
def test_readers_know_nothing_of_the_writer(reader):
    assert not _reaches(graph(), f"warehouse.ingesting.{reader}", "warehouse.ingesting.writer")


def test_the_compiled_scanner_is_a_reader_detail():
    """Only the format modules use the compiled scanner."""
    g = graph()
    for scanner in ("kineto_scan", "_kscan"):
        users = {n for n, deps in g.items() if f"warehouse.ingesting.formats.{scanner}" in deps}
        assert users and all(u.startswith("warehouse.ingesting.formats.")
                             or u == "warehouse.ingesting.trace_stream" for u in users), users
