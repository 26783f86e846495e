"""Replica management: the KIP's case list (behaviour §3), RMT/PT/LMT placement tests,
KAFKA-16234 / KAFKA-16157, leader/follower transitions."""
import pytest

from broker_impl.state.effects import (BecomeFollower, BecomeLeader, CreateLog, DeleteLog, MarkPartitionsOffline,
                                       QueueAssignment, StartDirMover, StartFetcher, StopFetcher, SwapFutureLog,
                                       UpdateLeaderState)
from broker_impl.state.log_dirs import LogDirInfo, LogDirs
from broker_impl.state.replica_manager import ExistingLog, Hosted, PartitionChange, ReplicaManager
from broker_state_helpers import D1, D2, D3, ME, T1, T2, events, no_events, of, reg, tp
from kafka_common.ids import LOST, MIGRATING, UNASSIGNED, uuid_of

pytestmark = pytest.mark.unit
UNKNOWN = uuid_of(0x7777, 7)


def rm(logs=(), offline=(), dirs=(D1, D2, D3)):
    ld = LogDirs([LogDirInfo(d, f"/{i}") for i, d in enumerate(dirs)], None)
    r = ReplicaManager(ME, ld, [ExistingLog(*l) if isinstance(l, tuple) else l for l in logs])
    for d in offline:
        ld.on_storage_error(d, 5, "test")
        r.on_dir_offline(d)
    return r


def apply(r, new, old=None, topic="t", **kw):
    return no_events(r.apply([PartitionChange(topic, old, new)], **kw))


# ------------------------------------------------------------------ UNASSIGNED
def test_unassigned_existing_log_sends_actual_dir():
    r = rm(logs=[(tp(), T1, D2)])
    out = apply(r, reg(dir_for_me=UNASSIGNED))
    assert not of(out, CreateLog)
    assert of(out, QueueAssignment) == [QueueAssignment(T1, 0, D2, "Applying metadata delta", tp())]


def test_unassigned_missing_log_created_in_least_loaded_dir_and_sent():
    # D1: 2 logs; D2: 1 log + the future log of c (futures count); D3: 1 log → D3
    r = rm(logs=[(tp("a"), T2, D1), (tp("b"), T2, D1), (tp("d"), T2, D2), (tp("c"), T2, D3),
                 ExistingLog(tp("c"), T2, D2, True)])
    out = apply(r, reg(dir_for_me=UNASSIGNED))
    assert of(out, CreateLog) == [CreateLog(tp(), T1, D3)]
    assert of(out, QueueAssignment)[0].dir_id == D3


def test_least_loaded_ties_broken_by_configured_order():
    r = rm()
    out = apply(r, reg(pid=0, dir_for_me=UNASSIGNED)) + apply(r, reg(pid=1, dir_for_me=UNASSIGNED), topic="t") \
        + apply(r, reg(pid=2, dir_for_me=UNASSIGNED)) + apply(r, reg(pid=3, dir_for_me=UNASSIGNED))
    assert [c.dir_id for c in of(out, CreateLog)] == [D1, D2, D3, D1]


def test_leaders_placed_before_followers_so_they_spread_over_the_dirs():
    """A new topic of 12 partitions RF 3 on 3 brokers, leaders rotating (this broker leads
    0, 3, 6, 9): Kafka's applyDelta makes the leaders first, so they land on D1, D2, D3, D1;
    in partition order every third replica, all four leaders, would share D1."""
    r = rm()
    changes = [PartitionChange("t", None, reg(pid=p, leader=(p % 3) + 1, replicas=((p % 3) + 1, (p + 1) % 3 + 1,
                                                                                  (p + 2) % 3 + 1),
                                              dir_for_me=UNASSIGNED)) for p in range(12)]
    out = no_events(r.apply(changes))
    where = {c.tp.partition: c.dir_id for c in of(out, CreateLog)}
    assert len(where) == 12
    assert [where[p] for p in (0, 3, 6, 9)] == [D1, D2, D3, D1]
    assert sorted(where.values()).count(D1) == 4 and list(where.values()).count(D2) == 4
    # the effects still follow one partition's order: its log before its assignment and role
    first = [type(e) for e in out if getattr(e, "tp", None) == tp(p=0)]
    assert first[:2] == [CreateLog, QueueAssignment] and BecomeLeader in first


