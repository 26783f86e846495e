"""Validate, write and read the results tables and ``run.json`` of :mod:`harness.results.schema`
(the layout and the units are described there): :func:`write_run_json` / :func:`read_run_json`,
:func:`to_table` (validation), :func:`write_table` (one part file per call and scenario),
:func:`find_run_dirs` and :func:`read_runs`. Bad input raises
:class:`~harness.results.schema.ResultsError`; nothing is written for a call that fails
validation."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from harness.results.schema import (ENUMS, METRIC_CONFIG_FIELDS, PARTITION_COLUMN, RUN_JSON, TABLES, ResultsError,
                                    RunInfo, check_name, config_label, file_schema, table_schema)

__all__ = ["write_run_json", "read_run_json", "to_table", "write_table", "find_run_dirs", "Runs", "read_runs"]


def write_run_json(run_dir: str | os.PathLike, info: RunInfo) -> Path:
    """Write ``run.json`` atomically (tmp file + rename)."""
    RunInfo.from_json(info.to_json(), where=f"{run_dir}/{RUN_JSON}")  # validate
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / RUN_JSON
    tmp = run_dir / f".{RUN_JSON}.tmp"
    tmp.write_text(json.dumps(info.to_json(), indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, target)
    return target


def read_run_json(run_dir: str | os.PathLike) -> RunInfo:
    path = Path(run_dir) / RUN_JSON
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: not a run directory (no {RUN_JSON})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    return RunInfo.from_json(obj, where=str(path))


# ---------------------------------------------------------------------------------------------
# Writer
def to_table(name: str, rows: Iterable[Mapping[str, Any]] | pa.Table) -> pa.Table:
    """Validate ``rows`` (dicts, or a pyarrow Table) against table ``name``'s logical schema.

    ``metrics.config`` may be left out: it then defaults to ``config_label`` of the row's
    ``METRIC_CONFIG_FIELDS`` (``'default'`` when they are all null).
    """
    schema = table_schema(name)
    if name == "metrics":
        rows = _default_config(rows)
    if isinstance(rows, pa.Table):
        extra = set(rows.column_names) - set(schema.names)
        if extra:
            raise ResultsError(f"{name}: unknown column(s) {sorted(extra)}")
        cols = {}
        for field in schema:
            if field.name in rows.column_names:
                try:
                    cols[field.name] = rows.column(field.name).cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise ResultsError(f"{name}: column {field.name!r}: {exc}") from None
            else:
                cols[field.name] = pa.nulls(rows.num_rows, field.type)
        table = pa.table(cols, schema=schema.with_metadata(None))
        _check_table(name, table)
        return table.replace_schema_metadata(schema.metadata)
    rows = list(rows)
    names = set(schema.names)
    for i, row in enumerate(rows):
        extra = set(row) - names
        if extra:
            raise ResultsError(f"{name}: row {i}: unknown field(s) {sorted(extra)}")
        for field in schema:
            value = row.get(field.name)
            if value is None and not field.nullable:
                raise ResultsError(f"{name}: row {i}: required field {field.name!r} is missing")
    try:
        table = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        bad = _find_bad_field(schema, rows)
        raise ResultsError(f"{name}: {bad or exc}") from None
    _check_table(name, table)
    return table


def _default_config(rows: Iterable[Mapping[str, Any]] | pa.Table) -> list[dict] | pa.Table:
    if isinstance(rows, pa.Table):
        if "config" in rows.column_names and rows.column("config").null_count == 0:
            return rows
        present = [f for f in METRIC_CONFIG_FIELDS if f in rows.column_names]
        given = rows.column("config").to_pylist() if "config" in rows.column_names else [None] * rows.num_rows
        fields = rows.select(present).to_pylist()
        labels = [g if g is not None else config_label(**f) for g, f in zip(given, fields)]
        if "config" in rows.column_names:
            rows = rows.drop_columns(["config"])
        return rows.append_column("config", pa.array(labels, pa.string()))
    out = []
    for row in rows:
        if row.get("config") is None:
            row = {**row, "config": config_label(**{f: row.get(f) for f in METRIC_CONFIG_FIELDS})}
        out.append(row)
    return out


def _find_bad_field(schema: pa.Schema, rows: Sequence[Mapping[str, Any]]) -> str | None:
    for i, row in enumerate(rows):
        for field in schema:
            try:
                pa.array([row.get(field.name)], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                return f"row {i}: field {field.name!r}: {row.get(field.name)!r} is not {field.type}"
    return None


def _check_table(name: str, table: pa.Table) -> None:
    import pyarrow.compute as pc

    for field in table.schema:
        if not field.nullable and table.column(field.name).null_count:
            raise ResultsError(f"{name}: required column {field.name!r} has nulls")
    for column, allowed in ENUMS.get(name, {}).items():
        bad = pc.unique(table.column(column).filter(
            pc.invert(pc.is_in(table.column(column), value_set=pa.array(allowed))))).to_pylist()
        bad = [b for b in bad if b is not None]
        if bad:
            raise ResultsError(f"{name}: column {column!r}: values {bad} not in {list(allowed)}")
    for value in pc.unique(table.column(PARTITION_COLUMN)).to_pylist():
        check_name("scenario", value, name)
    for value in pc.unique(table.column("run_id")).to_pylist():
        check_name("run_id", value, name)
    if name == "events":
        for text in pc.unique(table.column("attrs")).to_pylist():
            try:
                if not isinstance(json.loads(text), dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                raise ResultsError(f"events: field 'attrs' is not a JSON object: {text[:80]!r} ({exc})") from None


def write_table(run_dir: str | os.PathLike, name: str, rows: Iterable[Mapping[str, Any]] | pa.Table) -> list[Path]:
    """Append ``rows`` to table ``name`` of the run in ``run_dir``; one part file per scenario.

    Returns the files written. Validates everything before writing anything.
    """
    table = to_table(name, rows)
    if table.num_rows == 0:
        return []
    import pyarrow.compute as pc

    fschema = file_schema(name)
    written = []
    for scenario in sorted(pc.unique(table.column(PARTITION_COLUMN)).to_pylist()):
        part = table.filter(pc.equal(table.column(PARTITION_COLUMN), scenario))
        part = part.drop_columns([PARTITION_COLUMN]).cast(fschema)
        directory = Path(run_dir) / name / f"{PARTITION_COLUMN}={scenario}"
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"part-{uuid.uuid4().hex}.parquet"
        tmp = directory / f".{target.name}.tmp"
        pq.write_table(part, tmp)
        os.replace(tmp, target)
        written.append(target)
    return written


# ---------------------------------------------------------------------------------------------
# Reader
def find_run_dirs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Resolve ``paths`` (run dirs, or dirs holding run dirs) to sorted run dirs (with run.json)."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise ResultsError(f"{p}: no such file or directory")
        if (p / RUN_JSON).is_file():
            found.append(p)
            continue
        children = sorted(c for c in p.iterdir() if c.is_dir() and (c / RUN_JSON).is_file())
        if not children:
            raise ResultsError(f"{p}: neither a run directory nor a directory of runs (no {RUN_JSON})")
        found.extend(children)
    unique = sorted({f.resolve() for f in found})
    return unique


@dataclasses.dataclass
class Runs:
    """What :func:`read_runs` returns: run dirs, their run.json and one Table per results table."""

    run_dirs: list[Path]
    infos: list[RunInfo]
    tables: dict[str, pa.Table]

    def __getitem__(self, name: str) -> pa.Table:
        return self.tables[name]


def read_runs(paths: Iterable[str | os.PathLike], tables: Sequence[str] = TABLES) -> Runs:
    """Read any number of runs (run dirs, or dirs of runs) into one Table per results table."""
    run_dirs = find_run_dirs(paths)
    infos = [read_run_json(d) for d in run_dirs]
    return Runs(run_dirs=run_dirs, infos=infos, tables={t: _read_partitioned(run_dirs, t) for t in tables})


def _read_partitioned(run_dirs: Sequence[Path], name: str) -> pa.Table:
    schema = table_schema(name)
    fschema = file_schema(name)
    parts = []
    for run in run_dirs:
        base = run / name
        if not base.is_dir():
            continue
        for sdir in sorted(base.glob(f"{PARTITION_COLUMN}=*")):
            scenario = sdir.name.split("=", 1)[1]
            for f in sorted(sdir.glob("*.parquet")):
                try:
                    t = pq.read_table(f, schema=fschema)
                except (pa.ArrowInvalid, OSError) as exc:
                    raise ResultsError(f"{f}: unreadable Parquet ({exc})") from None
                t = t.append_column(pa.field(PARTITION_COLUMN, pa.string(), nullable=False),
                                    pa.array([scenario] * t.num_rows, pa.string()))
                parts.append(t.select(schema.names).cast(schema))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts)
