"""BrokerCore: the components wired together — D4 fencing, the storage-error handler order,
immediate heartbeats, D5 through the lifecycle, assignment drops, halts."""
import pytest

from broker_impl.state.core import BrokerCore, CoreConfig
from broker_impl.state.effects import (CreateLog, Halt, MarkDirOffline, MarkPartitionsOffline, SendAssignments,
                                       SendHeartbeat, SendRegistration, Shutdown, StopFetcher)
from broker_impl.state.log_dirs import LogDirInfo
from broker_impl.state.replica_manager import PartitionChange
from broker_state_helpers import D1, D2, D3, ME, T1, FixedRng, events, of, reg, tp
from kafka_common.clock import ManualClock
from kafka_common.ids import UNASSIGNED, to_base64, uuid_of

pytestmark = pytest.mark.unit
NONE = 0
META = uuid_of(0x4444, 4)


def core(dirs=(D1, D2, D3), metadata=META, **cfg):
    return BrokerCore(CoreConfig(broker_id=ME, **cfg), [LogDirInfo(d, f"/data/{i}") for i, d in enumerate(dirs)],
                      metadata, FixedRng())


def up(c, clock, epoch=100):
    """Register and catch up; returns the effects of the steps."""
    out = c.start(clock.monotonic_ms())
    assert of(out, SendRegistration)
    out = c.on_registration_response(NONE, epoch, clock.monotonic_ms())
    assert of(out, SendHeartbeat)
    out += c.on_heartbeat_response(NONE, clock.monotonic_ms(), is_caught_up=True)
    return out


def change(new, old=None, topic="t"):
    return [PartitionChange(topic, old, new)]


def test_fenced_while_assignments_queued_then_unfence_D4():
    clock = ManualClock()
    c = core()
    up(c, clock)
    out = c.apply_metadata(change(reg(dir_for_me=UNASSIGNED)) + change(reg(pid=1, dir_for_me=UNASSIGNED)),
                           clock.monotonic_ms(), offset=5)
    assert len(of(out, CreateLog)) == 2 and c.queued_replica_to_dir_assignments == 2
    out = c.set_ready_to_unfence(clock.monotonic_ms())
    hb = of(out, SendHeartbeat)[0]
    assert hb.want_fence and hb.current_metadata_offset == 5
    c.on_heartbeat_response(NONE, clock.monotonic_ms(), is_caught_up=True, is_fenced=True)
    clock.advance(100)
    [req] = of(c.tick(clock.monotonic_ms()), SendAssignments)
    assert req.broker_epoch == 100 and len(req.assignments) == 2   # epoch of the current registration
    assert c.queued_replica_to_dir_assignments == 2                # in flight still counts
    clock.advance(2000)
    assert of(c.tick(clock.monotonic_ms()), SendHeartbeat)[0].want_fence
    c.on_heartbeat_response(NONE, clock.monotonic_ms(), is_caught_up=True, is_fenced=True)
    clock.advance(5)
    out = c.on_assignments_response(NONE, {a.key: NONE for a in req.assignments}, clock.monotonic_ms())
    assert c.queued_replica_to_dir_assignments == 0
    hb = of(out, SendHeartbeat)[0]           # immediate: queue drained
    assert not hb.want_fence
    out = c.on_heartbeat_response(NONE, clock.monotonic_ms(), is_caught_up=True, is_fenced=False)
    assert events(out, "unfenced")


def test_storage_error_handler_order_and_immediate_heartbeat():
    clock = ManualClock()
    c = core()
    up(c, clock)
    c.apply_metadata(change(reg(pid=0, dir_for_me=D2, leader=2)) + change(reg(pid=1, dir_for_me=D2)),
                     clock.monotonic_ms())
    clock.advance(700)
    out = c.on_storage_error(D2, 5, "append", clock.monotonic_ms())
    kinds = [type(e).__name__ for e in out if not type(e).__name__ == "EmitEvent"]
    assert kinds == ["StopFetcher", "MarkPartitionsOffline", "MarkDirOffline", "SendHeartbeat"]
    assert of(out, StopFetcher)[0].partitions == (tp(p=0),)
    assert of(out, MarkPartitionsOffline)[0] == MarkPartitionsOffline(D2, (tp(p=0), tp(p=1)))
    assert of(out, SendHeartbeat)[0].offline_log_dirs == (D2,)
    assert [e.event for e in events(out)][:2] == ["dir_offline", "dir_failure_reported"]
    assert c.on_storage_error(D2, 5, "fsync", clock.monotonic_ms()) == []   # once


