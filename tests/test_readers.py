"""The reader protocol (``warehouse.ingesting.reading``): whatever a reader yields reaches the
one writer the same way. Toy readers stand in for a new format: batches without ``run_id`` get
the file's identity, a reader that declines hands the file on with nothing written, rows for a
table that is not a raw table write nothing."""

from __future__ import annotations

import pytest

from tests.conftest import counts, ro
from warehouse.ingesting import readers
from warehouse.ingesting.loader import ingest_file, ingest_paths
from warehouse.ingesting.reading import Declined, Reader, WholeDocument, parse_document


def _tables_of(snapshot, shown):
    parsed = parse_document(snapshot.bytes(), shown, snapshot.wait_sha())
    return parsed


class Batched(Reader):
    """Reads the document whole, then yields every table as two batches without run_id."""

    def tables(self):
        parsed = _tables_of(self.snapshot, self.shown)
        self.source_format, self.parser_version = parsed.source_format, parsed.parser_version
        self.summary = {"batches": 0}
        for name, t in parsed.tables.items():
            t = t.drop_columns(["run_id"])
            half = t.num_rows // 2
            for part in (t.slice(0, half), t.slice(half)):
                self.summary["batches"] += 1
                yield name, part


class DeclinesHalfway(Reader):
    """Sends a table, then declines (its rows must be rolled back)."""

    retry: type[Reader] | None = None

    def tables(self):
        parsed = _tables_of(self.snapshot, self.shown)
        yield next(iter(parsed.tables.items()))
        raise Declined("not mine after all", retry=self.retry)


class NotARawTable(Reader):
    def tables(self):
        yield from _tables_of(self.snapshot, self.shown).tables.items()
        yield "no_such_table", next(iter(_tables_of(self.snapshot, self.shown).tables.values()))


def _dump(s):
    con = ro(s)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'raw' "
            "AND table_name NOT IN ('files', 'ingest_errors') ORDER BY 1").fetchall()]
        return {t: sorted(con.execute(f"SELECT * FROM raw.{t}").fetchall(),  # noqa: S608
                          key=repr) for t in tables}
    finally:
        con.close()


@pytest.fixture
def use(monkeypatch):
    def use(*classes):
        monkeypatch.setattr(readers, "candidates", lambda path, size: list(classes))
    return use


def test_batches_without_run_id_get_the_identity(tmp_path, seeds, use):
    from warehouse.config import settings

    whole, batched = (settings(tmp_path / n / "w.duckdb") for n in ("whole", "batched"))
    want = ingest_file(whole, seeds["profile"])
    use(Batched)
    got = ingest_file(batched, seeds["profile"])
    assert got.status == "ingested", got.message
    assert got.sha256 == want.sha256 and got.source_format == want.source_format
    assert got.counts["batches"] >= 2 * 3
    assert _dump(batched) == _dump(whole)
    assert counts(batched) == counts(whole)


@pytest.mark.parametrize("retry", [False, True])
def test_a_reader_that_declines_hands_the_file_on_with_nothing_written(wh, tmp_path, seeds, use,
                                                                     retry, monkeypatch):
    from warehouse.config import settings

    tried = []

    class Whole(WholeDocument):
        def tables(self):
            tried.append("whole")
            yield from super().tables()

    class Retry(Whole):
        def tables(self):
            tried.append("retry")
            yield from super().tables()

    monkeypatch.setattr(DeclinesHalfway, "retry", Retry if retry else None)
    use(DeclinesHalfway, Whole)
    r = ingest_file(wh, seeds["audit"])
    assert r.status == "ingested", r.message
    assert tried == (["retry", "whole"] if retry else ["whole"])
    monkeypatch.undo()
    plain = settings(tmp_path / "plain" / "w.duckdb")
    assert ingest_file(plain, seeds["audit"]).status == "ingested"
    assert counts(wh) == counts(plain)  # the declined reader's rows are not there twice
    assert _dump(wh) == _dump(plain)


def test_rows_for_a_table_that_is_not_raw_write_nothing(wh, seeds, use):
    use(NotARawTable)
    r = ingest_paths(wh, [seeds["audit"]])[0]
    assert r.status == "failed" and "raw.no_such_table" in r.message, r.message
    assert counts(wh) == dict.fromkeys(counts(wh), 0)
    assert not wh.archive_dir.exists() or not any(
        p.name.endswith(".json") and not p.name.startswith(".") for p in wh.archive_dir.iterdir())


def test_a_file_every_reader_declines_is_refused_naming_the_reason(wh, seeds, use):
    use(DeclinesHalfway)
    r = ingest_file(wh, seeds["audit"])
    assert r.status == "failed" and "not mine after all" in r.message, r.message
    assert str(seeds["audit"]) in r.message and r.quarantine_path
    assert counts(wh) == dict.fromkeys(counts(wh), 0)
    con = ro(wh)
    try:
        assert con.execute("SELECT count(*) FROM raw.ingest_errors").fetchone() == (1,)
    finally:
        con.close()
