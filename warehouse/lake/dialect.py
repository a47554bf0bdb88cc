"""The models in Spark SQL: sqlglot's transpilation, per-model overrides, and the lint.

sqlglot transpiles every model from DuckDB to Spark without an error, but some constructs
change meaning *silently* on the way. The lint refuses a model that uses one of them unless
the model has a hand-written Spark override beside it (``sql/<layer>/<name>.spark.sql``, the
same header, the same columns). An override is the smallest fix: the model's own SQL with the
offending expressions rewritten.

Table names: Spark's session catalog has no ``raw``/``staging`` databases here; every
``schema.table`` the SQL reads is renamed ``schema__table`` (a temporary view) in the AST.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp

from warehouse.errors import ModelError
from warehouse.modelling.models import Model

OVERRIDE_SUFFIX = ".spark.sql"


@dataclass(frozen=True)
class Rule:
    code: str
    what: str  # the construct
    why: str  # what changes on Spark
    found: Callable[[exp.Expression], list[exp.Expression]]


def _aggs(node: exp.Expression) -> list[exp.Expression]:
    return list(node.find_all(exp.ArrayAgg))


def _ordered_aggs(node: exp.Expression) -> list[exp.Expression]:
    return [a for a in _aggs(node) if a.find(exp.Order)]


def _funcs(*names: str, classes: tuple = ()):
    """Calls of functions named ``names`` (unknown to sqlglot) or parsed as ``classes``."""
    want = {n.lower() for n in names}

    def found(node: exp.Expression) -> list[exp.Expression]:
        out = [f for f in node.find_all(exp.Anonymous) if f.name.lower() in want]
        for cls in classes:
            out += list(node.find_all(cls))
        return out

    return found


def _union_by_name(node):
    return [u for u in node.find_all(exp.Union) if u.args.get("by_name")]


def _try_cast_array(node):
    return [c for c in node.find_all(exp.TryCast)
            if c.to.is_type(exp.DataType.Type.ARRAY) or c.to.args.get("nested")]


def _asof(node):
    return [j for j in node.find_all(exp.Join) if "ASOF" in (j.text("method") or "").upper()]


def _slices(node):
    return [b for b in node.find_all(exp.Bracket) if b.find(exp.Slice)]


def _columns_star(node):
    return list(node.find_all(exp.Columns))


def _json_arrow(node):
    return list(node.find_all(exp.JSONExtractScalar))


def _pivot(node):
    return list(node.find_all(exp.Pivot))


def _distinct_string_agg(node):
    return [g for g in node.find_all(exp.GroupConcat) if g.find(exp.Distinct)]


RULES = (
    Rule("L1", "list(x ORDER BY y)", "Spark's collect_list ignores the ORDER BY: the list "
         "comes out in an arbitrary order", _ordered_aggs),
    Rule("L2", "list()/array_agg()", "over no rows DuckDB gives NULL, Spark's collect_list []; "
         "DuckDB keeps NULL elements, Spark drops them", _aggs),
    Rule("L3", "UNION ALL BY NAME", "Spark SQL has no BY NAME: sqlglot keeps it and Spark "
         "refuses it, or a positional union mixes columns up", _union_by_name),
    Rule("L4", "try_cast(… AS T[])", "Spark cannot cast a string to an array: NULL for "
         "every row", _try_cast_array),
    Rule("L5", "ASOF JOIN", "no Spark equivalent", _asof),
    Rule("L6", "list slices x[a:b]", "bounds are 1-based and inclusive in DuckDB, Spark's "
         "slice() takes a start and a length", _slices),
    Rule("L7", "COLUMNS(…)", "no Spark equivalent", _columns_star),
    Rule("L8", "epoch_ms()", "DuckDB's epoch_ms(int) makes a timestamp, epoch_ms(ts) an "
         "integer: the transpilation picks one", _funcs("epoch_ms", classes=(exp.UnixToTime,))),
    Rule("L9", "->> (JSON text)", "JSONPath dialects differ", _json_arrow),
    Rule("L10", "generate_series()", "DuckDB returns a list (inclusive end), Spark's sequence "
         "differs in type and bounds", _funcs("generate_series", classes=(exp.GenerateSeries,))),
    Rule("L11", "quantile_cont()", "Spark's percentile is not interpolated the same way on "
         "every version", _funcs("quantile_cont", classes=(exp.PercentileCont, exp.Quantile))),
    Rule("L12", "PIVOT", "column naming and NULL handling differ", _pivot),
    Rule("L13", "string_agg(distinct …)", "sqlglot writes listagg(distinct …) within group, "
         "which Spark 4.3's distinct-aggregate rewrite fails on beside other aggregates",
         _distinct_string_agg),
)


@dataclass(frozen=True)
class Finding:
    model: str
    path: Path
    rule: Rule
    snippet: str

    def __str__(self) -> str:
        return (f"{self.path}: {self.rule.code} {self.rule.what}: {self.snippet[:80]} — "
                f"{self.rule.why}; override that CTE in {self.path.stem}{OVERRIDE_SUFFIX}")


def override_path(model: Model) -> Path:
    return model.path.with_name(model.path.stem + OVERRIDE_SUFFIX)


FINAL = "final select"  # the part name of a model's main SELECT (its CTEs excluded)


def parts(ast: exp.Expression) -> dict[str, exp.Expression]:
    """A model's parts: each CTE by name, and its main SELECT without the CTEs."""
    out = {c.alias_or_name.lower(): c.this for c in ast.ctes}
    final = ast.copy()
    final.set("with_", None) if "with_" in final.args else final.set("with", None)
    out[FINAL] = final
    return out


