"""Where the data shipped with pwh lives: the models (``sql/``), the suites and check views
(``expectations/``), the example runs (``examples/runs/``) and the analyst guide (its column
tables describe the Dagster assets).

The repository keeps them at the top level (the design card). A source checkout (``make``,
``pip install -e .``) reads them there; a wheel carries copies under ``warehouse/_data/``
(``setup.py`` maps the top-level folders into the package when it builds, by glob, so a new
model or suite is shipped without a list to edit). :func:`data_path` is the one place that
decides which: every module that reads those files asks it.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
PACKAGED = PACKAGE / "_data"

# top-level path in the repository -> the glob patterns (relative to it) a wheel carries
SHIPPED = {
    "sql": ("**/*.sql",),
    "expectations": ("**/*.json", "**/*.sql"),
    "examples/runs": ("*",),
    "docs/analyst-guide.md": ("",),
}


def in_checkout() -> bool:
    """True when ``warehouse`` is imported from a source checkout (its ``pyproject.toml``
    beside the package), not from an installed wheel."""
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "sql").is_dir()


def data_path(name: str) -> Path:
    """The shipped file or folder ``name`` (a key of :data:`SHIPPED`, or a path inside one:
    ``"expectations/suites"``): the checkout's top-level copy when running from a checkout,
    else the wheel's under ``warehouse/_data/``. The path is returned even when it does not
    exist; readers name it in their errors."""
    if not any(name == k or name.startswith(k + "/") for k in SHIPPED):
        raise ValueError(f"{name!r} is not shipped with pwh (one of {', '.join(SHIPPED)})")
    return (CHECKOUT if in_checkout() else PACKAGED) / name


def files_to_ship(root: Path) -> list[tuple[Path, str]]:
    """Every file the wheel carries: (the file under ``root``, its path under ``_data/``).
    Used by ``setup.py``; globbed, so new files are picked up."""
    out = []
    for top, patterns in SHIPPED.items():
        base = root / top
        if base.is_file():
            out.append((base, top))
            continue
        for pattern in patterns:
            for p in sorted(base.glob(pattern)):
                if p.is_file() and not any(part.startswith((".", "__")) for part in
                                           p.relative_to(base).parts):
                    out.append((p, f"{top}/{p.relative_to(base).as_posix()}"))
    return sorted(set(out), key=lambda x: x[1])
