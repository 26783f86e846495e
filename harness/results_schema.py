"""The results tables of a lab run: schemas, layout, a writer and a reader.

Writers (the recorder) and readers (``harness.analysis``) both import this module; it is the
results contract (the tables, their columns and the layout below). Keep it stable: add nullable
columns at the end of a schema, never rename or retype one (bump ``SCHEMA_VERSION`` then).

Layout of one run::

    results/<run_id>/
        run.json                                  # RunInfo (below)
        events/scenario=<scenario>/part-*.parquet
        client_ops/scenario=<scenario>/part-*.parquet
        metrics/scenario=<scenario>/part-*.parquet
        resources/scenario=<scenario>/part-*.parquet
        checks/scenario=<scenario>/part-*.parquet

Each table is a Parquet dataset partitioned hive-style by ``scenario``: the files hold every
column of the schema except ``scenario``, which lives in the directory name (as pyarrow and
Spark expect). ``write_table`` may be called several times per table; each call adds one part
file. ``read_runs`` reads any number of runs (run dirs, or dirs that contain run dirs) back
into one pyarrow Table per table, with ``scenario`` restored as a string column. Scenario and
run ids are path segments (``[A-Za-z0-9][A-Za-z0-9._-]*``), so no escaping is ever needed.
Spark cannot partition-discover several run roots at once; ``harness.analysis`` reads the part
files by glob and restores ``scenario`` from each file's ``scenario=<value>`` directory.

Units: timestamps are ``int64`` nanoseconds since the epoch (CLOCK_REALTIME), named ``*_ns``;
durations in ``metrics`` are milliseconds (``float64``); counts, rates (per second) and ratios
are plain numbers in the same ``value`` column (``unit`` = ``ms`` | ``count`` | ``per_s`` |
``ratio`` says which).

Errors: bad input raises :class:`ResultsError` naming the table, row and field; nothing is
written for a call that fails validation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
PARTITION_COLUMN = "scenario"
RUN_JSON = "run.json"

# ---------------------------------------------------------------------------------------------
# Vocabularies
EVENT_SOURCES = ("node", "harness", "client")
HARNESS_EVENTS = ("fault_injected", "fault_healed", "first_io_error_observed")
OUTCOMES = ("ok", "fail", "info")
CLIENT_OPS = ("produce", "consume")
VALIDITY = ("true", "false", "unknown")
DURATION_METRICS = (
    "detect_ms",  # fault -> broker marks dir offline
    "report_ms",  # fault -> controller commits the change
    "isr_shrink_ms",  # fault -> ISR without the failed replica committed (per partition)
    "leader_failover_ms",  # fault -> new leader committed (per partition)
    "client_unavailable_ms",  # per partition: last ok before fault -> first ok after
    "failure_timeout_shutdown_ms",  # fault -> broker exit, controller unreachable
    "fencing_ms",  # registration -> unfenced at start-up
    "controller_failover_ms",  # fault on the active controller -> another one active
    "failover_report_ms",  # dir failure -> commit, across a controller failover
    "coordinator_failover_ms",  # fault -> a group's coordinator loaded on another broker
    "rebalance_ms",  # a group member starts or is revoked -> its (new) assignment
)
COUNT_METRICS = ("acked_lost", "duplicates", "service_unrecovered")
# service (harness.checkers.service): acks=all produce latency per window (before the first
# fault / during the faults / after the heal), per partition and pooled for the run
WINDOWS = ("before", "during", "after")
SERVICE_DURATION_METRICS = tuple(f"produce_{w}_{q}_ms" for w in WINDOWS for q in ("p50", "p99")) + (
    "service_recovery_ms",  # fault -> the partition's rolling p99 back within the bound
)
RATE_METRICS = tuple(f"produce_{w}_per_s" for w in WINDOWS)  # acked produces per second
RATIO_METRICS = ("latency_degradation_ratio",)  # worst 5 s p50 during the faults / pre-fault p50
DURATION_METRICS = DURATION_METRICS + SERVICE_DURATION_METRICS
METRICS = DURATION_METRICS + COUNT_METRICS + RATE_METRICS + RATIO_METRICS
UNITS = ("ms", "count", "per_s", "ratio")

# ---------------------------------------------------------------------------------------------
# Schemas (the partition column ``scenario`` is part of each logical schema)
EVENTS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # node | harness | client
        pa.field("node_id", pa.int32()),  # null for harness events not tied to a node
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("attrs", pa.string(), nullable=False),  # JSON object: every event field
        # typed copies of common fields (also present in attrs)
        pa.field("role", pa.string()),
        pa.field("dir_id", pa.string()),
        pa.field("path", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("leader", pa.int32()),
        pa.field("isr", pa.list_(pa.int32())),
        pa.field("errno", pa.int32()),
        pa.field("op", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("fault_id", pa.string()),  # pairs fault_injected with fault_healed
        pa.field("fault_kind", pa.string()),  # error, error-writes, flaky(p), partition, …
    ],
    metadata={"jbodlab.table": "events", "jbodlab.schema_version": str(SCHEMA_VERSION)},
)

CLIENT_OPS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("client_id", pa.string()),
        pa.field("op", pa.string(), nullable=False),  # produce | consume
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("value_id", pa.string()),
        pa.field("outcome", pa.string(), nullable=False),  # ok | fail | info (indeterminate)
        pa.field("ts_invoke_ns", pa.int64(), nullable=False),
        pa.field("ts_complete_ns", pa.int64()),
        pa.field("error", pa.string()),
    ],
    metadata={"jbodlab.table": "client_ops", "jbodlab.schema_version": str(SCHEMA_VERSION)},
)

METRICS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("backend", pa.string(), nullable=False),  # dm | fuse | net | process | …
        pa.field("metric", pa.string(), nullable=False),  # one of METRICS
        pa.field("value", pa.float64(), nullable=False),
        pa.field("unit", pa.string(), nullable=False),  # ms | count | per_s | ratio
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("node_id", pa.int32()),
        pa.field("dir_id", pa.string()),
        pa.field("fault_id", pa.string()),
        pa.field("fault_kind", pa.string()),
        pa.field("fidelity", pa.string()),
        # config fields needed for grouping
        pa.field("log_dir_failure_timeout_ms", pa.int64()),
        pa.field("broker_heartbeat_interval_ms", pa.int64()),
        pa.field("broker_session_timeout_ms", pa.int64()),
        pa.field("queued_assignments", pa.int64()),
        pa.field("config", pa.string(), nullable=False),  # grouping label; default: config_label(METRIC_CONFIG_FIELDS)
    ],
    metadata={"jbodlab.table": "metrics", "jbodlab.schema_version": str(SCHEMA_VERSION)},
)

RESOURCES_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("node_id", pa.int32()),  # null = the harness itself
        pa.field("pid", pa.int64()),
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("cpu_percent", pa.float64()),
        pa.field("rss_bytes", pa.int64()),
        pa.field("read_bytes", pa.int64()),
        pa.field("write_bytes", pa.int64()),
        pa.field("read_count", pa.int64()),
        pa.field("write_count", pa.int64()),
    ],
    metadata={"jbodlab.table": "resources", "jbodlab.schema_version": str(SCHEMA_VERSION)},
)

CHECKS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("checker", pa.string(), nullable=False),
        pa.field("valid", pa.string(), nullable=False),  # true | false | unknown
        pa.field("details", pa.string()),  # JSON or text
    ],
    metadata={"jbodlab.table": "checks", "jbodlab.schema_version": str(SCHEMA_VERSION)},
)

SCHEMAS: dict[str, pa.Schema] = {
    "events": EVENTS,
    "client_ops": CLIENT_OPS_SCHEMA,
    "metrics": METRICS_SCHEMA,
    "resources": RESOURCES_SCHEMA,
    "checks": CHECKS_SCHEMA,
}
TABLES = tuple(SCHEMAS)

# Closed vocabularies checked by the writer: table -> column -> allowed values
_ENUMS: dict[str, dict[str, tuple[str, ...]]] = {
    "events": {"source": EVENT_SOURCES},
    "client_ops": {"outcome": OUTCOMES, "op": CLIENT_OPS},
    "metrics": {"metric": METRICS, "unit": UNITS},
    "checks": {"valid": VALIDITY},
}
# configuration columns of `metrics` that make up the default `config` grouping label
METRIC_CONFIG_FIELDS = ("log_dir_failure_timeout_ms", "broker_heartbeat_interval_ms", "broker_session_timeout_ms")
# event fields copied into typed columns of `events` (attrs keeps them too)
EVENT_TYPED_FIELDS = ("role", "dir_id", "path", "topic", "partition", "leader", "isr", "errno",
                      "op", "reason", "fault_id", "fault_kind")
_SCENARIO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ResultsError(ValueError):
    """Bad results input or a malformed results directory (the message names the problem)."""


def file_schema(name: str) -> pa.Schema:
    """Schema of the Parquet files of table ``name`` (the logical schema minus ``scenario``)."""
    schema = _schema(name)
    return schema.remove(schema.get_field_index(PARTITION_COLUMN))


def _schema(name: str) -> pa.Schema:
    try:
        return SCHEMAS[name]
    except KeyError:
        raise ResultsError(f"unknown results table {name!r} (known: {', '.join(TABLES)})") from None


def config_label(**fields: Any) -> str:
    """Canonical grouping label of configuration fields: ``a=1,b=x`` sorted by key; nulls dropped.

    ``config_label(log_dir_failure_timeout_ms=30000)`` -> ``'log_dir_failure_timeout_ms=30000'``;
    no fields -> ``'default'``.
    """
    parts = [f"{k}={fields[k]}" for k in sorted(fields) if fields[k] is not None]
    return ",".join(parts) if parts else "default"


def event_row(obj: Mapping[str, Any], *, run_id: str, scenario: str, source: str) -> dict[str, Any]:
    """Turn one node-event-log JSON object (or a harness/client event) into an ``events`` row.

    ``ts_ns`` and ``event`` are required; ``node_id`` optional. Every field except those two and
    ``node_id`` goes into ``attrs``; common fields are also copied into their typed columns.
    """
    if "ts_ns" not in obj or "event" not in obj:
        raise ResultsError(f"event object lacks 'ts_ns' or 'event': {dict(obj)!r}")
    attrs = {k: v for k, v in obj.items() if k not in ("ts_ns", "event", "node_id")}
    row: dict[str, Any] = {
        "run_id": run_id,
        "scenario": scenario,
        "source": source,
        "node_id": obj.get("node_id"),
        "ts_ns": obj["ts_ns"],
        "event": obj["event"],
        "attrs": json.dumps(attrs, sort_keys=True, default=str),
    }
    node_id = obj.get("node_id")
    if node_id is not None and not _is_int(node_id):
        raise ResultsError(f"event {obj.get('event')!r}: node_id must be an integer, got {node_id!r}")
    for key in EVENT_TYPED_FIELDS:
        value = obj.get(key)
        if value is None:
            continue
        # a value that does not fit the typed column stays only in attrs (nothing is lost)
        if key in _INT_EVENT_FIELDS:
            if _is_int(value):
                row[key] = value
        elif key == "isr":
            if isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
                row[key] = list(value)
        else:
            row[key] = value if isinstance(value, str) else str(value)
    return row


_INT_EVENT_FIELDS = ("partition", "leader", "errno")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31


# ---------------------------------------------------------------------------------------------
# run.json
@dataclasses.dataclass(frozen=True)
class RunInfo:
    """``results/<run_id>/run.json``.

    ``scenario`` is the scenario id (the partition value); ``scenario_value`` the full scenario
    value (topology, configs, workload, fault schedule, checks) as plain JSON. ``versions`` at
    least ``{"jbodlab": …, "git_sha": …, "python": …}``; ``fault_backend`` ``dm``/``fuse``/…
    and ``fidelity`` its label; ``host`` facts (kernel, cpus, memory, hostname…);
    ``configs`` per node id (str) -> server.properties dict.
    """

    run_id: str
    scenario: str
    seed: int
    scenario_value: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    fault_backend: str = "unknown"
    fidelity: str = "unknown"
    host: dict[str, Any] = dataclasses.field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    started_ns: int | None = None
    ended_ns: int | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], *, where: str = RUN_JSON) -> "RunInfo":
        names = {f.name for f in dataclasses.fields(cls)}
        for required in ("run_id", "scenario", "seed"):
            if required not in obj:
                raise ResultsError(f"{where}: missing field {required!r}")
        unknown = set(obj) - names
        known = {k: v for k, v in obj.items() if k in names}
        info = cls(**known)
        if unknown:  # newer writer: keep reading, the extra fields are not ours
            object.__setattr__(info, "_extra", {k: obj[k] for k in unknown})
        _check_name("run_id", info.run_id, where)
        _check_name("scenario", info.scenario, where)
        if not isinstance(info.seed, int):
            raise ResultsError(f"{where}: field 'seed' must be an integer, got {info.seed!r}")
        return info


def _check_name(field: str, value: Any, where: str) -> None:
    if not isinstance(value, str) or not _SCENARIO_RE.match(value):
        raise ResultsError(
            f"{where}: field {field!r} must match {_SCENARIO_RE.pattern} (a path segment), got {value!r}")


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
    schema = _schema(name)
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
    for column, allowed in _ENUMS.get(name, {}).items():
        bad = pc.unique(table.column(column).filter(
            pc.invert(pc.is_in(table.column(column), value_set=pa.array(allowed))))).to_pylist()
        bad = [b for b in bad if b is not None]
        if bad:
            raise ResultsError(f"{name}: column {column!r}: values {bad} not in {list(allowed)}")
    for value in pc.unique(table.column(PARTITION_COLUMN)).to_pylist():
        _check_name("scenario", value, name)
    for value in pc.unique(table.column("run_id")).to_pylist():
        _check_name("run_id", value, name)
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
    schema = _schema(name)
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