def test_second_failure_while_heartbeat_in_flight_is_coalesced():
    clock = ManualClock()
    c = core()
    up(c, clock)
    out = c.on_storage_error(D2, 5, "append", 10)
    assert len(of(out, SendHeartbeat)) == 1
    out = c.on_storage_error(D3, 5, "append", 11)
    assert not of(out, SendHeartbeat)
    out = c.on_heartbeat_response(NONE, 12, is_caught_up=True)
    assert of(out, SendHeartbeat)[0].offline_log_dirs == (D2, D3)


@pytest.mark.parametrize("dirs,metadata,failing,expect", [
    ((D1,), None, D1, "only log dir"),
    ((D1, D2), D1, D1, "metadata log dir"),
    ((D1, D2), META, META, "metadata log dir"),
])
def test_halt_rules(dirs, metadata, failing, expect):
    clock = ManualClock()
    c = core(dirs=dirs, metadata=metadata)
    up(c, clock)
    out = c.on_storage_error(failing, 5, "write", 1)
    [h] = of(out, Halt)
    assert expect in h.reason and not of(out, SendHeartbeat)
    assert c.halted and c.tick(10_000) == [] and c.next_deadline_ms() is None


def test_last_dir_halts_after_others_reported():
    c = core(dirs=(D1, D2), metadata=META)
    up(c, ManualClock())
    assert not of(c.on_storage_error(D1, 5, "w", 1), Halt)
    assert "all log dirs have failed" in of(c.on_storage_error(D2, 5, "w", 2), Halt)[0].reason


def run(c, clock, until_ms, controller_up=False):
    """Advance time, ticking at each deadline; the controller never answers (timeouts)."""
    out = []
    for _ in range(10_000):
        d = c.next_deadline_ms()
        if d is None or d > until_ms:
            break
        clock.advance(max(0, d - clock.monotonic_ms()))
        out += c.tick(clock.monotonic_ms())
        if c.lifecycle.in_flight:
            out += c.on_controller_request_failed(clock.monotonic_ms())
    clock.advance(max(0, until_ms - clock.monotonic_ms()))
    return out


def test_failure_timeout_shuts_down_leader_when_unreported_D5():
    clock = ManualClock()
    c = core(log_dir_failure_timeout_ms=5000)
    up(c, clock)
    c.apply_metadata(change(reg(dir_for_me=D2, leader=ME)), clock.monotonic_ms())
    clock.advance(1000)
    c.on_storage_error(D2, 5, "append", clock.monotonic_ms())
    c.on_controller_request_failed(clock.monotonic_ms())
    out = run(c, clock, 5999)
    assert not of(out, Shutdown)
    out = run(c, clock, 6000)
    [s] = of(out, Shutdown)
    assert "within 5000 ms" in s.reason and events(out, "failure_timeout_shutdown")


def test_failure_timeout_does_not_shut_down_a_follower_D5():
    clock = ManualClock()
    c = core(log_dir_failure_timeout_ms=5000)
    up(c, clock)
    c.apply_metadata(change(reg(dir_for_me=D2, leader=2)), clock.monotonic_ms())
    c.on_storage_error(D2, 5, "append", clock.monotonic_ms())
    c.on_controller_request_failed(clock.monotonic_ms())
    out = run(c, clock, 20_000)
    assert not of(out, Shutdown) and events(out, "failure_timeout_expired")


def test_failure_timer_cleared_by_ack():
    clock = ManualClock()
    c = core(log_dir_failure_timeout_ms=5000)
    up(c, clock)
    c.apply_metadata(change(reg(dir_for_me=D2, leader=ME)), clock.monotonic_ms())
    c.on_storage_error(D2, 5, "append", 0)
    c.on_heartbeat_response(NONE, 10, is_caught_up=True)
    assert c.failure_timer.pending is None
    clock.advance(6000)
    assert not of(c.tick(6000), Shutdown)


def test_assignment_dropped_when_topic_deleted_KAFKA_17190():
    clock = ManualClock()
    c = core()
    up(c, clock)
    p = reg(dir_for_me=UNASSIGNED)
    c.apply_metadata(change(p), 0)
    assert c.queued_replica_to_dir_assignments == 1
    c.apply_metadata(change(None, old=p), 50)
    out = c.tick(100)
    assert not of(out, SendAssignments) and c.queued_replica_to_dir_assignments == 0
    assert events(out, "assignment_dropped")