@dataclass(frozen=True)
class Override:
    """A model's Spark override: Spark SQL CTEs replacing the model's CTEs of the same name, and
    its main SELECT replacing the model's unless it is ``select * from model``."""

    path: Path
    ctes: dict[str, exp.Expression]
    final: exp.Expression | None
    base: str  # the ``-- base:`` header: hash of the DuckDB parts it replaces

    @property
    def replaced(self) -> set[str]:
        return set(self.ctes) | ({FINAL} if self.final is not None else set())


def base_hash(model: Model, replaced: set[str]) -> str:
    """Hash of the DuckDB SQL of the parts an override replaces (detects a stale override)."""
    import hashlib

    p = parts(model.ast)
    text = "\n".join(f"{n}: {p[n].sql(dialect='duckdb')}" for n in sorted(replaced) if n in p)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_override(model: Model) -> Override | None:
    path = override_path(model)
    if not path.exists():
        return None
    text = path.read_text()
    base = ""
    for line in text.splitlines():
        if line.strip().startswith("-- base:"):
            base = line.split(":", 1)[1].strip()
    try:
        stmts = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise ModelError(f"{path}: cannot parse Spark SQL: {exc}") from None
    if len(stmts) != 1 or not isinstance(stmts[0], exp.Query):
        raise ModelError(f"{path}: an override is exactly one Spark SQL query")
    ast = stmts[0]
    p = parts(ast)
    final = p.pop(FINAL)
    keep = (isinstance(final, exp.Select) and final.is_star and final.args.get("from_") is not None
            and final.args["from_"].this.name.lower() == "model")
    ov = Override(path, p, None if keep else final, base)
    known = set(parts(model.ast))
    unknown = sorted(set(ov.ctes) - known)
    if unknown:
        raise ModelError(f"{path}: overrides CTE {', '.join(unknown)}, which {model.path.name} "
                         "does not have")
    want = base_hash(model, ov.replaced)
    if base != want:
        raise ModelError(f"{path}: {model.path.name} changed since this override was written "
                         f"(or its '-- base:' header is missing): check that the override still "
                         f"means the same, then set '-- base: {want}'")
    return ov


def findings(model: Model, skip: set[str] = frozenset()) -> list[Finding]:
    """Constructs of ``model`` that change meaning silently on Spark, outside the parts
    ``skip`` (the ones an override replaces)."""
    out = []
    for name, node in parts(model.ast).items():
        if name in skip:
            continue
        for rule in RULES:
            for hit in rule.found(node):
                out.append(Finding(model.name, model.path, rule,
                                   f"{name}: {hit.sql(dialect='duckdb')}"))
    return out


def lint(project) -> list[Finding]:
    """What would change meaning on Spark in every model, overrides taken into account (an
    empty list: all clear). A stale or broken override raises :class:`ModelError`."""
    out = []
    for m in project.models.values():
        ov = load_override(m)
        out += findings(m, ov.replaced if ov else set())
    return out


def check(project) -> None:
    bad = lint(project)
    if bad:
        raise ModelError("models that would change meaning on Spark:\n  "
                         + "\n  ".join(map(str, bad)))


def python_functions(model: Model) -> set[str]:
    """The ``pwh_*`` Python functions ``model`` calls (in its SQL or its override)."""
    ast = model.ast
    ov_path = override_path(model)
    nodes = [ast]
    if ov_path.exists():
        nodes += [s for s in sqlglot.parse(ov_path.read_text(), read="spark") if s is not None]
    return {f.name.lower() for n in nodes for f in n.find_all(exp.Anonymous)
            if f.name.lower().startswith("pwh_")}


def view_name(name: str) -> str:
    return name.replace(".", "__")


def _rename_tables(ast: exp.Expression) -> exp.Expression:
    def fix(node):
        if isinstance(node, exp.Table) and node.name and node.db:
            return exp.Table(this=exp.to_identifier(view_name(f"{node.db}.{node.name}")),
                             alias=node.args.get("alias"))
        return node

    return ast.transform(fix)


def spark_sql(model: Model) -> tuple[str, str]:
    """(Spark SQL of ``model``, how: ``transpiled`` or ``transpiled + override of …``).

    :class:`ModelError` if a construct that changes meaning is left without an override."""
    ov = load_override(model)
    bad = findings(model, ov.replaced if ov else set())
    if bad:
        raise ModelError("\n".join(map(str, bad)))
    ast = model.ast.copy()
    how = "transpiled"
    if ov is not None:
        for c in ast.ctes:
            name = c.alias_or_name.lower()
            if name in ov.ctes:
                c.set("this", ov.ctes[name].copy())
        if ov.final is not None:
            final = ov.final.copy()
            key = "with_" if "with_" in ast.args else "with"
            final.set(key, ast.args.get(key))
            ast = final
        how += " + override of " + ", ".join(sorted(ov.replaced))
    return _rename_tables(ast).sql(dialect="spark"), how