def test_lost_replicas_go_before_new_ones():
    r = rm()
    apply(r, reg(pid=0, dir_for_me=UNASSIGNED))
    out = no_events(r.apply([PartitionChange("t", None, reg(pid=1, leader=2, dir_for_me=UNASSIGNED)),
                             PartitionChange("t", reg(pid=0), None)]))
    assert [type(e) for e in out if isinstance(e, (CreateLog, DeleteLog))] == [DeleteLog, CreateLog]
    # the removed log no longer counts: the new replica goes to D1 again
    assert of(out, CreateLog)[0].dir_id == D1


def test_unassigned_created_even_with_an_offline_dir():
    r = rm(offline=[D1])
    out = apply(r, reg(dir_for_me=UNASSIGNED))
    assert of(out, CreateLog)[0].dir_id in (D2, D3)
    assert of(out, QueueAssignment)


# ------------------------------------------------------------------ an online dir
def test_online_dir_missing_log_created_there_without_assignment():
    r = rm(offline=[D3])
    out = apply(r, reg(dir_for_me=D2))
    assert of(out, CreateLog) == [CreateLog(tp(), T1, D2)]
    assert not of(out, QueueAssignment)


def test_online_dir_log_there_is_noop():
    r = rm(logs=[(tp(), T1, D2)])
    out = apply(r, reg(dir_for_me=D2, leader=2))
    assert not of(out, CreateLog) and not of(out, QueueAssignment)
    assert r.partitions[tp()].dir_id == D2 and r.partitions[tp()].hosted is Hosted.ONLINE


def test_online_dir_log_there_with_future_elsewhere_resumes_move():
    r = rm(logs=[(tp(), T1, D2), ExistingLog(tp(), T1, D3, True)])
    out = apply(r, reg(dir_for_me=D2))
    assert of(out, StartDirMover) == [StartDirMover(tp(), D2, D3)]


def test_log_elsewhere_and_future_in_metadata_dir_finishes_move_KAFKA_16082():
    r = rm(logs=[(tp(), T1, D1), ExistingLog(tp(), T1, D2, True)])
    out = apply(r, reg(dir_for_me=D2))
    assert of(out, SwapFutureLog) == [SwapFutureLog(tp(), D1, D2)]
    assert not of(out, QueueAssignment)


def test_log_in_other_online_dir_corrects_assignment():
    r = rm(logs=[(tp(), T1, D3)])
    out = apply(r, reg(dir_for_me=D1))
    assert not of(out, CreateLog)
    assert of(out, QueueAssignment)[0].dir_id == D3


def test_no_correction_while_promotion_in_flight():
    r = rm(logs=[(tp(), T1, D3)])
    out = apply(r, reg(dir_for_me=D1), promotions_in_flight=frozenset({tp()}))
    assert not of(out, QueueAssignment)


def test_preferred_dir_wins_over_metadata_dir_and_is_sent():
    r = rm()
    r.preferred_dirs[tp()] = D3
    out = apply(r, reg(dir_for_me=D1))
    assert of(out, CreateLog)[0].dir_id == D3 and of(out, QueueAssignment)[0].dir_id == D3


# ------------------------------------------------------------------ unknown / LOST
@pytest.mark.parametrize("md", [UNKNOWN, LOST, MIGRATING])
def test_unknown_or_lost_with_offline_dir_does_nothing(md):
    r = rm(logs=[(tp(), T1, D2)], offline=[D1])
    out = apply(r, reg(dir_for_me=md))
    assert out == []   # no create, no attach, no assignment, no role change
    assert r.partitions[tp()].hosted is Hosted.PENDING


@pytest.mark.parametrize("md", [UNKNOWN, LOST])
def test_unknown_or_lost_without_offline_dir_places_and_sends(md):
    r = rm()
    out = apply(r, reg(dir_for_me=md))
    [c] = of(out, CreateLog)
    assert of(out, QueueAssignment)[0].dir_id == c.dir_id


def test_unknown_without_offline_dir_attaches_existing_log():
    r = rm(logs=[(tp(), T1, D3)])
    out = apply(r, reg(dir_for_me=LOST))
    assert not of(out, CreateLog) and of(out, QueueAssignment)[0].dir_id == D3


