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

import operator

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
_FIELD_VALUES = operator.itemgetter(*(n for n, _, _ in TREND_FIELDS))  # a row's, in field order


def _kernel_name(names: pa.Array) -> pa.Array:
    out = []
    for n in names.to_pylist():
        out.append(None if n is None else kernel_names.parse(n).as_dict())
    return pa.array(out, type=_KERNEL_NAME_ARROW)


def _kernel_family(names: pa.Array) -> pa.Array:
    return pa.array([None if n is None else kernel_names.normalise(n) for n in names.to_pylist()],
                    type=pa.string())


def trend_array(per_series: list[list[dict] | None]) -> pa.Array:
    """The verdict rows of each series (None: a NULL list) as one ``_TREND_ARROW`` array.

    Built column by column: one typed child array per field of ``TREND_FIELDS`` over every row,
    then the struct and list arrays from them, with the values ``pa.array`` would give the
    dicts — several times cheaper than converting a dict per row."""
    flat: list[dict] = []
    offsets = [0]
    nulls = []
    for rows in per_series:
        if rows is not None:
            flat += rows
        offsets.append(len(flat))
        nulls.append(rows is None)
    cols = list(zip(*map(_FIELD_VALUES, flat), strict=True)) if flat else [()] * len(TREND_FIELDS)
    children = [pa.array(col, type=t) for col, (_, _, t) in zip(cols, TREND_FIELDS, strict=True)]
    structs = pa.StructArray.from_arrays(children, fields=list(_TREND_ARROW.value_type))
    mask = pa.array(nulls, type=pa.bool_()) if any(nulls) else None
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), structs,
                                    type=_TREND_ARROW, mask=mask)


def _judge(cfg: stats.VerdictConfig):
    def judge(series_cells: pa.Array) -> pa.Array:
        return trend_array([None if cells is None else verdicts.judge_series(cells, cfg)
                            for cells in series_cells.to_pylist()])

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
