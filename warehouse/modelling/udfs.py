"""Python functions registered on the build connection for SQL models to call.

Kept separate from the models so that the statistics are unit-testable on their own
(``stats.py``, ``verdicts.py``, ``kernel_names.py``). Only tables call these functions: a view calling them would
fail on analyst connections, which do not register them.

* ``pwh_kernel_name(name)`` -> STRUCT(short, family, arch, tile, precision, variant)
* ``pwh_kernel_family(name)`` -> VARCHAR: the normalised family of a trace kernel name
  (:func:`warehouse.modelling.kernel_names.normalise`)
* ``pwh_judge_series(cells)`` -> one verdict row per cell of one series, see
  :func:`warehouse.modelling.verdicts.judge_series`; ``cells`` is a list of
  STRUCT(kind, key, label, label_seq, values DOUBLE[], runs VARCHAR[]) (``runs``: the run id of
  each value, same order)
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.modelling import kernel_names, stats, verdicts

KERNEL_NAME_TYPE = "STRUCT(short VARCHAR, family VARCHAR, arch VARCHAR, tile VARCHAR, " \
                   "precision VARCHAR, variant VARCHAR)"
_KERNEL_NAME_ARROW = pa.struct([(f, pa.string()) for f in kernel_names.FIELDS])

CELL_TYPE = "STRUCT(kind VARCHAR, key VARCHAR, label VARCHAR, label_seq BIGINT, " \
            "\"values\" DOUBLE[], runs VARCHAR[])[]"

# (name, duckdb type, arrow type) of each verdict field, in output order
TREND_FIELDS = (
    ("kind", "VARCHAR", pa.string()),
    ("key", "VARCHAR", pa.string()),
    ("label", "VARCHAR", pa.string()),
    ("label_seq", "BIGINT", pa.int64()),
    ("repeats", "BIGINT", pa.int64()),
    ("run_values", "DOUBLE[]", pa.list_(pa.float64())),
    ("run_factors", "DOUBLE[]", pa.list_(pa.float64())),
    ("median", "DOUBLE", pa.float64()),
    ("baseline_labels", "BIGINT", pa.int64()),
    ("baseline_runs", "BIGINT", pa.int64()),
    ("baseline_from_label", "VARCHAR", pa.string()),
    ("baseline_median", "DOUBLE", pa.float64()),
    ("baseline_mad", "DOUBLE", pa.float64()),
    ("delta_pct", "DOUBLE", pa.float64()),
    ("kernel_delta_pct", "DOUBLE", pa.float64()),
    ("run_wide_pct", "DOUBLE", pa.float64()),
    ("run_wide_verdict", "VARCHAR", pa.string()),
    ("p_value", "DOUBLE", pa.float64()),
    ("q_value", "DOUBLE", pa.float64()),
    ("min_attainable_p", "DOUBLE", pa.float64()),
    ("min_detectable_pct", "DOUBLE", pa.float64()),
    ("runs_needed", "BIGINT", pa.int64()),
    ("confirmed_by_label", "VARCHAR", pa.string()),
    ("method", "VARCHAR", pa.string()),
    ("verdict", "VARCHAR", pa.string()),
    ("evidence", "VARCHAR", pa.string()),
    ("change_point", "BOOLEAN", pa.bool_()),
    ("floor_pct", "DOUBLE", pa.float64()),
    ("alpha", "DOUBLE", pa.float64()),
)
TREND_TYPE = "STRUCT(" + ", ".join(f'"{n}" {t}' for n, t, _ in TREND_FIELDS) + ")[]"
_TREND_ARROW = pa.list_(pa.struct([(n, a) for n, _, a in TREND_FIELDS]))


def _kernel_name(names: pa.Array) -> pa.Array:
    out = []
    for n in names.to_pylist():
        out.append(None if n is None else kernel_names.parse(n).as_dict())
    return pa.array(out, type=_KERNEL_NAME_ARROW)


def _kernel_family(names: pa.Array) -> pa.Array:
    return pa.array([None if n is None else kernel_names.normalise(n) for n in names.to_pylist()],
                    type=pa.string())


def _judge(cfg: stats.VerdictConfig):
    def judge(series_cells: pa.Array) -> pa.Array:
        out = []
        for cells in series_cells.to_pylist():
            if cells is None:
                out.append(None)
                continue
            rows = verdicts.judge_series(cells, cfg)
            out.append([{n: r[n] for n, _, _ in TREND_FIELDS} for r in rows])
        return pa.array(out, type=_TREND_ARROW)

    return judge


def _replace(con, name: str, fn, params, ret) -> None:
    try:
        con.remove_function(name)
    except Exception:  # noqa: BLE001 - not registered yet on this connection
        pass
    con.create_function(name, fn, params, ret, type="arrow", side_effects=False)


def register(con, config: stats.VerdictConfig | None = None) -> None:
    """Register every function models use. Safe to call more than once on a connection."""
    cfg = config or stats.VerdictConfig.from_env()
    # DuckDB 2.0 refuses to (un)register functions while the connection holds a partly fetched
    # result (e.g. the caller's ``execute(...).fetchone()``): finish it first.
    con.execute("select 1").fetchall()
    _replace(con, "pwh_kernel_name", _kernel_name, ["VARCHAR"], KERNEL_NAME_TYPE)
    _replace(con, "pwh_kernel_family", _kernel_family, ["VARCHAR"], "VARCHAR")
    _replace(con, "pwh_judge_series", _judge(cfg), [CELL_TYPE], TREND_TYPE)
