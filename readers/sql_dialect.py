"""Spark SQL for DuckDB: a query parsed as Spark SQL (sqlglot) and written in DuckDB's dialect, with
what Spark means that a plain transpile would change; which views it names; the keys its conditions
allow a view to be read for (push-down). No Spark, no DuckDB here."""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import pyarrow
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError

from ..savepoint.errors import SqlError

#: the column whose ``=`` / ``IN`` conditions select key groups (as the Spark data source's push-down)
KEY_COLUMN = "key"


def parse(text: str, views: Mapping[str, str]) -> exp.Expression:
    """The one statement of ``text``, parsed as Spark SQL; :class:`SqlError` when it does not parse."""
    try:
        statements = [statement for statement in sqlglot.parse(text, read="spark") if statement is not None]
    except ParseError as error:
        raise SqlError(_parse_problem(error), views) from None
    except SqlglotError as error:
        raise SqlError(_one_line(str(error)), views) from None
    if len(statements) != 1:
        raise SqlError(f"give one statement, not {len(statements)}", views)
    return statements[0]


def _parse_problem(error: ParseError) -> str:
    if not error.errors:
        return _one_line(str(error))
    first = error.errors[0]
    near = (first.get("highlight") or "").strip()
    where = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
    return f"{first.get('description') or 'cannot parse'}{where}" + (f" near '{near}'" if near else "")


def _one_line(message: str) -> str:
    lines = [line.strip() for line in message.replace("\x1b[4m", "").replace("\x1b[0m", "").splitlines()
             if line.strip()]
    return lines[0] if lines else "cannot parse the query"


def table_names(parsed: exp.Expression) -> list[str]:
    """The (lower-case) names of the tables the query reads, as often as it names them."""
    return [table.name.lower() for table in parsed.find_all(exp.Table) if table.name and not table.args.get("db")]


# ---------------------------------------------------------------------------------------------
# push-down


def pushed_keys(parsed: exp.Expression, views: set[str]) -> dict[str, list]:
    """{view: the keys it need be read for}: a view the query names once, with ``key = literal`` or
    ``key IN (literals)`` among the ``AND``-ed conditions of the ``WHERE`` of the ``SELECT`` reading it.
    Rows of other keys could not pass that condition (outer joins included: a row that loses its
    partner has a null key there), so reading only those keys' groups changes no result."""
    named = Counter(table_names(parsed))
    found: dict[str, list] = {}
    for select in parsed.find_all(exp.Select):
        where = select.args.get("where")
        sources = _sources(select)
        if where is None or not sources:
            continue
        for condition in _conjuncts(where.this):
            column, values = _key_condition(condition)
            if column is None:
                continue
            table = _source_of(column, sources)
            if table is None:
                continue
            name = table.name.lower()
            if name not in views or named[name] != 1:
                continue
            found[name] = values if name not in found else [value for value in found[name] if value in values]
    return found


def _sources(select: exp.Select) -> list[exp.Expression]:
    """What the ``SELECT`` reads from: its ``FROM`` item and those of its joins."""
    source = select.args.get("from") or select.args.get("from_")
    if source is None:
        return []
    return [source.this] + [join.this for join in select.args.get("joins") or []]


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return [part for side in (condition.this, condition.expression) for part in _conjuncts(side)]
    return [condition]


def _key_condition(condition: exp.Expression) -> tuple[exp.Column | None, list]:
    if isinstance(condition, exp.EQ):
        for column, other in ((condition.this, condition.expression), (condition.expression, condition.this)):
            value = _literal(other)
            if _is_key(column) and value is not None:
                return column, [value]
    if isinstance(condition, exp.In) and _is_key(condition.this) and not condition.args.get("query") \
            and not condition.args.get("unnest") and condition.expressions:
        values = [_literal(item) for item in condition.expressions]
        if all(value is not None for value in values):
            return condition.this, values
    return None, []


