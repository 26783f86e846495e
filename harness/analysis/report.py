"""Report of a :class:`~harness.analysis.model.Summary`: Parquet, Markdown, HTML, plots, terminal.

``write_report(summary, out_dir, comparison=None, timeline_runs=None)`` writes::

    out_dir/summary/<table>.parquet     every summary table (model.SUMMARY_TABLES)
    out_dir/summary/comparison.parquet  when a baseline was given
    out_dir/plots/cdf_<metric>.png      CDF of each metric, one line per scenario × backend
    out_dir/plots/timeline_<run>.png    one run: fault, detection, report, ISR shrink,
                                        leader change, client ops and recovery
    out_dir/plots/latency_<run>.png     one run: every produce's latency over time, per partition
    out_dir/plots/throughput_<run>.png  one run: acked produces per second, failures below 0
    out_dir/report.md, out_dir/report.html (plots embedded), out_dir/analysis.json

The numbers in the Markdown/HTML tables and on the terminal are the same DataFrames as the
Parquet summaries, formatted with :func:`fmt` (3 significant decimals for ms).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from harness.results import tables as rio
from harness.results import schema as rs
from harness.analysis import model as m

PERIODIC_EVENTS = ("request_metrics",)   # node events that measure, not milestones: kept out of the timeline

TITLES = {
    "latency": "Latency per scenario × metric × backend × config (ms; counts for acked_lost/duplicates; "
               "per_s, ratio as named)",
    "service": "Service per scenario: the run-level service metrics over the runs",
    "service_latency": "Produce latency of every acked op, pooled over runs, per window (ms)",
    "service_windows": "Service windows per run: ops, acked per second",
    "timeout_accuracy": "Timeout accuracy: failure_timeout_shutdown_ms − log.dir.failure.timeout.ms (ms)",
    "unavailability_summary": "Client unavailability around fault windows, per op kind (ms; failed_ops: "
                              "a count; the drain is not service)",
    "event_latency": "First occurrence of each node event after the fault (ms)",
    "per_partition": "Per-partition breakdown (ms)",
    "checks_summary": "Checker verdicts (number of runs)",
    "resources_summary": "Resource samples per scenario (cpu %, RSS MiB)",
    "comparison": "Comparison with the baseline",
}


def fmt(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        if np.isinf(v):
            return "inf"
        return f"{v:.3f}"
    return str(v)


def _rows(df: pd.DataFrame) -> list[list[str]]:
    return [[fmt(v) for v in r] for r in df.itertuples(index=False, name=None)]


def terminal_table(df: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    df = df.loc[:, list(columns)] if columns else df
    cells = [list(df.columns)] + _rows(df)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in df.columns]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(no rows)_\n"
    head = "| " + " | ".join(df.columns) + " |\n|" + "|".join("---" for _ in df.columns) + "|\n"
    return head + "".join("| " + " | ".join(r) + " |\n" for r in _rows(df))


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(no rows)</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in _rows(df))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# --------------------------------------------------------------------------------------------- plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cdfs(values: pd.DataFrame, out: Path) -> list[Path]:
    """One PNG per duration metric: empirical CDF per scenario × backend."""
    plt = _plt()
    files = []
    for metric in [x for x in rs.DURATION_METRICS + rs.RATIO_METRICS if x in set(values["metric"])]:
        sub = values[values["metric"] == metric]
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for (scenario, backend), g in sorted(sub.groupby(["scenario", "backend"]), key=lambda t: t[0]):
            x = np.sort(g["value"].to_numpy(dtype=float))
            y = np.arange(1, len(x) + 1) / len(x)
            ax.step(x, y, where="post", label=f"{scenario} / {backend} (n={len(x)})")
        ax.set_xlabel(f"{metric} ({'ratio' if metric in rs.RATIO_METRICS else 'ms'})")
        ax.set_ylabel("fraction of measurements ≤ x")
        ax.set_ylim(0, 1.02)
        for p in (0.5, 0.9, 0.99):
            ax.axhline(p, color="0.85", lw=0.8, zorder=0)
        ax.set_title(f"CDF of {metric}")
        ax.grid(True, axis="x", color="0.92")
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = out / f"cdf_{metric}.png"
        fig.savefig(path)
        plt.close(fig)
        files.append(path)
    return files


def timeline_data(run_dir: Path) -> dict:
    """Milestones (ms after the fault) and client ops of one run, from its own tables."""
    runs = rio.read_runs([run_dir], tables=("events", "client_ops", "metrics"))
    ev = runs["events"].to_pandas()
    ops = runs["client_ops"].to_pandas()
    met = runs["metrics"].to_pandas()
    starts = ev[ev["event"] == m.FAULT_START].sort_values("ts_ns")
    if starts.empty:
        raise ValueError(f"{run_dir}: no {m.FAULT_START} event, no timeline")
    fault = starts.iloc[0]
    t0 = int(fault["ts_ns"])
    fid = fault["fault_id"]
    heal = ev[(ev["event"] == m.FAULT_END) & (ev["ts_ns"] >= t0)]["ts_ns"]
    rel = lambda ts: (int(ts) - t0) / 1e6  # noqa: E731

    def first(event):
        s = ev[(ev["event"] == event) & (ev["ts_ns"] >= t0)]["ts_ns"]
        return rel(s.min()) if len(s) else None

    def metric(name, how):
        s = met[met["metric"] == name]["value"]
        if fid is not None and "fault_id" in met:
            s = met[(met["metric"] == name) & ((met["fault_id"] == fid) | met["fault_id"].isna())]["value"]
        return float(getattr(s, how)()) if len(s) else None

    milestones = {
        "fault injected": 0.0,
        "first I/O error": first("first_io_error_observed"),
        "detected (dir_offline)": metric("detect_ms", "min") if metric("detect_ms", "min") is not None else first("dir_offline"),
        "reported (controller commit)": metric("report_ms", "min"),
        "ISR shrunk (last partition)": metric("isr_shrink_ms", "max"),
        "leader changed (last partition)": metric("leader_failover_ms", "max"),
        "broker shut down (timeout)": metric("failure_timeout_shutdown_ms", "max") or first("failure_timeout_shutdown"),
    }
    recovery = None
    if not ops.empty:
        ok = ops[(ops["outcome"] == "ok") & (ops["ts_complete_ns"] > t0)]
        if not ok.empty:
            recovery = rel(ok.groupby(["topic", "partition"], dropna=False)["ts_complete_ns"].min().max())
    milestones["clients recovered (last partition)"] = recovery
    # what happened, not the periodic measurements (request_metrics every metrics.sample.window.ms)
    node_ev = ev[(ev["source"] == "node") & (ev["ts_ns"] >= t0) & ~ev["event"].isin(PERIODIC_EVENTS)].copy()
    node_ev["t_ms"] = (node_ev["ts_ns"] - t0) / 1e6
    ops = ops.copy()
    if not ops.empty:
        ops["t_ms"] = (ops["ts_complete_ns"].fillna(ops["ts_invoke_ns"]) - t0) / 1e6
    return {"run_id": runs.infos[0].run_id, "scenario": runs.infos[0].scenario,
            "backend": runs.infos[0].fault_backend, "heal_ms": rel(heal.min()) if len(heal) else None,
            "milestones": {k: v for k, v in milestones.items() if v is not None}, "node_events": node_ev, "ops": ops}


def plot_timeline(run_dir: Path, out: Path) -> Path:
    plt = _plt()
    d = timeline_data(run_dir)
    ms = d["milestones"]
    span = max(ms.values()) * 1.25 + 50
    lo = -0.15 * span
    fig, (ax, axc) = plt.subplots(2, 1, figsize=(12, 6.2), dpi=110, sharex=True,
                                  gridspec_kw={"height_ratios": [1.1, 1]})
    colors = plt.cm.tab10.colors
    for i, (label, t) in enumerate(sorted(ms.items(), key=lambda kv: kv[1])):
        for a in (ax, axc):
            a.axvline(t, color=colors[i % 10], lw=1.2, ls="-" if i == 0 else "--",
                      label=f"{label}: +{t:.1f} ms" if a is ax else None, zorder=1)
    nev = d["node_events"]
    nev = nev[nev["t_ms"] <= span]
    kinds = sorted(nev["event"].unique())
    for k_i, k in enumerate(kinds):
        g = nev[nev["event"] == k]
        ax.scatter(g["t_ms"], [k_i] * len(g), s=80, marker="|", linewidths=2, color="black", zorder=3)
    ax.set_yticks(range(len(kinds)), kinds, fontsize=7)
    ax.set_ylim(-0.8, max(len(kinds), 1) - 0.2)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), title="milestones", title_fontsize=7)
    ax.set_title(f"Run {d['run_id']} ({d['scenario']}, backend {d['backend']}): node events after the fault", fontsize=9)
    ops = d["ops"]
    if not ops.empty:
        ops = ops[(ops["t_ms"] >= lo) & (ops["t_ms"] <= span)]
        parts = sorted(ops[["topic", "partition"]].drop_duplicates().itertuples(index=False, name=None),
                       key=lambda t: (str(t[0]), t[1]))
        for y, (topic, part) in enumerate(parts):
            g = ops[(ops["topic"] == topic) & (ops["partition"] == part)]
            okg, bad = g[g["outcome"] == "ok"], g[g["outcome"] != "ok"]
            axc.scatter(okg["t_ms"], [y] * len(okg), s=10, color="tab:green", marker="o",
                        label="ok" if y == 0 else None)
            axc.scatter(bad["t_ms"], [y] * len(bad), s=14, color="tab:red", marker="x",
                        label="failed" if y == 0 else None)
        axc.set_yticks(range(len(parts)), [f"{t}-{p}" for t, p in parts], fontsize=7)
        axc.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axc.set_title("client ops (completion time) per partition", fontsize=9)
    axc.set_xlabel("ms after fault injected" + (f"   (fault healed at +{d['heal_ms']:.0f} ms)" if d["heal_ms"] else ""))
    axc.set_xlim(lo, span)
    for a in (ax, axc):
        a.axvspan(0, min(d["heal_ms"] or span, span), color="tab:red", alpha=0.05)
    fig.tight_layout()
    path = out / f"timeline_{d['run_id']}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def pick_timeline_runs(summary: m.Summary) -> list[Path]:
    """First run (by run id) of each scenario that has a fault window."""
    fw = summary["fault_windows"]
    if fw.empty:
        return []
    by_id = {rio.read_run_json(d).run_id: d for d in summary.run_dirs}
    firsts = fw.sort_values("run_id").groupby("scenario", sort=True)["run_id"].first()
    return [by_id[r] for r in firsts if r in by_id]


# --------------------------------------------------------------------------------------------- report
REPORT_TABLES = ("service", "service_latency", "latency", "timeout_accuracy", "unavailability_summary",
                 "event_latency", "checks_summary", "resources_summary", "service_windows", "per_partition")
SERVICE_SHOWN = ("produce_before_p50_ms", "produce_before_p99_ms", "produce_during_p50_ms", "produce_during_p99_ms",
                 "produce_after_p99_ms", "service_recovery_ms", "latency_degradation_ratio", "service_unrecovered",
                 "produce_before_per_s", "produce_during_per_s",
                 "broker_produce_before_mean_ms", "broker_produce_during_mean_ms", "broker_produce_during_p99_ms")


def service_table(summary: m.Summary) -> pd.DataFrame:
    """The run-level service metrics of the latency table, in reading order."""
    lat = summary["latency"]
    sub = lat[lat["metric"].isin(SERVICE_SHOWN)].copy()
    sub["_o"] = sub["metric"].map({k: i for i, k in enumerate(SERVICE_SHOWN)})
    cols = ["scenario", "metric", "backend", "count", "p50", "p99", "max"]
    return sub.sort_values(["scenario", "backend", "_o"], kind="mergesort")[cols].reset_index(drop=True)


def write_report(summary: m.Summary, out_dir: Path, *, comparison: pd.DataFrame | None = None,
                 timeline_runs: Sequence[Path] | None = None, plots: bool = True,
                 inputs: Sequence[str] = (), extra_meta: dict | None = None) -> dict[str, Path]:
    out_dir = Path(out_dir)
    sdir, pdir = out_dir / "summary", out_dir / "plots"
    sdir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, df in summary.tables.items():
        path = sdir / f"{name}.parquet"
        df.to_parquet(path, index=False)
        written[name] = path
    if comparison is not None:
        comparison.to_parquet(sdir / "comparison.parquet", index=False)
        written["comparison"] = sdir / "comparison.parquet"
    images: list[Path] = []
    if plots:
        from harness.analysis import service_plots
        pdir.mkdir(parents=True, exist_ok=True)
        runs = list(timeline_runs) if timeline_runs is not None else pick_timeline_runs(summary)
        for run in runs:   # the pictures an engineer reads first: latency and throughput over time
            images += [p for p in (service_plots.plot_latency(Path(run), pdir),
                                   service_plots.plot_throughput(Path(run), pdir)) if p is not None]
        for run in runs:
            images.append(plot_timeline(Path(run), pdir))
        images += plot_cdfs(summary.metric_values, pdir)
    meta = {"generated_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "engine": summary.engine, "runs": summary.runs, "inputs": [str(i) for i in inputs],
            "percentile": "linear interpolation between closest ranks (type 7), exact",
            **(extra_meta or {})}
    (out_dir / "analysis.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    tables = {n: (service_table(summary) if n == "service" else summary.tables[n]) for n in REPORT_TABLES}
    if comparison is not None:
        tables = {"comparison": comparison, **tables}
    (out_dir / "report.md").write_text(_markdown(meta, tables, images, out_dir))
    (out_dir / "report.html").write_text(_html(meta, tables, images))
    written["report.md"], written["report.html"] = out_dir / "report.md", out_dir / "report.html"
    return written


def _intro(meta: dict) -> str:
    return (f"{meta['runs']} run(s), engine **{meta['engine']}**, generated {meta['generated_utc']}. "
            "Percentiles: exact, linear interpolation between closest ranks (type 7); "
            "pandas and Spark give identical numbers.")


FIRST_TABLES = ("comparison", "service", "service_latency")   # then the service pictures, then the rest


def _first_images(images: list[Path]) -> tuple[list[Path], list[Path]]:
    first = [p for p in images if p.stem.startswith(("latency_", "throughput_"))]
    return first, [p for p in images if p not in first]


def _markdown(meta: dict, tables: dict[str, pd.DataFrame], images: list[Path], out_dir: Path) -> str:
    parts = ["# jbodlab analysis\n", _intro(meta) + "\n"]
    if "verdict" in meta:
        parts.append(f"**Regression gate: {meta['verdict']}**\n")
    first, rest = _first_images(images)
    order = [n for n in FIRST_TABLES if n in tables] + [None] + [n for n in tables if n not in FIRST_TABLES]
    for name in order:
        if name is None:
            if first:
                parts.append("\n## Latency and throughput over time\n")
                parts += [f"\n![{p.stem}]({p.relative_to(out_dir).as_posix()})\n" for p in first]
            continue
        parts.append(f"\n## {TITLES[name]}\n\n{markdown_table(tables[name])}")
    if rest:
        parts.append("\n## Plots\n")
        parts += [f"\n![{p.stem}]({p.relative_to(out_dir).as_posix()})\n" for p in rest]
    return "".join(parts)


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:12px;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.regression{color:#b00;font-weight:bold}"""