def test_metadata_naming_an_offline_dir_does_not_restream_to_survivors():
    r = rm()
    apply(r, reg(dir_for_me=D1))
    r.log_dirs.on_storage_error(D1, 5, "x")
    r.on_dir_offline(D1)
    # the controller keeps naming D1 (or moves leadership): never re-created elsewhere
    out = apply(r, reg(dir_for_me=D1, leader=2, leader_epoch=1), old=reg(dir_for_me=D1))
    assert out == []


def test_offline_partition_not_recreated_KAFKA_16234():
    r = rm()
    apply(r, reg(dir_for_me=D1))
    r.log_dirs.on_storage_error(D1, 5, "x")
    r.on_dir_offline(D1)
    for md in (UNASSIGNED, D2, LOST):
        assert apply(r, reg(dir_for_me=md, partition_epoch=3)) == []
    assert r.offline_partitions() == [tp()]


def test_recreated_topic_with_new_id_is_created_KAFKA_16157():
    r = rm()
    apply(r, reg(dir_for_me=D1))
    r.log_dirs.on_storage_error(D1, 5, "x")
    r.on_dir_offline(D1)
    out = apply(r, reg(topic_id=T2, dir_for_me=UNASSIGNED))
    [c] = of(out, CreateLog)
    assert c.topic_id == T2 and c.dir_id in (D2, D3)
    assert r.partitions[tp()].topic_id == T2 and r.partitions[tp()].hosted is Hosted.ONLINE


def test_single_dir_broker_never_sends_for_its_dir():
    r = rm(dirs=(D1,))
    out = apply(r, reg(dir_for_me=D1)) + apply(r, reg(pid=1, dir_for_me=D1))
    assert len(of(out, CreateLog)) == 2 and not of(out, QueueAssignment)


# ------------------------------------------------------------------ roles
def test_leader_and_follower_transitions():
    r = rm()
    out = apply(r, reg(dir_for_me=D1, leader=2, leader_epoch=0))
    assert of(out, BecomeFollower) == [BecomeFollower(tp(), T1, 2, 0)]
    assert of(out, StartFetcher) == [StartFetcher(tp(), T1, 2, 0)]
    out = apply(r, reg(dir_for_me=D1, leader=ME, leader_epoch=1))
    assert of(out, StopFetcher) == [StopFetcher((tp(),))]
    [bl] = of(out, BecomeLeader)
    assert bl.leader_epoch == 1 and bl.isr == (ME, 2, 3)
    raw = r.apply([PartitionChange("t", None, reg(dir_for_me=D1, leader=ME, leader_epoch=1, isr=(ME, 2),
                                                   partition_epoch=2))])
    out = no_events(raw)
    assert of(out, UpdateLeaderState) == [UpdateLeaderState(tp(), 2, (ME, 2), (ME, 2, 3))]
    assert [e.as_dict()["isr"] for e in events(raw, "isr_change")] == [[ME, 2]]
    assert apply(r, reg(dir_for_me=D1, leader=ME, leader_epoch=1, isr=(ME, 2), partition_epoch=2)) == []
    out = apply(r, reg(dir_for_me=D1, leader=3, leader_epoch=2))
    assert of(out, BecomeFollower) == [BecomeFollower(tp(), T1, 3, 2)] and of(out, StartFetcher)
    out = apply(r, reg(dir_for_me=D1, leader=-1, leader_epoch=3))
    assert of(out, StopFetcher) and of(out, BecomeFollower) and not of(out, StartFetcher)


def test_removed_replica_stops_fetching_and_deletes_log():
    r = rm()
    old = reg(dir_for_me=D2, leader=2)
    apply(r, old)
    out = apply(r, reg(replicas=(2, 3, 4), leader=2), old=old)
    assert of(out, StopFetcher) == [StopFetcher((tp(),))]
    assert of(out, DeleteLog) == [DeleteLog(tp(), T1, D2)]
    assert tp() not in r.partitions and not r.is_replica(T1, 0)


def test_deleted_topic_deletes_log():
    r = rm()
    old = reg(dir_for_me=D2)
    apply(r, old)
    out = apply(r, None, old=old)
    assert of(out, DeleteLog) == [DeleteLog(tp(), T1, D2)] and not r.is_replica(T1, 0)


