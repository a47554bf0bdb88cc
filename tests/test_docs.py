"""Docs that are generated from code stay in sync with it."""

from warehouse import docs_gen


def test_raw_table_reference_is_current():
    text = docs_gen.DOC.read_text()
    assert docs_gen.render(text) == text, "run: .venv/bin/python -m warehouse.docs_gen"
    for col in ("sha256", "parser_version", "offset_cycles", "fraction_of_profiled_sum"):
        assert f"`{col}`" in text
