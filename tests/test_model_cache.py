"""The models' parse cache: what loading derives from a model's text (its dependencies, the
narrowed SQL of an incremental build) is read back instead of parsing the text again, and is
never trusted beyond the text, sqlglot and the runner it was derived with."""

from __future__ import annotations

import json

import pytest

from warehouse.errors import ModelError
from warehouse.modelling import models, parse_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("PWH_MODEL_CACHE", str(d))
    monkeypatch.setattr(parse_cache, "_MEMO", {})
    return d


def _derived(project) -> dict:
    return {n: (m.deps, models.scoped_sql(m) if m.incremental else None)
            for n, m in project.models.items()}


def _no_parsing(monkeypatch):
    def refuse(path, text):
        raise AssertionError(f"{path} parsed although its entry is cached")

    monkeypatch.setattr(models, "_parse", refuse)


def test_a_second_load_reads_the_cache_and_derives_the_same(cache, monkeypatch):
    first = models.load_project()
    want = _derived(first)
    assert len(list(cache.glob("*.json"))) == len(first.models)
    parse = models._parse
    monkeypatch.setattr(parse_cache, "_MEMO", {})  # a new process: only the files
    _no_parsing(monkeypatch)
    second = models.load_project()
    assert _derived(second) == want
    assert second.order == first.order
    monkeypatch.setattr(models, "_parse", parse)
    m = second.models["marts.metric_trends"]
    assert m.ast.sql() == first.models["marts.metric_trends"].ast.sql()  # parsed when asked


def test_without_a_cache_scoped_sql_is_derived_from_the_tree(cache, monkeypatch):
    cached = _derived(models.load_project())
    monkeypatch.setenv("PWH_MODEL_CACHE", "off")
    monkeypatch.setattr(parse_cache, "_MEMO", {})
    project = models.load_project()
    plain = {n: models.Model(m.name, m.path, m.sql, m.header, m.deps)
             for n, m in project.models.items()}  # no cached text: scoped from the tree
    assert {n: (m.deps, models.scoped_sql(m) if m.incremental else None)
            for n, m in plain.items()} == cached


def _write_model(root, text):
    (root / "marts").mkdir(parents=True, exist_ok=True)
    path = root / "marts" / "t.sql"
    path.write_text(text)
    return path


HEAD = "-- name: marts.t\n-- grain: one row\n-- purpose: a test\n-- incremental: run_id\n"


def test_a_changed_text_is_parsed_again_and_a_bad_one_never_cached(cache, tmp_path,
                                                                   monkeypatch):
    root = tmp_path / "sql"
    path = _write_model(root, HEAD + "select run_id from raw.files as f\n")
    m = models.load_model(path, root)
    assert m.deps == ("raw.files",) and "pwh_scope_runs" in models.scoped_sql(m)
    _write_model(root, HEAD + "select run_id from raw.ncu_runs as r\n")
    assert models.load_model(path, root).deps == ("raw.ncu_runs",)
    bad = HEAD + "select raw.ncu_runs.run_id from raw.ncu_runs\n"
    _write_model(root, bad)
    before = set(cache.glob("*.json"))
    for _ in range(2):
        with pytest.raises(ModelError, match="by table alias"):
            models.load_model(path, root)
    assert set(cache.glob("*.json")) == before


def test_a_damaged_entry_or_an_unwritable_folder_means_parsing(cache, tmp_path, monkeypatch):
    root = tmp_path / "sql"
    path = _write_model(root, HEAD + "select run_id from raw.ncu_runs as r\n")
    models.load_model(path, root)
    (entry,) = cache.glob("*.json")
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "deps": "raw.files"}))  # not a list: not trusted
    monkeypatch.setattr(parse_cache, "_MEMO", {})
    assert models.load_model(path, root).deps == ("raw.ncu_runs",)
    entry.write_text('{"key": ')  # truncated
    monkeypatch.setattr(parse_cache, "_MEMO", {})
    assert models.load_model(path, root).deps == ("raw.ncu_runs",)
    # an entry of another key (another text) under this key's name is not used
    entry.write_text(json.dumps({**data, "key": "0" * 64, "deps": ["raw.files"]}))
    monkeypatch.setattr(parse_cache, "_MEMO", {})
    assert models.load_model(path, root).deps == ("raw.ncu_runs",)
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    monkeypatch.setenv("PWH_MODEL_CACHE", str(blocked / "cache"))
    monkeypatch.setattr(parse_cache, "_MEMO", {})
    assert models.load_model(path, root).deps == ("raw.ncu_runs",)


def test_every_module_the_model_functions_run_is_in_the_stamp():
    """A model's stamp hashes the code its SQL functions run: the modules of warehouse.modelling
    that importing udfs loads (seen by the interpreter, in a fresh process) are exactly the
    files ``code_files`` reads from the imports. A module split off the verdict rules and
    left out of the stamp let an upgraded warehouse keep verdicts of the old code."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from warehouse.modelling import models

    script = ("import sys, json; import warehouse.modelling.udfs; "
              "print(json.dumps(sorted(m.rsplit('.', 1)[1] + '.py' for m in sys.modules "
              "if m.startswith('warehouse.modelling.'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True,
                                       text=True, check=True).stdout)
    here = Path(models.__file__).resolve().parent
    assert list(models.code_files(here)) == loaded
    assert {"verdicts.py", "late_confirm.py", "stats.py", "kernel_names.py"} <= set(loaded)


def test_code_files_reads_every_form_of_import(tmp_path):
    """Parenthesised name lists with comments and aliases, submodule imports, lazy imports in
    functions and plain ``import``; a name that is no module of the package is left out."""
    from warehouse.modelling import models

    (tmp_path / "udfs.py").write_text(
        "from warehouse.modelling import (\n    a,  # the first\n    b as bee,\n)\n"
        "from warehouse.modelling import CONSTANT\n")
    (tmp_path / "a.py").write_text("def f():\n    from warehouse.modelling.d import x\n")
    (tmp_path / "b.py").write_text("import warehouse.modelling.e as e\n")
    for f in ("d.py", "e.py", "unused.py"):
        (tmp_path / f).write_text("")
    assert models.code_files(tmp_path) == ("a.py", "b.py", "d.py", "e.py", "udfs.py")