# ------------------------------------------------------------------ dir failure
def test_dir_offline_stops_fetchers_and_marks_partitions_offline():
    r = rm()
    apply(r, reg(pid=0, dir_for_me=D1, leader=2))
    apply(r, reg(pid=1, dir_for_me=D1, leader=ME))
    apply(r, reg(pid=2, dir_for_me=D2, leader=2))
    assert r.leads_partition_in(D1) and not r.leads_partition_in(D2)
    out = r.on_dir_offline(D1)
    assert out == [StopFetcher((tp(p=0),)), MarkPartitionsOffline(D1, (tp(p=0), tp(p=1)))]
    assert r.offline_partitions() == [tp(p=0), tp(p=1)]
    assert r.leads_partition_in(D1)      # still leader in metadata until the controller moves it
    assert r.is_replica(T1, 0)
    apply(r, reg(pid=1, dir_for_me=D1, leader=2, leader_epoch=1))
    assert not r.leads_partition_in(D1)  # the metadata view is tracked for offline partitions too


# ------------------------------------------------------------------ strays (first publish)
def test_strays_deleted_before_partitions_are_created_KAFKA_14616():
    from broker_impl.state.effects import DeleteLog
    r = rm(logs=[(tp("gone"), T1, D1),          # topic deleted while the broker was down
                 (tp("t"), T1, D2),             # topic re-created under T2 while down
                 (tp("kept"), T1, D3),
                 (tp("moved"), T1, D1)])        # no longer a replica here
    changes = [PartitionChange("t", None, reg(topic_id=T2, dir_for_me=UNASSIGNED)),
               PartitionChange("kept", None, reg(dir_for_me=D3)),
               PartitionChange("moved", None, reg(replicas=(2, 3), leader=2))]
    strays = r.strays(changes)
    assert strays == [DeleteLog(tp("gone"), T1, D1, stray=True), DeleteLog(tp("moved"), T1, D1, stray=True),
                      DeleteLog(tp("t"), T1, D2, stray=True)]
    out = no_events(r.apply(changes))
    [c] = of(out, CreateLog)
    assert c.tp == tp("t") and c.topic_id == T2   # the new incarnation is created, not shadowed
    assert not any(isinstance(e, CreateLog) and e.tp == tp("kept") for e in out)


def test_log_without_topic_id_is_a_stray_claimed_or_not_KAFKA_16814():
    r = rm(logs=[(tp("orphan"), None, D1), (tp("t"), None, D2)])
    strays = r.strays([PartitionChange("t", None, reg(dir_for_me=D2))])
    assert strays == [DeleteLog(tp("orphan"), None, D1, stray=True), DeleteLog(tp("t"), None, D2, stray=True)]
    [c] = of(no_events(r.apply([PartitionChange("t", None, reg(dir_for_me=D2))])), CreateLog)
    assert (c.tp, c.topic_id, c.dir_id) == (tp("t"), T1, D2)   # created again where the metadata says


@pytest.mark.parametrize("claimed_first", [True, False])
def test_two_incarnations_on_disk_the_images_is_kept_the_other_deleted_KAFKA_16157(claimed_first):
    """A topic deleted and re-created (T1 → T2) while the dir holding T1's log was away: at
    the start-up with it back both logs are on disk; whichever the storage loaded first, the
    image's (T2) is attached, the stray (T1) deleted by its dir, nothing created."""
    old, new = (tp(), T1, D1), (tp(), T2, D3)
    r = rm(logs=[new, old] if claimed_first else [old, new])
    changes = [PartitionChange("t", None, reg(topic_id=T2, dir_for_me=D3))]
    assert r.strays(changes) == [DeleteLog(tp(), T1, D1, stray=True)]
    out = no_events(r.apply(changes))
    assert not of(out, CreateLog) and not of(out, QueueAssignment) and of(out, BecomeLeader)
    assert r.logs[tp()] == (T2, D3) and r.partitions[tp()].dir_id == D3


