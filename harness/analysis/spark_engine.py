"""The PySpark implementation of the analysis (same definitions as ``pandas_engine``).

Local mode by default (``local[*]``), any cluster with ``--master URL`` (the result dirs must
then be on storage every executor can read). No Python UDFs: everything is Spark SQL, so
executors need no jbodlab code. ``jbodlab analyze --engine spark`` runs it, and so does
``spark-submit harness/analysis/spark_submit.py results/ --out report/`` (same options).

Reading: Spark cannot partition-discover several run roots in one read, so each table is read
from the glob ``<run>/<table>/scenario=*/*.parquet`` of every run with the file schema of
``harness.results.schema`` and ``scenario`` is taken back from each file's directory name.
Percentiles use Spark SQL's exact ``percentile`` (see ``model`` for the definition).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd
import pyarrow as pa

from harness.results import tables as rio
from harness.results import schema as rs
from harness.analysis import model as m

_DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "2g",
}


def session(master: str | None = None, conf: dict[str, str] | None = None):
    """A SparkSession (reuses an active one, e.g. the test suite's or spark-submit's)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName("jbodlab-analyze")
    if master:
        builder = builder.master(master)
    else:
        import os

        if "SPARK_MASTER" not in os.environ and not _submitted():
            builder = builder.master("local[*]")
    for k, v in {**_DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _submitted() -> bool:
    import os

    return "PYSPARK_GATEWAY_PORT" in os.environ or os.environ.get("SPARK_ENV_LOADED") == "1"


def spark_type(t: pa.DataType):
    from pyspark.sql import types as T

    if pa.types.is_string(t):
        return T.StringType()
    if pa.types.is_int32(t):
        return T.IntegerType()
    if pa.types.is_int64(t):
        return T.LongType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_list(t):
        return T.ArrayType(spark_type(t.value_type))
    raise TypeError(f"no Spark type for {t}")


def spark_schema(table: str):
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in rs.file_schema(table)])


def read(spark, run_dirs: Sequence[Path], table: str):
    """One results table over the runs as a DataFrame with the logical schema (``scenario`` included)."""
    from pyspark.sql import functions as F

    globs = [str(Path(d) / table / f"{rs.PARTITION_COLUMN}=*" / "*.parquet")
             for d in run_dirs if any((Path(d) / table).glob(f"{rs.PARTITION_COLUMN}=*/*.parquet"))]
    names = rs.SCHEMAS[table].names
    if not globs:
        return spark.createDataFrame([], spark_schema(table)).withColumn(
            rs.PARTITION_COLUMN, F.lit(None).cast("string")).select(*names)
    df = spark.read.schema(spark_schema(table)).parquet(*globs)
    df = df.withColumn(rs.PARTITION_COLUMN,
                       F.regexp_extract(F.col("_metadata.file_path"), r"/scenario=([^/]+)/[^/]+$", 1))
    return df.select(*names)


def _stats(df, keys: Sequence[str], value: str):
    from pyspark.sql import functions as F

    pct = ", ".join(str(p) for p in m.PERCENTILES)
    q = F.expr(f"percentile({value}, array({pct}))")
    v = df.where(F.col(value).isNotNull() & ~F.isnan(F.col(value)))
    agg = v.groupBy(*keys).agg(F.count(F.col(value)).alias("count"), F.min(value).cast("double").alias("min"),
                               q.alias("_q"), F.max(value).cast("double").alias("max"))
    cols = [F.col(k) for k in keys] + [F.col("count"), F.col("min")]
    cols += [F.col("_q")[i].alias(f"p{int(round(p * 100))}") for i, p in enumerate(m.PERCENTILES)]
    return agg.select(*cols, F.col("max"))


def _collect(df) -> pd.DataFrame:
    table = df.toArrow()
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype()}.get)


