"""`kraft-controller quorum-status`: DescribeQuorum (55) to each controller until one leads."""

from __future__ import annotations

import asyncio
import sys

from controller_impl.runtime import raft_wire as rw
from kafka_runtime.client import ClientError, KafkaClient


async def describe_quorum(host: str, port: int, timeout_s: float = 2.0) -> dict:
    """DescribeQuorum (55) of one controller, as :func:`raft_wire.parse_describe_response` reads it."""
    client = await KafkaClient.connect(host, port, timeout_s=timeout_s)
    try:
        version = client.pick_version(rw.DESCRIBE, 0, 2)
        resp = await client.request(rw.describe_request(version), timeout_s=timeout_s)
        return rw.parse_describe_response(resp)
    finally:
        await client.close()


async def print_status(targets: list[tuple[str, int]], out=sys.stdout) -> int:
    answers: list[tuple[tuple[str, int], dict | str]] = []
    for host, port in targets:
        try:
            d = await describe_quorum(host, port, 3.0)
        except (ClientError, OSError, asyncio.TimeoutError) as exc:
            answers.append(((host, port), f"unreachable: {exc}"))
            continue
        answers.append(((host, port), d))
        if d["error"] == "none":
            _print(d, out)
            return 0
    for (host, port), d in answers:
        if isinstance(d, dict):
            print(f"{host}:{port}: not the leader (it names leader {d['leader_id']}, epoch {d['leader_epoch']})",
                  file=sys.stderr)
        else:
            print(f"{host}:{port}: {d}", file=sys.stderr)
    print("quorum-status: no controller answered as the leader", file=sys.stderr)
    return 1


def _print(d: dict, out) -> None:
    voters = d["voters"]
    hw = d["high_watermark"]
    lags = [max(0, hw - v["log_end_offset"]) for v in voters if v["id"] != d["leader_id"]]
    fetch_ts = [v["last_fetch_timestamp"] for v in voters if v["last_fetch_timestamp"] >= 0]
    print(f"LeaderId:               {d['leader_id']}", file=out)
    print(f"LeaderEpoch:            {d['leader_epoch']}", file=out)
    print(f"HighWatermark:          {hw}", file=out)
    print(f"MaxFollowerLag:         {max(lags) if lags else 0}", file=out)
    print(f"MaxFollowerLagTimeMs:   {max(fetch_ts) - min(fetch_ts) if fetch_ts else 0}", file=out)
    print(f"CurrentVoters:          {sorted(v['id'] for v in voters)}", file=out)
    print("CurrentObservers:       []", file=out)
    for v in voters:
        print(f"  voter {v['id']}: log end offset {v['log_end_offset']}, "
              f"lag {max(0, hw - v['log_end_offset'])}", file=out)
