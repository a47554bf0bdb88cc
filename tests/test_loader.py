"""The raw layer: counts, idempotency, losslessness and atomicity of the loader."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import AUDIT_SEED, counts, ro
from warehouse.ingesting.formats import audit, profile
from warehouse.ingesting.loader import ingest_file, ingest_paths

EXPECTED = {
    "files": 2, "profile_runs": 1, "profile_groups": 19, "profile_samples": 3,
    "profile_sample_metadata": 33, "audit_documents": 1, "audit_rows": 17,
    "audit_components": 52, "audit_kernels": 79,
}


def test_seed_counts(wh, seeds):
    results = ingest_paths(wh, seeds.values())
    assert [r.status for r in results] == ["ingested", "ingested"]
    assert counts(wh) == EXPECTED


def test_second_ingest_is_a_noop(wh, seeds):
    ingest_paths(wh, seeds.values())
    again = ingest_paths(wh, seeds.values())
    assert [r.status for r in again] == ["skipped", "skipped"]
    assert all(r.message == "already ingested" for r in again)
    assert counts(wh) == EXPECTED


def test_renamed_copy_is_a_noop(wh, seeds, tmp_path):
    ingest_file(wh, seeds["audit"])
    other = tmp_path / "elsewhere" / "renamed.bin"
    other.parent.mkdir()
    shutil.copy(seeds["audit"], other)
    r = ingest_file(wh, other)
    assert r.status == "skipped" and r.message == "already ingested"
    assert counts(wh)["files"] == 1


@pytest.mark.parametrize("kind,module", [("profile", profile), ("audit", audit)])
def test_lossless_round_trip(wh, seeds, kind, module):
    r = ingest_file(wh, seeds[kind])
    original = json.loads(seeds[kind].read_bytes())
    con = ro(wh)
    try:
        rebuilt = module.rebuild(con, r.sha256)
    finally:
        con.close()
    assert rebuilt == original
    # equality of parsed JSON also holds type by type where it matters
    if kind == "profile":
        assert rebuilt["groups"][0]["dimensions"] == {}
        assert rebuilt["atOffset"] is None
        assert all(isinstance(m["value"], str) for s in rebuilt["samples"] for m in s["metadata"])
        assert [g["name"] for g in rebuilt["groups"]] == [g["name"] for g in original["groups"]]
    else:
        assert [k["id"] for k in rebuilt["rows"][0]["kernels"]] == [
            k["id"] for k in original["rows"][0]["kernels"]]


def test_manifest_records_identity(wh, seeds):
    r = ingest_file(wh, seeds["profile"], label="abc123", captured_at="2026-01-02T03:04:05+01:00")
    con = ro(wh)
    row = con.execute(
        "SELECT sha256, source_format, parser_version, byte_size, series, label, captured_at, "
        "meta_source, archive_path FROM raw.files").fetchone()
    con.close()
    assert row[0] == r.sha256 and len(row[0]) == 64
    assert row[1:4] == ("tile_profile", profile.PARSER_VERSION, seeds["profile"].stat().st_size)
    assert row[4:6] == ("seeds", "abc123")
    assert row[6].isoformat() == "2026-01-02T02:04:05"
    assert row[7] == "cli"
    assert (wh.archive_dir / f"{r.sha256}.json").read_bytes() == seeds["profile"].read_bytes()


def test_sidecar_sets_identity(wh, seeds):
    side = seeds["audit"].with_name(seeds["audit"].name + ".meta.json")
    side.write_text(json.dumps({"series": "vae", "label": "build-7",
                                "captured_at": "2026-03-01T00:00:00Z"}))
    ingest_paths(wh, [seeds["audit"].parent])  # the sidecar itself is not ingested
    con = ro(wh)
    rows = con.execute("SELECT file_name, series, label, meta_source FROM raw.files "
                       "ORDER BY file_name").fetchall()
    con.close()
    assert ("004_fe0a1716faf88a59.json", "vae", "build-7", "sidecar") in rows
    assert len(rows) == 2


class _ExplodingTables(dict):
    """Yields two tables, then fails: an error after partial writes inside the transaction."""

    def items(self):
        for n, (k, v) in enumerate(super().items()):
            if n == 2:
                raise RuntimeError("injected failure after partial writes")
            yield k, v


def test_error_mid_load_leaves_no_trace(wh, seeds, monkeypatch):
    real_parse = profile.parse

    def parse(*a, **kw):
        parsed = real_parse(*a, **kw)
        parsed.tables = _ExplodingTables(parsed.tables)
        return parsed

    monkeypatch.setattr(profile, "parse", parse)
    with pytest.raises(RuntimeError, match="injected"):
        ingest_file(wh, seeds["profile"])
    assert counts(wh) == dict.fromkeys(counts(wh), 0)
    monkeypatch.undo()
    assert ingest_file(wh, seeds["profile"]).status == "ingested"
    assert counts(wh)["profile_groups"] == 19


@pytest.mark.parametrize("label", ["../../etc/passwd", "x'); DROP TABLE raw.files; --",
                                   'a"b', "tab\there", "/abs"])
def test_hostile_cli_label_is_refused(wh, seeds, label):
    r = ingest_file(wh, seeds["audit"], label=label)
    assert r.status == "failed" and "label" in r.message and str(seeds["audit"]) in r.message
    assert counts(wh)["files"] == 0


def test_default_identity_is_sanitised(wh, tmp_path):
    d = tmp_path / "runs (old) 'x'"
    d.mkdir()
    f = d / "my run..v2.json"
    f.write_bytes(AUDIT_SEED.read_bytes())
    assert ingest_file(wh, f).status == "ingested"
    con = ro(wh)
    series, label = con.execute("SELECT series, label FROM raw.files").fetchone()
    con.close()
    assert series == "runs _old_ _x_" and label == "my run_v2"