def analyze(run_dirs: Sequence[Path], spark=None, master: str | None = None) -> m.Summary:
    from pyspark.sql import functions as F
    from pyspark.sql import Window

    spark = spark or session(master)
    infos = [rio.read_run_json(d) for d in run_dirs]
    info = spark.createDataFrame([(i.run_id, i.fault_backend) for i in infos], "run_id string, backend string")
    metrics = read(spark, run_dirs, "metrics").cache()
    events = read(spark, run_dirs, "events")
    ops = read(spark, run_dirs, "client_ops")

    out: dict[str, object] = {}
    run_level = metrics.where(~(F.col("metric").isin(*m.RUN_LEVEL_METRICS) & F.col("partition").isNotNull()))
    out["latency"] = _stats(run_level, m.LATENCY_KEYS, "value")
    out["per_partition"] = _stats(metrics.where(F.col("partition").isNotNull()), m.PER_PARTITION_KEYS, "value")
    to = metrics.where((F.col("metric") == "failure_timeout_shutdown_ms") & F.col("log_dir_failure_timeout_ms").isNotNull())
    to = to.withColumn("error_ms", F.col("value") - F.col("log_dir_failure_timeout_ms").cast("double"))
    out["timeout_accuracy"] = _stats(to, m.TIMEOUT_KEYS, "error_ms")

    # fault windows (small): injected → first healed at/after start, else the run's last event
    ev = events.select("run_id", "scenario", "source", "node_id", "event", "ts_ns", "fault_id", "fault_kind") \
        .withColumn("fid", F.coalesce(F.col("fault_id"), F.lit("")))
    starts = ev.where(F.col("event") == m.FAULT_START).groupBy("run_id", "scenario", "fid").agg(
        F.min("ts_ns").alias("start_ns"), F.min("fault_kind").alias("fault_kind"))
    heals = ev.where(F.col("event") == m.FAULT_END).select("run_id", "fid", F.col("ts_ns").alias("heal_ts")) \
        .join(starts.select("run_id", "fid", "start_ns"), ["run_id", "fid"]) \
        .where(F.col("heal_ts") >= F.col("start_ns")).groupBy("run_id", "fid").agg(F.min("heal_ts").alias("heal_ns"))
    last = ev.groupBy("run_id").agg(F.max("ts_ns").alias("last_ns"))
    windows = starts.join(heals, ["run_id", "fid"], "left").join(last, "run_id", "left").join(info, "run_id", "left") \
        .withColumn("healed", F.col("heal_ns").isNotNull()) \
        .withColumn("end_ns", F.coalesce("heal_ns", "last_ns")) \
        .withColumn("duration_ms", (F.col("end_ns") - F.col("start_ns")).cast("double") / F.lit(1e6)) \
        .withColumn("fault_id", F.col("fid"))
    windows = windows.select(*m.FAULT_WINDOW_COLUMNS).cache()
    out["fault_windows"] = windows
    wsmall = F.broadcast(windows.select("run_id", "scenario", "backend", "fault_id", "start_ns", "end_ns"))

    # unavailability: client ok completions around each fault window, per op kind and partition
    # (model.op_kind: the drain's consumes are not service and are left out)
    ops = ops.withColumn("topic", F.coalesce(F.col("topic"), F.lit("")))
    ops = ops.withColumn("op_kind", F.when(F.col("op") == "produce", F.lit("produce"))
                         .when(F.col("client_id") == F.lit(m.DRAIN_CLIENT), F.lit(None).cast("string"))
                         .when(F.coalesce(F.col("client_id"), F.lit("")).startswith(m.GROUP_CLIENT_PREFIX),
                               F.lit("group-consume"))
                         .otherwise(F.lit("consume"))).where(F.col("op_kind").isNotNull())
    pkey = ["run_id", "op_kind", "topic", "partition"]
    parts = ops.select(*pkey).distinct()
    w = wsmall.join(parts, "run_id")
    ok = ops.where((F.col("outcome") == "ok") & F.col("ts_complete_ns").isNotNull()).select(*pkey, "ts_complete_ns")
    ok = ok.withColumn("prev_ns", F.lag("ts_complete_ns").over(Window.partitionBy(*pkey).orderBy("ts_complete_ns")))
    j = w.join(ok, pkey, "left")
    key = ["run_id", "fault_id", "op_kind", "topic", "partition"]
    tc, st, en = F.col("ts_complete_ns"), F.col("start_ns"), F.col("end_ns")
    overlaps = F.col("prev_ns").isNotNull() & (F.col("prev_ns") < en) & (tc > st)
    agg = j.groupBy(*key).agg(
        F.max(F.when(tc <= st, tc)).alias("last_ok_ns"),
        F.min(F.when(tc > st, tc)).alias("first_ok_ns"),
        F.max(F.when(overlaps, (tc - F.col("prev_ns")).cast("double") / F.lit(1e6))).alias("longest_gap_ms"))
    fails = ops.where(F.col("outcome") == "fail").select(*pkey, "ts_invoke_ns").join(
        w.select("run_id", "fault_id", "op_kind", "topic", "partition", "start_ns", "end_ns"), pkey) \
        .where((F.col("ts_invoke_ns") >= st) & (F.col("ts_invoke_ns") < en)) \
        .groupBy(*key).agg(F.count(F.lit(1)).alias("failed_ops"))
    unavail = w.join(agg, key, "left").join(fails, key, "left") \
        .withColumn("failed_ops", F.coalesce(F.col("failed_ops"), F.lit(0)).cast("long")) \
        .withColumn("unavailable_ms", (F.col("first_ok_ns") - F.col("last_ok_ns")).cast("double") / F.lit(1e6)) \
        .withColumn("recovered", F.col("first_ok_ns").isNotNull()) \
        .select(*m.UNAVAIL_COLUMNS).cache()
    out["unavailability"] = unavail
    long = unavail.select("scenario", "op_kind", "backend", F.lit("unavailable_ms").alias("metric"),
                          F.col("unavailable_ms").alias("value")).unionByName(
        unavail.select("scenario", "op_kind", "backend", F.lit("longest_gap_ms").alias("metric"),
                       F.col("longest_gap_ms").alias("value"))).unionByName(
        unavail.select("scenario", "op_kind", "backend", F.lit("failed_ops").alias("metric"),
                       F.col("failed_ops").cast("double").alias("value")))
    out["unavailability_summary"] = _stats(long, m.UNAVAIL_SUMMARY_KEYS, "value")

    # event latency: first occurrence of each node event per (run, fault, node) inside the window
    node = ev.where(F.col("source") == "node").select("run_id", "node_id", "event", "ts_ns")
    first = node.join(wsmall, "run_id").where((F.col("ts_ns") >= st) & (F.col("ts_ns") < en)) \
        .groupBy("run_id", "scenario", "backend", "fault_id", "node_id", "event", "start_ns") \
        .agg(F.min("ts_ns").alias("first_ns")) \
        .withColumn("delay_ms", (F.col("first_ns") - F.col("start_ns")).cast("double") / F.lit(1e6))
    out["event_latency"] = _stats(first, m.EVENT_LATENCY_KEYS, "delay_ms")

    checks = read(spark, run_dirs, "checks")
    out["checks_summary"] = checks.groupBy(*m.CHECKS_KEYS).agg(F.countDistinct("run_id").cast("long").alias("runs"))
    res = read(spark, run_dirs, "resources").join(F.broadcast(info), "run_id", "left")
    long_res = None
    for c, scale in m.RESOURCE_COLUMNS.items():
        part = res.select("scenario", "backend", F.lit(m.RESOURCE_NAMES[c]).alias("resource"),
                          (F.col(c).cast("double") * F.lit(scale)).alias("value"))
        long_res = part if long_res is None else long_res.unionByName(part)
    out["resources_summary"] = _stats(long_res, m.RESOURCE_KEYS, "value")

    sw = service_windows(ops, ev, info).cache()
    out["service_windows"] = sw
    okp = ops.where((F.col("op") == "produce") & (F.col("outcome") == "ok") & F.col("ts_complete_ns").isNotNull())
    lat = okp.select("run_id", "ts_invoke_ns", "ts_complete_ns").join(
        F.broadcast(sw.select("run_id", "scenario", "backend", "window", "start_ns", "end_ns")), "run_id") \
        .where((F.col("ts_invoke_ns") >= F.col("start_ns")) & (F.col("ts_invoke_ns") < F.col("end_ns"))) \
        .withColumn("latency_ms", (F.col("ts_complete_ns") - F.col("ts_invoke_ns")).cast("double") / F.lit(1e6))
    out["service_latency"] = _stats(lat, m.SERVICE_LATENCY_KEYS, "latency_ms")

    tables = {name: m.normalize(name, _collect(df)) for name, df in out.items()}
    values = _collect(run_level.select("scenario", "metric", "backend", "config", "value"))
    for df in (metrics, windows, unavail, sw):
        df.unpersist()
    return m.Summary(tables=tables, metric_values=values, engine="spark", runs=len(infos), run_dirs=list(run_dirs))


