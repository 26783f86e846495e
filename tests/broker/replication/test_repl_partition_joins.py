"""A new topic's partitions join the followers' fetchers in a burst (one per log created, over
seconds on a loaded machine) without a dropped fetch connection per join.

Real processes (1 kraft-controller + 3 kraft-brokers, loopback), a real client (confluent-kafka).
The brokers long-poll for 30 s (``replica.fetch.wait.max.ms``), so every partition that joins a
fetcher while it long-polls must interrupt that poll (the leader answers a connection in order:
the fetch in flight is dropped with its connection) or wait up to 30 s. Before the fix each
such join dropped one: creating 300 partitions made each broker reconnect 18–97 times, and
the reconnects and full fetch requests slowed the first seconds of every new topic. Now, for
``JOIN_SETTLE_S`` after a join, a fetcher's polls are short, so the rest of the burst waits for
one of those instead. Counted from the brokers' ``stopped`` event (the fetchers' counters),
never timed; every partition acks a record within 15 s (half a long poll), so none was left
out waiting.
"""

from __future__ import annotations

import pytest

from testkit.cluster import running_cluster
from kafka_common.ids import UNASSIGNED

pytestmark = pytest.mark.integration

PARTITIONS = 300
LONG_POLL = {"replica.fetch.wait.max.ms": "30000", "replica.lag.time.max.ms": "120000",
             "min.insync.replicas": "2"}
GIVE_UP_MS = 15000
# per broker (two fetchers): the first join of a fetcher that is long-polling, and one more per
# gap longer than JOIN_SETTLE_S between two log creations (a loaded machine): far below one
# per joined partition (200 per broker)
MAX_INTERRUPTS = 6


def test_a_burst_of_joins_keeps_the_fetch_connections(tmp_path):
    from confluent_kafka import Producer
    with running_cluster(tmp_path, broker_extra=LONG_POLL, session_timeout_ms=9000) as c:
        c.create_topic("burst", {p: [(p + k) % 3 + 1 for k in range(3)] for p in range(PARTITIONS)})
        c.wait_image(lambda im: "burst" in im.topic_ids and len(im.partitions_of(im.topic_ids["burst"])) == PARTITIONS
                     and all(len(p.isr) == 3 and UNASSIGNED not in p.directories
                             for p in im.partitions_of(im.topic_ids["burst"]).values()),
                     120, "burst: every partition placed, full ISRs")
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": GIVE_UP_MS})
        errors: list = []
        acked: list = []
        for part in range(PARTITIONS):
            p.produce("burst", f"v{part}".encode(), partition=part,
                      on_delivery=lambda err, msg: (errors if err else acked).append(msg.partition()))
        assert p.flush(GIVE_UP_MS / 1000 + 15) == 0
        assert not errors, f"{len(errors)} records not acknowledged within {GIVE_UP_MS} ms: {errors[:5]}"
        assert sorted(acked) == list(range(PARTITIONS))
        for b in c.brokers:
            assert b.stop(30) == 0
        stats = {}
        for b in c.brokers:
            stopped = [e for e in b.events() if e["event"] == "stopped"]
            assert stopped, f"broker {b.node_id}: no stopped event"
            stats[b.node_id] = stopped[-1]["fetch"]
        for node, fetch in stats.items():
            assert fetch.get("rounds", 0) > 0, f"broker {node}: its fetchers never fetched: {stats}"
            assert fetch.get("interrupts", 0) <= MAX_INTERRUPTS, \
                f"broker {node} dropped {fetch.get('interrupts', 0)} fetch connections for joining partitions: {stats}"
