"""S19 ``delete-topic-while-dir-offline`` (KIP-858's rule for offline dirs,
KAFKA-16157, KAFKA-16234, KAFKA-16814): an operator deletes and re-creates a topic while a
replica's dir is offline, then the disk comes back.

The workload produces to t1 throughout (the durability-checked topic). A second topic, t2,
is the operator's: created by an admin action at the fault time (its own 60 acks=all
records), then the dir holding t2-0's replica on a follower fails; t2 is deleted (every log
the brokers can reach goes; the one in the dead dir cannot) and re-created under the same
name (a new topic id: the follower places its replica of t2-0 in an online dir) with 60 new
records. The disk then comes back — the fault heals, and the broker's restart finds the dir
repaired with its data: the old t2-0 is a stray (its topic id is not in the image) beside
the new one, deleted at start-up. Checked (``topic_admin``): the stray removed, the
re-created topic intact (none of its logs deleted, none of the old records read from it,
every record acked to it consumed at its offset, ISR full); no acked t1 record lost
(``durability``; the deleted incarnation's records are not expected); metadata invariants;
t1's service (the admin actions' own records are not a service to judge).

Not in the system suite (the lead decides suite time): ``jbodlab run delete-topic-while-dir-offline``.
"""

from __future__ import annotations

from harness.scenario.faults import AdminAction, DiskFault, ProcessFault
from harness.scenario.model import Scenario
from harness.scenario.sections import Expect, Workload

__all__ = ["delete_topic_while_dir_offline", "ADMIN_SCENARIOS"]

FAULT_AT_MS = 11000        # = harness.catalog.catalog.FAULT_AT_MS (1 s warm-up + 10 s baseline)
T2 = "t2"
T2_FOLLOWER = "follower:t2/0"
T2_PARTITIONS = 3
T2_RECORDS = 60
AFTER_FENCING_MS = 10000   # harness.catalog.catalog: the restarted broker's leaders move and come back


def delete_topic_while_dir_offline(*, seed: int = 0) -> Scenario:
    """S19."""
    create = dict(topic=T2, partitions=T2_PARTITIONS, replication_factor=3, records=T2_RECORDS)
    return Scenario(
        id="S19", name="delete-topic-while-dir-offline", seed=seed,
        description="create t2; fail the dir of a follower replica of t2-0; delete t2 and create it again; the "
                    "disk comes back (healed, the broker restarted with it)",
        workload=Workload(duration_ms=FAULT_AT_MS + 30000),
        faults=(AdminAction(at_ms=FAULT_AT_MS, action="create-topic", **create),
                DiskFault(at_ms=FAULT_AT_MS + 3000, node=T2_FOLLOWER, dir="replica:t2/0", mode="error",
                          duration_ms=8000),
                AdminAction(at_ms=FAULT_AT_MS + 6000, action="delete-topic", topic=T2),
                AdminAction(at_ms=FAULT_AT_MS + 8000, action="create-topic", **create),
                ProcessFault(at_ms=FAULT_AT_MS + 12000, action="restart", node=T2_FOLLOWER, clean=True)),
        checks=("durability", "liveness", "metadata_invariants", "service", "topic_admin"),
        expect=Expect(outcomes={T2_FOLLOWER: "alive"}, service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="the delete is accepted with a replica's dir offline; the topic re-created under "
                                "the same name is placed on online dirs; when the disk comes back the old "
                                "incarnation's log is a stray, deleted at start-up; the new topic intact; no acked "
                                "record lost"))


ADMIN_SCENARIOS = {"S19": delete_topic_while_dir_offline}