def test_create_then_delete_in_flight_stops_retries_and_recreation_sends_only_the_new_id_KAFKA_17190():
    """The topic is deleted while its assignment is in flight: the controller answers
    UNKNOWN_TOPIC_ID (100) for it, and it is dropped at the next send instead of being retried
    forever; the topic re-created under the same name queues an assignment of its new id only."""
    from broker_state_helpers import T2
    clock = ManualClock()
    c = core()
    up(c, clock)
    p = reg(dir_for_me=UNASSIGNED)
    c.apply_metadata(change(p), 0)
    [req] = of(c.tick(100), SendAssignments)
    c.apply_metadata(change(None, old=p), 105)                         # deleted meanwhile
    c.on_assignments_response(NONE, {req.assignments[0].key: 100}, 110)
    for now in (210, 420, 5000):
        assert not of(c.tick(now), SendAssignments)
    assert c.queued_replica_to_dir_assignments == 0
    c.apply_metadata(change(reg(topic_id=T2, dir_for_me=UNASSIGNED)), 5100)   # re-created: new id
    [again] = of(c.tick(5300), SendAssignments)
    assert [a.topic_id for a in again.assignments] == [T2]


def test_assignment_retry_stops_when_no_longer_replica_KAFKA_16886():
    clock = ManualClock()
    c = core()
    up(c, clock)
    p = reg(dir_for_me=UNASSIGNED)
    c.apply_metadata(change(p), 0)
    [req] = of(c.tick(100), SendAssignments)
    c.on_assignments_response(NONE, {req.assignments[0].key: 6}, 110)   # NOT_LEADER_OR_FOLLOWER
    c.apply_metadata(change(reg(replicas=(2, 3, 4), leader=2), old=p), 120)
    assert not of(c.tick(210), SendAssignments) and c.queued_replica_to_dir_assignments == 0


def test_offline_at_start_dir_reported_in_first_heartbeat():
    c = BrokerCore(CoreConfig(broker_id=ME), [LogDirInfo(D1, "/a"), LogDirInfo(D2, "/b", online=False)], META,
                   FixedRng())
    out = c.start(0)
    assert of(out, SendRegistration)[0].log_dirs == (D1, D2)
    out = c.on_registration_response(NONE, 3, 1)
    assert of(out, SendHeartbeat)[0].offline_log_dirs == (D2,)
    assert c.failure_timer.pending is not None


def test_halt_at_start_when_metadata_dir_offline():
    c = BrokerCore(CoreConfig(broker_id=ME), [LogDirInfo(D1, "/a", online=False), LogDirInfo(D2, "/b")], D1,
                   FixedRng())
    out = c.start(0)
    assert of(out, Halt) and not of(out, SendRegistration)


def test_log_creation_failure_marks_partition_offline_KAFKA_16234():
    """RMT.testDeltaToLeaderOrFollowerMarksPartitionOfflineIfLogCantBeCreated: the storage
    error of the creation takes the dir (and the partition) offline; later deltas do not
    re-create it elsewhere."""
    c = core()
    up(c, ManualClock())
    p = reg(dir_for_me=D2, leader=ME)
    out = c.apply_metadata(change(p), 10)
    assert of(out, CreateLog) == [CreateLog(tp(), T1, D2)]
    out = c.on_storage_error(D2, 28, "create_log", 11)         # ENOSPC
    assert of(out, MarkPartitionsOffline)[0].partitions == (tp(),)
    for md in (D2, UNASSIGNED, D3):
        assert not of(c.apply_metadata(change(reg(dir_for_me=md, leader=2, leader_epoch=1), old=p), 20), CreateLog)
    assert c.replicas.offline_partitions() == [tp()]


def test_initial_publish_deletes_strays_first():
    from broker_impl.state.effects import DeleteLog
    from broker_impl.state.replica_manager import ExistingLog
    c = BrokerCore(CoreConfig(broker_id=ME), [LogDirInfo(d, f"/d{i}") for i, d in enumerate((D1, D2))], META,
                   FixedRng(), [ExistingLog(tp("old"), T1, D1)])
    c.start(0)
    out = c.apply_metadata(change(reg(topic_id=uuid_of(3, 300), dir_for_me=UNASSIGNED), topic="new"), 1,
                           initial=True)
    assert out[0] == DeleteLog(tp("old"), T1, D1, stray=True)
    # the stray no longer counts for placement: D1 is empty again
    assert of(out, CreateLog)[0].dir_id == D1


