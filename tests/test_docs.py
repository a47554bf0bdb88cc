"""Docs that are generated from code stay in sync with it."""

from warehouse import docs_gen


def test_raw_table_reference_is_current():
    text = docs_gen.DOC.read_text()
    assert docs_gen.render(text) == text, "run: .venv/bin/python -m warehouse.docs_gen"
    for col in ("sha256", "parser_version", "offset_cycles", "fraction_of_profiled_sum"):
        assert f"`{col}`" in text


def test_operations_guide_names_the_duckdb_version_the_project_pins():
    """Other tools must match the file format: the guide names the pinned DuckDB major.minor,
    and says the PyPI `duckdb-cli` 1.x cannot open the files."""
    import re

    import duckdb

    from tests.conftest import ROOT

    pin = re.search(r'"duckdb==(\d+\.\d+)\.\*"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert duckdb.__version__.startswith(pin + ".")
    ops = (ROOT / "docs" / "operations.md").read_text()
    assert f"DuckDB {pin} files" in ops and f'`duckdb=={pin}.*`' in ops
    assert "`duckdb-cli` package on PyPI" in ops and "cannot open them" in ops


def test_analyst_guide_gives_the_export_folder_that_the_code_uses():
    from tests.conftest import ROOT
    from warehouse.config import settings

    s = settings(".pwh/warehouse.duckdb")
    rel = s.export_dir.relative_to(s.state_dir.parent)
    guide = (ROOT / "docs" / "analyst-guide.md").read_text()
    assert f"`{rel}/`" in guide and "`<state>/exports/`" in guide


def test_readme_keeps_two_newcomer_commands_and_states_the_core_install():
    import re

    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    intro = readme.split("\n---\n", 1)[0]
    assert re.search(r"`pip install \.`.*MB.* s\b", intro, re.S), "the measured core install"