def _html(meta: dict, tables: dict[str, pd.DataFrame], images: list[Path]) -> str:
    intro = html.escape(_intro(meta)).replace("**", "")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>jbodlab analysis</title>"
             f"<style>{_CSS}</style></head><body><h1>jbodlab analysis</h1><p>{intro}</p>"]
    if "verdict" in meta:
        cls = "regression" if meta["verdict"] != "pass" else ""
        parts.append(f"<p class='{cls}'>Regression gate: {html.escape(meta['verdict'])}</p>")
    first, rest = _first_images(images)

    def figures(paths: list[Path]) -> None:
        for p in paths:
            data = base64.b64encode(p.read_bytes()).decode()
            parts.append(f"<figure><img alt='{html.escape(p.stem)}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{html.escape(p.name)}</figcaption></figure>")
    order = [n for n in FIRST_TABLES if n in tables] + [None] + [n for n in tables if n not in FIRST_TABLES]
    for name in order:
        if name is None:
            if first:
                parts.append("<h2>Latency and throughput over time</h2>")
                figures(first)
            continue
        parts.append(f"<h2>{html.escape(TITLES[name])}</h2>{html_table(tables[name])}")
    if rest:
        parts.append("<h2>Plots</h2>")
        figures(rest)
    parts.append("</body></html>\n")
    return "".join(parts)
