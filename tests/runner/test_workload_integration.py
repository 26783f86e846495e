"""The workload and the drain against a real Kafka-protocol broker listener on loopback
(the data plane's single-process broker: real storage, real kio frames), with both clients.
The ledger they write must read back as a history in which every ack is consumed at its offset."""

from __future__ import annotations

import time

import pytest

from harness.checkers.durability import analyse_durability
from harness.results.ledger import load_history
from harness.scenario.sections import TopicSpec, Workload
from harness.workload.producer import ProducerWorkload, SafeLedger, drain, make_client
from tests.dataplane.inprocess_broker import Broker
from tests.dataplane.conftest import LoopThread

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning")]


@pytest.fixture
def broker(tmp_path):
    lt = LoopThread()
    b = Broker(tmp_path / "broker")
    lt.run(b.start())
    lt.run(b.create_topic("t1", 3))
    yield b
    lt.run(b.stop())
    lt.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_every_ack_is_drained_at_its_offset(broker, tmp_path, client: str) -> None:
    spec = Workload(client=client, topics=(TopicSpec(name="t1", partitions=3, replication_factor=1),),
                    rate_per_s=150, duration_ms=1000, producers=2)
    ledger = SafeLedger(tmp_path / "ledger.jsonl")
    w = ProducerWorkload(spec, lambda: broker.bootstrap, ledger, tag="it", seed=3)
    w.add_topic("t1", 3)
    ready = w.start()
    # each producer connected and had its warm-up values acked before its clock started
    assert set(ready) == {"p0", "p1"} and all(n >= 1 and unacked == 0 for _s, n, unacked in ready.values()), ready
    time.sleep(1.5)
    w.stop()
    ends = drain(broker.bootstrap, {"t1": 3}, ledger, timeout_ms=15000)
    ledger.close()
    assert all(v is not None for v in ends.values()), ends
    h = load_history(tmp_path / "ledger.jsonl", [])
    assert not h.problems
    r = analyse_durability(h)
    assert w.counts["invoke"] >= 100 and w.counts["ok"] == w.counts["invoke"], w.counts
    assert r.acked == w.counts["ok"] and r.consumed == r.acked
    assert not (r.lost or r.duplicates or r.offset_mismatch or r.reordered or r.phantom or r.not_reached)
    assert sum(ends.values()) == r.acked
    # two producers, unique value ids
    assert len({op.value_id for op in h.ops("produce", "invoke")}) == w.counts["invoke"]
    # the warm-up values are ordinary ops, acked before the producer's clocked ones begin
    for process, (_s, n, _u) in ready.items():
        acked = {op.value_id: op.ts_ns for op in h.ops("produce", "ok") if op.process == process}
        invoked = {op.value_id: op.ts_ns for op in h.ops("produce", "invoke") if op.process == process}
        warm = [f"it-{process}-{i}" for i in range(n)]
        assert max(acked[v] for v in warm) <= invoked[f"it-{process}-{n}"]


def test_a_waiting_confluent_producer_completes_a_send_when_its_ack_arrives(broker) -> None:
    """Between sends the producer loop waits in librdkafka's poll, which hands over a delivery
    report as soon as it is ready; a sleep between non-blocking polls would stamp every
    completion at the next poll (the lab's latencies came in 10 ms steps, 10 or 20 ms at 200
    records/s, before this)."""
    client = make_client("confluent-kafka", broker.bootstrap, "all", "wait-test")
    got: list[tuple[str | None, int | None]] = []
    client.send("t1", 0, b"warm", lambda err, off: got.append((err, off)))
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        client.wait(1.0)
    assert got and got[0][0] is None, got
    got.clear()
    client.send("t1", 0, b"one", lambda err, off: got.append((err, off)))
    waits = []
    while not got and len(waits) < 3:
        t0 = time.monotonic()
        client.wait(10.0)
        waits.append(time.monotonic() - t0)
    assert got == [(None, 1)], got
    # the wait that ran the completion returned with it, not at its 10 s timeout
    assert waits[-1] < 5.0, waits
    assert client.close(5.0) == 0
