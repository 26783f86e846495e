"""The lab's group consumers (``harness.workload.group``) and their checker on real
processes (1 kraft-controller + 3 kraft-brokers on loopback, no containers): an acks=all
producer workload and two group members committing after processing; midway the group's
coordinator is killed (its ``__consumer_offsets`` partition moves). The history must pass
``group_consumption``: every acked record consumed by the group, commits never backwards,
none lost across the move; and a rebalance shows up in ``rebalance_ms``."""

from __future__ import annotations

import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

from testkit.cluster import running_cluster, wait_until  # noqa: E402
from harness.checkers.group_consumption import check_group_consumption, rebalance_ms  # noqa: E402
from harness.workload.group import GroupConsumerWorkload  # noqa: E402
from harness.results.ledger import load_history  # noqa: E402
from harness.scenario.sections import Workload  # noqa: E402
from harness.workload.producer import ProducerWorkload, SafeLedger  # noqa: E402
from tests.groups.test_groups_clients import GROUP_KEYS, describe, make_topic  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, broker_extra=GROUP_KEYS) as c:
        yield c


def test_group_members_consume_every_acked_record_across_a_coordinator_kill(cluster, tmp_path):
    from confluent_kafka import Consumer, TopicPartition
    topic, group = "lab-t", "lab-group"
    make_topic(cluster, topic, 3)
    alive = list(cluster.brokers)
    bootstrap = lambda: ",".join(f"127.0.0.1:{b.port}" for b in alive)   # noqa: E731
    ledger = SafeLedger(tmp_path / "ledger.jsonl")
    producers = ProducerWorkload(Workload(client="confluent-kafka", rate_per_s=150, value_bytes=32), bootstrap,
                                 ledger, tag="lab", seed=7)
    producers.add_topic(topic, 3)
    consumers = GroupConsumerWorkload(bootstrap, ledger, group=group, topics=[topic], members=2)
    producers.start()
    consumers.start()
    wait_until(lambda: consumers.counts["commits"] >= 20 and consumers.counts["rebalances"] >= 2, 60,
               "both members consuming and committing")
    coordinator = describe(cluster, group).coordinator.id
    victim = next(b for b in cluster.brokers if b.node_id == coordinator)
    commits_before = consumers.counts["commits"]
    victim.kill()
    alive.remove(victim)
    wait_until(lambda: consumers.counts["commits"] >= commits_before + 20, 60, "commits again after the kill")
    time.sleep(1)
    producers.stop()
    c = Consumer({"bootstrap.servers": bootstrap(), "group.id": "ends", "log_level": 0})
    try:
        ends = {(topic, p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(3)}
    finally:
        c.close()
    final = consumers.stop(ends, timeout_s=60)
    ledger.close()
    assert final == ends, (final, ends)
    assert not consumers.errors and not producers.errors
    history = load_history(tmp_path / "ledger.jsonl", [])
    result = check_group_consumption(None, history)
    assert result.valid is True, result
    assert result.details["acked"] == producers.counts["ok"] > 100
    assert rebalance_ms(history), "a rebalance was recorded"