def test_delete_while_dir_offline_then_recreate_places_the_new_incarnation_online_KAFKA_16157_16234():
    """The topic is deleted while its replica's dir is offline: nothing is deleted now (the
    dir is unreachable), the replica stays offline. Re-created (new id): created in an online
    dir, while the old incarnation never was (KAFKA-16234)."""
    r = rm(logs=[(tp(), T1, D1)])
    p = reg(dir_for_me=D1)
    apply(r, p)
    r.log_dirs.on_storage_error(D1, 5, "append")
    r.on_dir_offline(D1)
    moved = reg(dir_for_me=D1, leader=2, leader_epoch=1)       # the same incarnation, its leader moved
    assert not of(apply(r, moved, old=p), CreateLog)            # KAFKA-16234: not re-created elsewhere
    assert not of(r.apply([PartitionChange("t", moved, None)]), DeleteLog)
    out = apply(r, reg(topic_id=T2, dir_for_me=UNASSIGNED))
    [c] = of(out, CreateLog)
    assert c.topic_id == T2 and c.dir_id in (D2, D3)
    assert not r.is_offline(T2, 0) and r.logs[tp()] == (T2, c.dir_id)


def test_unchanged_metadata_dir_is_not_replaced_or_resent():
    """Another replica's change (its dir assigned, ISR, leader) while this broker's dir is
    still UNASSIGNED in metadata: the assignment already queued is not queued again."""
    r = rm()
    first = reg(replicas=(2, ME), dirs=(UNASSIGNED, UNASSIGNED), leader=2)
    out = apply(r, first)
    assert len(of(out, QueueAssignment)) == 1
    second = reg(replicas=(2, ME), dirs=(uuid_of(0x9999, 2), UNASSIGNED), leader=2, partition_epoch=1)
    assert not of(apply(r, second, old=first), QueueAssignment)
    # a changed dir for this broker is looked at again (correction when it is not the real one)
    third = reg(replicas=(2, ME), dirs=(uuid_of(0x9999, 2), D3), leader=2, partition_epoch=2)
    [q] = of(apply(r, third, old=second), QueueAssignment)
    assert q.dir_id == of(out, CreateLog)[0].dir_id != D3


# ------------------------------------------------------------------ the status queries (owner of the facts)
def test_partition_status_and_leadership_are_answered_by_the_replica_manager():
    """The data plane and the handlers read partition status and leadership here only:
    a partition is offline once its dir failed (and stays so while the controller keeps
    naming that dir); leadership is the epoch of the last BecomeLeader, gone with it."""
    r = rm()
    apply(r, reg(dir_for_me=D1, leader=ME, leader_epoch=4))
    assert not r.is_offline(T1, 0) and r.leader_epoch(T1, 0) == 4
    apply(r, reg(dir_for_me=D1, leader=2, leader_epoch=5), old=reg(dir_for_me=D1, leader=ME, leader_epoch=4))
    assert r.leader_epoch(T1, 0) is None            # a follower now
    apply(r, reg(dir_for_me=D1, leader=ME, leader_epoch=6), old=reg(dir_for_me=D1, leader=2, leader_epoch=5))
    assert r.leader_epoch(T1, 0) == 6
    r.log_dirs.on_storage_error(D1, 5, "x")
    r.on_dir_offline(D1)
    assert r.is_offline(T1, 0) and r.leader_epoch(T1, 0) is None
    assert not r.is_offline(T2, 0) and r.leader_epoch(T2, 0) is None   # not hosted here at all


# ------------------------------------------------------------------ cordoned dirs (KIP-1066)
def test_new_replicas_avoid_cordoned_dirs_unless_every_online_dir_is():
    r = rm(logs=[(tp("a"), T2, D1), (tp("b"), T2, D1)])
    assert r.log_dirs.cordon_paths(["/1", "/2/"]) == []           # D2, D3 (paths compared normalised)
    assert r.log_dirs.cordoned == {D2, D3}
    out = apply(r, reg(dir_for_me=UNASSIGNED))
    assert of(out, CreateLog) == [CreateLog(tp(), T1, D1)]         # D1 is the loaded one, but the only open one
    r.log_dirs.cordon_paths(["*"])
    out = apply(r, reg(pid=1, dir_for_me=UNASSIGNED))
    assert of(out, CreateLog)[0].dir_id == D2                      # all cordoned: least loaded after all
    assert r.log_dirs.cordon_paths(["/1", "/nope"]) == ["/nope"] and r.log_dirs.cordoned == {D1, D2, D3}