def service_windows(ops, ev, info):
    """Before / during / after per run (definitions in ``model``), with op counts and per_s."""
    from pyspark.sql import functions as F

    # the workload's produces (an admin action's own records are not a service: the checker's rule)
    prod = ops.where((F.col("op") == "produce")
                     & ~F.coalesce(F.col("client_id"), F.lit("")).startswith(m.ADMIN_PROCESS_PREFIX))
    runs = prod.groupBy("run_id").agg(F.first("scenario").alias("scenario"), F.min("ts_invoke_ns").alias("first_ns"),
                                      (F.max("ts_invoke_ns") + F.lit(1)).alias("end_ns"))
    starts = ev.where(F.col("event") == m.FAULT_START).groupBy("run_id", "fid").agg(
        F.min("ts_ns").alias("start_ns"), F.min("fault_kind").alias("fault_kind"))
    heals = ev.where(F.col("event") == m.FAULT_END).select("run_id", "fid", F.col("ts_ns").alias("heal_ts")) \
        .join(starts.select("run_id", "fid", "start_ns"), ["run_id", "fid"]) \
        .where(F.col("heal_ts") >= F.col("start_ns")).groupBy("run_id", "fid").agg(F.min("heal_ts").alias("heal_ns"))
    instant = F.col("fault_kind").isin(*m.INSTANT_FAULT_KINDS)
    f = starts.join(heals, ["run_id", "fid"], "left").withColumn(
        "fend", F.when(F.col("heal_ns").isNotNull(), F.col("heal_ns")).when(instant, F.col("start_ns")))
    per_run = f.groupBy("run_id").agg(F.min("start_ns").alias("fault_ns"), F.max("fend").alias("dist_max"),
                                      F.max(F.col("fend").isNull().cast("int")).alias("open_"))
    r = runs.join(per_run, "run_id", "left").join(F.broadcast(info), "run_id", "left") \
        .withColumn("dist_ns", F.when(F.col("open_") == 0, F.col("dist_max")))
    fault, end, dist = F.col("fault_ns"), F.col("end_ns"), F.col("dist_ns")
    cols = ["run_id", "scenario", "backend"]
    w = r.select(*cols, F.lit("before").alias("window"),
                 (F.col("first_ns") + F.lit(m.WARMUP_MS * 1_000_000)).alias("a"), F.coalesce(fault, end).alias("b")) \
        .unionByName(r.where(fault.isNotNull()).select(*cols, F.lit("during").alias("window"), fault.alias("a"),
                                                       F.least(F.coalesce(dist, end), end).alias("b"))) \
        .unionByName(r.where(dist.isNotNull()).select(*cols, F.lit("after").alias("window"),
                                                      F.greatest(dist, fault).alias("a"), end.alias("b"))) \
        .where(F.col("a") < F.col("b"))
    j = prod.select("run_id", "outcome", "ts_invoke_ns", "ts_complete_ns").join(F.broadcast(w), "run_id")
    inside = (F.col("ts_invoke_ns") >= F.col("a")) & (F.col("ts_invoke_ns") < F.col("b"))
    ok = F.col("outcome") == "ok"
    acked = ok & F.col("ts_complete_ns").isNotNull() & (F.col("ts_complete_ns") >= F.col("a")) \
        & (F.col("ts_complete_ns") < F.col("b"))
    counts = j.groupBy("run_id", "window").agg(
        F.sum(inside.cast("long")).alias("ops"), F.sum((inside & ok).cast("long")).alias("ok"),
        F.sum(acked.cast("long")).alias("acked"))
    return w.join(counts, ["run_id", "window"], "left") \
        .withColumn("ops", F.coalesce(F.col("ops"), F.lit(0)).cast("long")) \
        .withColumn("ok", F.coalesce(F.col("ok"), F.lit(0)).cast("long")) \
        .withColumn("failed", F.col("ops") - F.col("ok")) \
        .withColumn("per_s", F.coalesce(F.col("acked"), F.lit(0)).cast("double")
                    / ((F.col("b") - F.col("a")).cast("double") / F.lit(1e9))) \
        .select("run_id", "scenario", "backend", "window", F.col("a").alias("start_ns"), F.col("b").alias("end_ns"),
                "ops", "ok", "failed", "per_s")
