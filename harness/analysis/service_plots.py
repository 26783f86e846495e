"""The pictures an engineer reads first (Jepsen's latency-raw and rate graphs), for one run:

- ``latency_<run>.png``: the latency of every produce against its invoke time, one panel per
  partition (up to ``MAX_PANELS``; beyond that one panel per fault domain: partitions in a
  faulted dir / outside), log scale. Acked ops are dots, ``info`` (outcome unknown, e.g. a
  timeout) orange triangles, ``fail`` red crosses; an op that never completed sits on the top
  edge. Fault windows are shaded (an instantaneous fault is a line), the partition's
  recovery bound (``bound(p99)`` of the service check) is a dashed line, and each panel's
  title carries the check's verdict for it.
- ``throughput_<run>.png``: acked produces per second (by completion time, 1 s bins) for the
  run and per partition, failed/indeterminate ops per second below the axis, fault windows
  shaded.

Both read only the run's own tables (``client_ops``, ``events``, ``checks``); the per-partition
labels come from the ``service`` check's details when the run has them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results import tables as rio
from harness.analysis import model as m

MAX_PANELS = 12
_COLORS = {"disk": "tab:red", "network": "tab:blue", "process": "tab:purple"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_data(run_dir: Path) -> dict:
    """Produce ops (times in s after the first fault), fault windows and the service details."""
    runs = rio.read_runs([run_dir], tables=("events", "client_ops", "checks"))
    info = runs.infos[0]
    ev = runs["events"].to_pandas()
    ops = runs["client_ops"].to_pandas()
    ops = ops[ops["op"] == "produce"].copy()
    starts = ev[ev["event"] == m.FAULT_START].sort_values("ts_ns")
    t0 = int(starts["ts_ns"].iloc[0]) if len(starts) else (int(ops["ts_invoke_ns"].min()) if len(ops) else 0)
    end_ns = int(ev["ts_ns"].max()) if len(ev) else t0
    faults = []
    for _, f in starts.iterrows():
        attrs = json.loads(f["attrs"]) if isinstance(f["attrs"], str) else {}
        heal = ev[(ev["event"] == m.FAULT_END) & (ev["fault_id"] == f["fault_id"]) & (ev["ts_ns"] >= f["ts_ns"])]
        instant = f["fault_kind"] in m.INSTANT_FAULT_KINDS
        stop = int(heal["ts_ns"].min()) if len(heal) else (int(f["ts_ns"]) if instant else end_ns)
        faults.append({"id": f["fault_id"], "label": f"{f['fault_id']} {f['fault_kind']}"
                       + (f" b{int(f['node_id'])}" if pd.notna(f["node_id"]) else ""),
                       "kind": attrs.get("kind", "disk"), "start": (int(f["ts_ns"]) - t0) / 1e9,
                       "end": (stop - t0) / 1e9, "instant": instant})
    if len(ops):
        ops["t"] = (ops["ts_invoke_ns"] - t0) / 1e9
        ops["latency_ms"] = (ops["ts_complete_ns"] - ops["ts_invoke_ns"]).astype("float64") / 1e6
        ops["done_t"] = (ops["ts_complete_ns"] - t0) / 1e9
        ops["name"] = ops["topic"].astype(str) + "-" + ops["partition"].astype(str)
    checks = runs["checks"].to_pandas()
    service = checks[checks["checker"] == "service"]
    details = json.loads(service["details"].iloc[0]) if len(service) else {}
    return {"run_id": info.run_id, "scenario": info.scenario, "backend": info.fault_backend, "ops": ops,
            "faults": faults, "service": details, "has_fault": bool(len(starts))}


def _shade(ax, faults, *, label: bool) -> None:
    for i, f in enumerate(faults):
        color = _COLORS.get(f["kind"], "0.5")
        if f["instant"]:
            ax.axvline(f["start"], color=color, lw=1.2, ls=":", zorder=0)
        else:
            ax.axvspan(f["start"], f["end"], color=color, alpha=0.08, zorder=0)
            ax.axvline(f["start"], color=color, lw=0.8, alpha=0.6, zorder=0)
        if label:
            ax.text(f["start"], 1.0 - 0.07 * (i % 3), " " + f["label"], transform=ax.get_xaxis_transform(),
                    fontsize=6.5, color=color, va="top", ha="left")


def _by_partition(name: str) -> tuple[str, int]:
    topic, _, part = name.rpartition("-")
    return topic, int(part) if part.lstrip("-").isdigit() else -1


def _panels(d: dict) -> list[tuple[str, list[str]]]:
    names = sorted(d["ops"]["name"].unique(), key=_by_partition)
    if len(names) <= MAX_PANELS:
        return [(n, [n]) for n in names]
    parts = d["service"].get("partitions", {})
    inside = [n for n in names if n in parts and not parts[n].get("outside", True)]
    outside = [n for n in names if n not in inside]
    def n(k: int) -> str:
        return f"{k} partition{'' if k == 1 else 's'}"
    return [(title, members) for title, members in ((f"{n(len(inside))} in a fault's domain", inside),
                                                    (f"{n(len(outside))} outside every fault", outside))
            if members]


def _panel_title(name: str, members: list[str], d: dict) -> str:
    p = d["service"].get("partitions", {}).get(name) if len(members) == 1 else None
    if p is None:
        return name
    bits = [name, "outside" if p.get("outside") else "in " + ",".join(p.get("faults", [])) + "'s domain"]
    rec = [v for v in (p.get("recovery_ms") or {}).values()]
    if rec and all(isinstance(v, (int, float)) for v in rec):
        bits.append(f"recovered {max(rec) / 1000:.1f} s")
    elif rec:
        bits.append("not recovered")
    ratio = p.get("degradation_ratio")
    if isinstance(ratio, (int, float)):
        bits.append(f"p50 ×{ratio:.1f}")
    bits.append(p.get("valid", ""))
    return " · ".join(b for b in bits if b)


def plot_latency(run_dir: Path, out: Path) -> Path | None:
    d = run_data(run_dir)
    ops = d["ops"]
    if ops.empty:
        return None
    plt = _plt()
    panels = _panels(d)
    ncols = 1 if len(panels) <= 2 else (2 if len(panels) <= 4 else 3)
    nrows = math.ceil(len(panels) / ncols)
    height = 2.3 * nrows + 0.9
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols if ncols > 1 else 12, height),
                             dpi=110, sharex=True, sharey=True, squeeze=False, layout="constrained")
    x_lo, x_hi = float(ops["t"].min()) - 0.5, float(ops["t"].max()) + 0.5
    lat = ops["latency_ms"]
    top = float(np.nanmax(lat[lat > 0])) * 2 if (lat > 0).any() else 1000.0
    bottom = max(float(np.nanmin(lat[lat > 0])) / 2, 0.1) if (lat > 0).any() else 0.1
    for k, (title, members) in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        g = ops[ops["name"].isin(members)]
        ok = g[g["outcome"] == "ok"]
        info = g[g["outcome"] == "info"]
        fail = g[g["outcome"] == "fail"]
        size = 4 if len(g) < 3000 else 1.5
        ax.scatter(ok["t"], ok["latency_ms"], s=size, color="tab:blue", alpha=0.55, lw=0, label="ok", zorder=2)
        for sub, marker, color, name in ((info, "^", "tab:orange", "info"), (fail, "x", "tab:red", "fail")):
            if len(sub):
                y = sub["latency_ms"].where(sub["latency_ms"].notna() & (sub["latency_ms"] > 0), top / 1.3)
                ax.scatter(sub["t"], y, s=14 if len(sub) < 300 else 5, marker=marker, color=color, lw=0.8,
                           alpha=0.8, label=name, zorder=3)
        p = d["service"].get("partitions", {}).get(members[0]) if len(members) == 1 else None
        if p and isinstance(p.get("bound_p99_ms"), (int, float)):
            ax.axhline(p["bound_p99_ms"], color="0.35", lw=0.8, ls="--", zorder=1)
        _shade(ax, d["faults"], label=k < ncols)
        ax.set_yscale("log")
        ax.set_ylim(bottom, top)
        ax.set_xlim(x_lo, x_hi)
        ax.set_title(_panel_title(title, members, d), fontsize=7.5, loc="left")
        ax.grid(True, which="major", color="0.92", lw=0.6)
        if k % ncols == 0:
            ax.set_ylabel("latency (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
    for k in range(len(panels), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("s after the first fault (invoke time)" if d["has_fault"] else "s (invoke time)", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    extra = [plt.Line2D([], [], color="0.35", ls="--", lw=0.8)]
    fig.legend(handles + extra, labels + ["recovery bound (2× pre-fault p99, ≥ +floor)"],
               loc="outside lower center", fontsize=7, ncol=4, markerscale=2)
    verdict = d["service"].get("summary", "")
    fig.suptitle(f"produce latency, every op — {d['run_id']} ({d['backend']})\nservice: {verdict[:170]}",
                 fontsize=8.5, x=0.01, ha="left")
    path = out / f"latency_{d['run_id']}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_throughput(run_dir: Path, out: Path) -> Path | None:
    d = run_data(run_dir)
    ops = d["ops"]
    if ops.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4.2), dpi=110)
    acked = ops[(ops["outcome"] == "ok") & ops["done_t"].notna()]
    lo = math.floor(float(ops["t"].min()))
    hi = math.ceil(float(max(ops["t"].max(), acked["done_t"].max() if len(acked) else 0))) + 1
    bins = np.arange(lo, hi + 1, 1.0)
    centers = bins[:-1] + 0.5
    total, _ = np.histogram(acked["done_t"], bins=bins)
    names = sorted(ops["name"].unique(), key=_by_partition)
    offered, _ = np.histogram(ops["t"], bins=bins)
    ax.plot(centers, offered, lw=1.0, ls="--", color="0.45", label="invoked / s (offered)")
    if len(names) <= MAX_PANELS:
        cmap = plt.get_cmap("tab20")
        for i, n in enumerate(names):
            h, _ = np.histogram(acked.loc[acked["name"] == n, "done_t"], bins=bins)
            ax.plot(centers, h, lw=0.8, alpha=0.75, color=cmap(i % 20), label=n)
    ax.plot(centers, total, lw=2.0, color="black", label="all partitions")
    bad = ops[ops["outcome"] != "ok"]
    if len(bad):
        when = bad["done_t"].where(bad["done_t"].notna(), bad["t"])
        h, _ = np.histogram(when, bins=bins)
        ax.bar(centers, -h, width=0.9, color="tab:red", alpha=0.6, label="fail/info (below 0)")
    ax.axhline(0, color="0.4", lw=0.6)
    _shade(ax, d["faults"], label=True)
    ax.set_xlim(lo, min(hi, math.ceil(float(ops["t"].max())) + 3))
    ax.set_xlabel("s after the first fault (completion time, 1 s bins)" if d["has_fault"] else "s", fontsize=8)
    ax.set_ylabel("acked produces / s", fontsize=8)
    ax.grid(True, color="0.92", lw=0.6)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.005, 0.5), ncol=1)
    ax.set_title(f"throughput — {d['run_id']} ({d['backend']})", fontsize=8.5, loc="left")
    fig.tight_layout()
    path = out / f"throughput_{d['run_id']}.png"
    fig.savefig(path)
    plt.close(fig)
    return path