def test_assignments_wait_for_registration():
    """Queued before the registration is answered: not sent with epoch -1 (the controller
    would answer STALE_BROKER_EPOCH and the back-off would delay unfencing, D4)."""
    c = core()
    c.start(0)
    c.apply_metadata(change(reg(dir_for_me=UNASSIGNED)), 0)
    assert c.next_deadline_ms() is None or c.next_deadline_ms() > 10_000   # no busy loop on a past deadline
    assert not of(c.tick(500), SendAssignments)
    out = c.on_registration_response(NONE, 7, 600)
    [req] = of(out, SendAssignments)
    assert req.broker_epoch == 7


# ---------------------------------------------------------------- a dir unreadable at start-up
OLD_D2 = uuid_of(0x7777, 7)   # the id dir /b had before the restart (the controller still names it)


def restarted_without_d2(**cfg):
    """Broker restarted with /b unreadable: no id, so only D1 is a dir of the core."""
    return BrokerCore(CoreConfig(broker_id=ME, **cfg), [LogDirInfo(D1, "/a")], META, FixedRng(),
                      unidentified_offline_dirs=("/b",))


def test_replica_in_a_dir_unreadable_at_start_is_not_recreated_elsewhere_KAFKA_16234():
    """Issue 41: the partition's metadata dir is the old id of a dir that cannot be read at
    start-up. The broker registers without it and never creates the replica in D1, never
    sends an assignment for it, and answers clients that it is offline."""
    clock = ManualClock()
    c = restarted_without_d2()
    out = c.start(clock.monotonic_ms())
    assert of(out, SendRegistration)[0].log_dirs == (D1,)          # only the online dir (the KIP)
    c.on_registration_response(NONE, 100, clock.monotonic_ms())
    c.on_heartbeat_response(NONE, clock.monotonic_ms(), is_caught_up=True)
    p = reg(dir_for_me=OLD_D2, leader=2)
    out = c.apply_metadata(change(p), clock.monotonic_ms())
    assert not of(out, CreateLog) and c.queued_replica_to_dir_assignments == 0
    [offline] = events(out, "replica_offline")
    assert offline.as_dict()["dir_id"] == to_base64(OLD_D2)
    assert c.replicas.is_offline(T1, 0)
    # later changes (ISR, leader, another dir id the broker does not know) change nothing
    for nxt in (reg(dir_for_me=OLD_D2, leader=3, leader_epoch=2), reg(dir_for_me=OLD_D2, leader=2, leader_epoch=3)):
        out = c.apply_metadata(change(nxt, old=p), clock.monotonic_ms())
        assert not of(out, CreateLog) and not events(out, "replica_offline")
        p = nxt
    clock.advance(1000)
    assert not of(c.tick(clock.monotonic_ms()), SendAssignments)
    assert c.replicas.is_offline(T1, 0)


def test_new_partition_is_still_created_while_a_dir_is_unreadable():
    """UNASSIGNED (a partition created while the broker was down) is placed on the online dir:
    it cannot have a log in the unreadable dir."""
    c = restarted_without_d2()
    up(c, ManualClock())
    out = c.apply_metadata(change(reg(dir_for_me=UNASSIGNED)), 5)
    assert of(out, CreateLog) == [CreateLog(tp(), T1, D1)]
    assert not c.replicas.is_offline(T1, 0)


def test_replaced_disk_recreates_replicas_of_the_old_dir_id():
    """The disk was replaced (a freshly formatted dir, new id D2): nothing is offline, so a
    replica assigned to the old id follows the KIP's path for a lost dir: created in the
    least-loaded online dir and the assignment sent."""
    c = core(dirs=(D1, D2))
    up(c, ManualClock())
    out = c.apply_metadata(change(reg(dir_for_me=OLD_D2, leader=2)), 5)
    [create] = of(out, CreateLog)
    assert create.dir_id in (D1, D2)
    assert c.queued_replica_to_dir_assignments == 1
    assert not c.replicas.is_offline(T1, 0)


def test_an_unreadable_dir_counts_for_the_halt_rules():
    """Two configured dirs, one unreadable at start: the other failing is the last online
    dir, not "the only log dir"."""
    c = restarted_without_d2()
    up(c, ManualClock())
    out = c.on_storage_error(D1, 5, "append", 10)
    [halt] = of(out, Halt)
    assert "all log dirs have failed" in halt.reason