def _is_key(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and node.name.lower() == KEY_COLUMN


def _literal(node: exp.Expression):
    """A string or integer literal's value; None for anything else."""
    node = node.unnest()
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this.unnest()
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return None if negative else node.this
    try:
        value = int(node.this)
    except ValueError:
        return None
    return -value if negative else value


def _source_of(column: exp.Column, sources: list[exp.Expression]) -> exp.Table | None:
    """The table of ``sources`` a column belongs to: by its qualifier, or the only source."""
    qualifier = column.table
    if qualifier:
        matches = [source for source in sources if source.alias_or_name.lower() == qualifier.lower()]
    else:
        matches = sources if len(sources) == 1 else []
    return matches[0] if len(matches) == 1 and isinstance(matches[0], exp.Table) else None


# ---------------------------------------------------------------------------------------------
# DuckDB's dialect


def to_duckdb(parsed: exp.Expression, schemas: Mapping[str, pyarrow.Schema], views: Mapping[str, str]) -> str:
    """The query in DuckDB's dialect, meaning what Spark means by it. ``schemas``: each view's columns
    (lower-case view names): ``explode`` of a map needs to know it is one."""
    rewritten = parsed.copy()
    for select in list(rewritten.find_all(exp.Select)):
        sources = _source_schemas(select, schemas)
        _explode_projections(select, sources)
        _lateral_views(select, sources)
        _map_sizes(select, sources)
        _spark_names(select)
        _case_mappings(select)
    try:
        return rewritten.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as error:
        raise SqlError(f"{_one_line(str(error))} (the Spark engine runs it: --engine spark)", views) from None


def _source_schemas(select: exp.Select, schemas: Mapping[str, pyarrow.Schema]) -> dict[str, pyarrow.Schema]:
    """{alias or name: columns} of the views the ``SELECT`` reads directly."""
    return {source.alias_or_name.lower(): schemas[source.name.lower()] for source in _sources(select)
            if isinstance(source, exp.Table) and source.name.lower() in schemas}


def _type_of(node: exp.Expression, sources: Mapping[str, pyarrow.Schema]) -> pyarrow.DataType | None:
    """The Arrow type of a column (or a struct's field, ``column.field``) of a view the ``SELECT`` reads
    (names compared case-insensitively, as Spark does)."""
    if not isinstance(node, exp.Column):
        return None
    name, qualifier = node.name, (node.table or "").lower()
    if qualifier in sources:
        return _field(sources[qualifier], name)
    if not qualifier:
        found = [found for found in (_field(schema, name) for schema in sources.values()) if found is not None]
        return found[0] if len(found) == 1 else None
    structs = [found for found in (_field(schema, qualifier) for schema in sources.values()) if found is not None]
    if len(structs) == 1 and pyarrow.types.is_struct(structs[0]):
        return _field(pyarrow.schema(list(structs[0])), name)
    return None


def _field(schema: pyarrow.Schema, name: str) -> pyarrow.DataType | None:
    found = [field.type for field in schema if field.name.lower() == name.lower()]
    return found[0] if len(found) == 1 else None


def _is_map(node: exp.Expression, sources: Mapping[str, pyarrow.Schema]) -> bool:
    found = _type_of(node, sources)
    return found is not None and pyarrow.types.is_map(found)


def _unnest(argument: exp.Expression, part: str | None = None) -> exp.Expression:
    """``UNNEST(argument)``, of ``map_keys``/``map_values`` of it with ``part``."""
    if part is not None:
        argument = exp.Anonymous(this=part, expressions=[argument.copy()])
    return exp.Anonymous(this="UNNEST", expressions=[argument.copy()])


def _explode_projections(select: exp.Select, sources: Mapping[str, pyarrow.Schema]) -> None:
    """``explode`` in the select list: of a list, one row per element (column ``col`` unless named); of
    a map, one row per entry, columns ``key`` and ``value`` (or the two names of ``AS (k, v)``): two
    ``UNNEST``s of one ``SELECT``, which DuckDB walks side by side."""
    projections = []
    for projection in select.expressions:
        aliases = projection.expressions if isinstance(projection, exp.Aliases) else None
        inner = projection.this if isinstance(projection, (exp.Alias, exp.Aliases)) else projection
        if not isinstance(inner, exp.Explode) or isinstance(inner, (exp.ExplodeOuter, exp.Posexplode)):
            projections.append(projection)
            continue
        argument = inner.this
        if _is_map(argument, sources):
            names = [alias.name for alias in aliases] if aliases else ["key", "value"]
            if len(names) != 2:
                projections.append(projection)
                continue
            projections.append(exp.alias_(_unnest(argument, "map_keys"), names[0], quoted=True))
            projections.append(exp.alias_(_unnest(argument, "map_values"), names[1], quoted=True))
            continue
        name = projection.alias if isinstance(projection, exp.Alias) else "col"
        projections.append(exp.alias_(_unnest(argument), name, quoted=True))
    select.set("expressions", projections)


def _lateral_views(select: exp.Select, sources: Mapping[str, pyarrow.Schema]) -> None:
    """``LATERAL VIEW explode(x) t AS a[, b]`` as a ``CROSS JOIN LATERAL`` of a ``SELECT`` of ``UNNEST``s."""
    laterals = select.args.get("laterals") or []
    kept = []
    for lateral in laterals:
        call = lateral.this
        if not lateral.args.get("view") or lateral.args.get("outer") or not isinstance(call, exp.Explode) \
                or isinstance(call, (exp.ExplodeOuter, exp.Posexplode)):
            kept.append(lateral)
            continue
        alias = lateral.args.get("alias")
        names = [column.name for column in alias.columns] if alias is not None else []
        table = alias.name if alias is not None and alias.name else "lateral_view"
        argument = call.this
        if _is_map(argument, sources):
            names = names or ["key", "value"]
            columns = [exp.alias_(_unnest(argument, "map_keys"), names[0], quoted=True),
                       exp.alias_(_unnest(argument, "map_values"), names[1], quoted=True)]
        else:
            columns = [exp.alias_(_unnest(argument), (names or ["col"])[0], quoted=True)]
        subquery = exp.Subquery(this=exp.Select(expressions=columns), alias=exp.TableAlias(this=exp.to_identifier(table)))
        select.append("joins", exp.Join(this=exp.Lateral(this=subquery), kind="CROSS"))
    select.set("laterals", kept or None)


def _map_sizes(select: exp.Select, sources: Mapping[str, pyarrow.Schema]) -> None:
    """``size`` of a map: its entries (DuckDB's ``cardinality``; sqlglot writes ``array_length``, for lists)."""
    for call in list(select.find_all(exp.ArraySize)):
        if call.find_ancestor(exp.Select) is select and _is_map(call.this, sources):
            call.replace(exp.Anonymous(this="cardinality", expressions=[call.this.copy()]))


#: Spark's ``upper`` and ``lower`` as the functions the embedded engine registers in DuckDB (Java's
#: full case mapping, as Python's: ``upper('ß')`` is ``SS``, DuckDB's own gives ``ẞ``)
CASE_MAPPINGS = {exp.Upper: ("spark_upper", str.upper), exp.Lower: ("spark_lower", str.lower)}


def _case_mappings(select: exp.Select) -> None:
    for kind, (name, _) in CASE_MAPPINGS.items():
        for call in list(select.find_all(kind)):
            if call.find_ancestor(exp.Select) is select:
                call.replace(exp.Anonymous(this=name, expressions=[call.this.copy()]))


#: functions of one column that Spark names ``name(column)``
_NAMED_CALLS = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max", exp.Avg: "avg",
                exp.Upper: "upper", exp.Lower: "lower"}


def _spark_names(select: exp.Select) -> None:
    """Unnamed aggregates (and case mappings) of one column named as Spark names them: ``count(1)`` for
    ``count(*)``, ``sum(total)`` for ``sum(t.total)`` (DuckDB would say ``count_star()``,
    ``sum(t.total)``)."""
    for projection in list(select.expressions):
        name = _NAMED_CALLS.get(type(projection))
        if name is None:
            continue
        argument = projection.this
        distinct = isinstance(argument, exp.Distinct)
        if distinct:
            if len(argument.expressions) != 1:
                continue
            argument = argument.expressions[0]
        if isinstance(argument, exp.Star) and name == "count" and not distinct:
            shown = "1"
        elif isinstance(argument, exp.Column) and not isinstance(argument.this, exp.Star):
            shown = argument.name
        else:
            continue
        projection.replace(exp.alias_(projection.copy(), f"{name}({'DISTINCT ' if distinct else ''}{shown})",
                                      quoted=True))
