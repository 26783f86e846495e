"""The results tables of a lab run: schemas, layout, vocabularies, rows and ``run.json``.

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
Spark expect). :mod:`harness.results.tables` validates, writes and reads them: ``write_table`` may be called several times per table; each call adds one part
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
import re
from typing import Any, Mapping

import pyarrow as pa

from harness.errors import HarnessError

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
    "corruption_detect_ms",  # the first flipped bit served -> dir offline (EBADMSG) / log truncated at recovery
    "leader_rebalance_ms",  # a broker's restart -> every partition it prefers led by it again
)
COUNT_METRICS = ("acked_lost", "duplicates", "service_unrecovered")
# service (harness.checkers.service): acks=all produce latency per window (before the first
# fault / during the faults / after the heal), per partition and pooled for the run
WINDOWS = ("before", "during", "after")
SERVICE_DURATION_METRICS = tuple(f"produce_{w}_{q}_ms" for w in WINDOWS for q in ("p50", "p99")) + (
    "service_recovery_ms",  # fault -> the partition's rolling p99 back within the bound
) + tuple(f"broker_produce_{w}_{q}_ms" for w in WINDOWS for q in ("mean", "p99"))  # the brokers' own share
RATE_METRICS = tuple(f"produce_{w}_per_s" for w in WINDOWS)  # acked produces per second
RATIO_METRICS = ("latency_degradation_ratio",  # worst 5 s p50 during the faults / pre-fault p50
                 "host_cpu_busy_ratio",  # the host's cores busy over the workload (harness.run.host_load)
                 "host_cpu_other_ratio")  # ... of it taken by processes outside the lab
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
ENUMS: dict[str, dict[str, tuple[str, ...]]] = {
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


class ResultsError(HarnessError, ValueError):
    """Bad results input or a malformed results directory (the message names the problem)."""


def file_schema(name: str) -> pa.Schema:
    """Schema of the Parquet files of table ``name`` (the logical schema minus ``scenario``)."""
    schema = table_schema(name)
    return schema.remove(schema.get_field_index(PARTITION_COLUMN))


def table_schema(name: str) -> pa.Schema:
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
# run.json (written and read by harness.results.tables)
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
        check_name("run_id", info.run_id, where)
        check_name("scenario", info.scenario, where)
        if not isinstance(info.seed, int):
            raise ResultsError(f"{where}: field 'seed' must be an integer, got {info.seed!r}")
        return info


def check_name(field: str, value: Any, where: str) -> None:
    if not isinstance(value, str) or not _SCENARIO_RE.match(value):
        raise ResultsError(
            f"{where}: field {field!r} must match {_SCENARIO_RE.pattern} (a path segment), got {value!r}")
