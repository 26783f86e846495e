"""Infra bench: node image build cold/warm, 4 nodes x 4 disks up/down, FUSE backend vs plain loop.

    sudo .venv/bin/python bench/infra_bench.py [--skip-full-cold] [--out results/bench/infra.json]

Prints a table and writes JSON. Figures are measurements of this host, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from infra import _cmd, host, image  # noqa: E402
from infra.lab import Lab, NodeSpec, Topology  # noqa: E402
from infra.naming import CACHE_ROOT  # noqa: E402


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def bench_image(full_cold: bool) -> dict[str, float]:
    host.ensure_dockerd()
    out: dict[str, float] = {}
    if full_cold:
        _cmd.run(["docker", "image", "rm", "-f", image.base_image_tag()], check=False)
        for t in CACHE_ROOT.glob("rootfs-*.tar"):
            t.unlink()
        _cmd.run(["docker", "image", "rm", "-f", image.node_image_tag(ROOT)], check=False)
        out["cold_full_s"] = timed(lambda: image.ensure_node_image(ROOT))  # debootstrap + import + node layer
    out["cold_node_layer_s"] = timed(lambda: image.ensure_node_image(ROOT, force=True))
    out["warm_s"] = timed(lambda: image.ensure_node_image(ROOT))
    return out


def bench_lab(nodes: int = 4, disks: int = 4) -> dict[str, float]:
    topo = Topology(nodes=tuple(NodeSpec(f"n{i}", tuple(f"d{j}" for j in range(1, disks + 1)))
                                for i in range(1, nodes + 1)), disk_size_mb=512, backend="fuse")
    t0 = time.monotonic()
    lab = Lab.create(topo)
    t_disks = time.monotonic() - t0
    for n in topo.nodes:
        lab.start_node(n.name)
    t_up = time.monotonic() - t0
    t1 = time.monotonic()
    lab.destroy()
    return {"nodes": nodes, "disks_per_node": disks, "disks_ready_s": t_disks, "up_with_containers_s": t_up,
            "teardown_s": time.monotonic() - t1}


LATENCY = r"""
import os, sys, time, statistics
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
lat = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); os.write(fd, b"x" * 4096); os.fsync(fd); lat.append((time.perf_counter() - t) * 1000)
lat.sort()
print(lat[len(lat) // 2], lat[int(len(lat) * 0.99)])
"""


def _dd(path: Path) -> float:
    out = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", "count=512", "conv=fsync"],
                         capture_output=True, text=True, check=True).stderr
    seconds = float(out.strip().splitlines()[-1].split(" s,")[0].split(", ")[-1])
    return 512 * 1048576 / seconds / 1e6


def bench_throughput(runs: int = 3) -> dict[str, dict[str, float]]:
    results = {}
    for backend in ("plain", "fuse"):
        topo = Topology(nodes=(NodeSpec("n1", ("d1",)),), disk_size_mb=1024, backend=backend, network=False)
        with Lab.create(topo) as lab:
            data = lab.disk("n1", "d1").data_path
            daemon = psutil.Process(lab.daemon.pid()) if lab.daemon else None
            cpu0 = sum(daemon.cpu_times()[:2]) if daemon else 0.0
            mbps = []
            for i in range(runs):
                mbps.append(_dd(data / f"dd{i}"))
                (data / f"dd{i}").unlink()
            cpu = (sum(daemon.cpu_times()[:2]) - cpu0) / runs if daemon else 0.0
            lat = subprocess.run([sys.executable, "-c", LATENCY, str(data / "lat"), "500"],
                                 capture_output=True, text=True, check=True).stdout.split()
            results[backend] = {"write_MBps_median": statistics.median(mbps), "write_MBps_runs": mbps,
                                "append_fsync_4k_p50_ms": float(lat[0]), "append_fsync_4k_p99_ms": float(lat[1]),
                                "daemon_cpu_s_per_512MiB": cpu}
    results["fuse_vs_plain_write_ratio"] = {
        "ratio": results["fuse"]["write_MBps_median"] / results["plain"]["write_MBps_median"]}
    return results


def bench_isolation(ops: int = 300) -> dict[str, float]:
    """Latency of 4 KiB append+fsync on one disk while another disk of the same FUSE daemon has
    8 requests at a time stuck in delay:200 — does one slow disk starve a broker's other dirs?"""
    import threading

    from infra.faults import probe_device
    topo = Topology(nodes=(NodeSpec("n1", ("d1", "d2")),), disk_size_mb=256, backend="fuse", network=False)
    with Lab.create(topo) as lab:
        data = lab.disk("n1", "d1").data_path

        def lat() -> list[float]:
            out = subprocess.run([sys.executable, "-c", LATENCY, str(data / "lat"), str(ops)],
                                 capture_output=True, text=True, check=True).stdout.split()
            return [float(x) for x in out]

        quiet = lat()
        fault = lab.disk_fault("n1", "d2", "delay", delay_ms=200, probe=False)
        fault.inject()
        stop = threading.Event()

        def hammer() -> None:
            while not stop.is_set():
                probe_device(lab.disk("n1", "d2"), "write")

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            busy = lat()
        finally:
            stop.set()
            fault.heal()
            for t in threads:
                t.join(timeout=30)
    return {"quiet_p50_ms": quiet[0], "quiet_p99_ms": quiet[1], "neighbour_delayed_p50_ms": busy[0],
            "neighbour_delayed_p99_ms": busy[1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-full-cold", action="store_true", help="do not delete the cached rootfs and base image (the full cold build briefly untags images other users of this host may be starting)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "infra.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("infra bench needs root", file=sys.stderr)
        return 2
    report = {"host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "loadavg_at_start": os.getloadavg()},
              "image": bench_image(not args.skip_full_cold), "lab_4x4": bench_lab(), "throughput": bench_throughput(),
              "isolation": bench_isolation()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    img, lab, tp = report["image"], report["lab_4x4"], report["throughput"]
    print(f"image build: cold full {img.get('cold_full_s', float('nan')):.1f} s, node layer {img['cold_node_layer_s']:.1f} s,"
          f" warm {img['warm_s']:.2f} s")
    print(f"4 nodes x 4 disks (fuse): disks ready {lab['disks_ready_s']:.2f} s, with containers "
          f"{lab['up_with_containers_s']:.2f} s, teardown {lab['teardown_s']:.2f} s")
    for b in ("plain", "fuse"):
        t = tp[b]
        print(f"{b:5s}: dd 512 MiB conv=fsync {t['write_MBps_median']:.0f} MB/s (runs {', '.join(f'{x:.0f}' for x in t['write_MBps_runs'])}),"
              f" 4 KiB append+fsync p50 {t['append_fsync_4k_p50_ms']:.2f} ms p99 {t['append_fsync_4k_p99_ms']:.2f} ms,"
              f" daemon CPU {t['daemon_cpu_s_per_512MiB']:.2f} s/512 MiB")
    iso = report["isolation"]
    print(f"fuse isolation: d1 append+fsync p50/p99 {iso['quiet_p50_ms']:.2f}/{iso['quiet_p99_ms']:.2f} ms quiet, "
          f"{iso['neighbour_delayed_p50_ms']:.2f}/{iso['neighbour_delayed_p99_ms']:.2f} ms while d2 has 8 ops in delay:200")
    print(f"fuse/plain write ratio {tp['fuse_vs_plain_write_ratio']['ratio']:.2f}; written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
