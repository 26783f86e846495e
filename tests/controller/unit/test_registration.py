"""Registration (behaviour §2, D2, §6) and UnregisterBroker."""

import pytest

from kafka_common.ids import LOST, MIGRATING, UNASSIGNED, uuid_of
from kafka_common.metadata import records as r

from controller_harness import Harness, code, dir_id as d, kinds

pytestmark = pytest.mark.unit


def test_new_broker_gets_epoch_next_offset_and_is_fenced():
    h = Harness()
    h.register(9, [d(9, 1)])  # offset 0
    res, resp = h.register(1, [d(1, 1), d(1, 2)])
    assert code(resp) == 0 and kinds(res) == ["RegisterBrokerRecord"]
    assert resp.broker_epoch == 1 == h.image.register_offsets[1]
    reg = h.image.brokers[1]
    assert reg.fenced and reg.epoch == 1 and set(reg.log_dirs) == {d(1, 1), d(1, 2)}
    assert res.records[0].__version__ == 3 and res.records[0].end_points[0].port == 9101


@pytest.mark.parametrize("dirs,why", [
    ([], "no log directories"),
    ([UNASSIGNED], "reserved"),
    ([LOST], "reserved"),
    ([MIGRATING], "reserved"),
    ([uuid_of(0, 99)], "reserved"),
    ([uuid_of(0, -5)], "reserved"),  # negative lsb is reserved too (D1)
    ([d(1, 1), d(1, 1)], "listed twice"),
])
def test_d2_invalid_log_dirs_are_invalid_request_42(dirs, why):
    h = Harness()
    res, resp = h.register(1, dirs)
    assert code(resp) == 42 and res.records == ()
    assert why in h.state.problems[-1]
    assert 1 not in h.image.brokers


def test_d2_dir_of_another_registered_broker_is_refused_even_if_fenced():
    h = Harness()
    h.register(1, [d(1, 1)])
    res, resp = h.register(2, [d(2, 1), d(1, 1)])
    assert code(resp) == 42 and res.records == () and "broker 1" in h.state.problems[-1]
    # Re-registering with your own dirs is fine (CCMT testRegisterWithDuplicateDirectoryId).
    _, resp = h.register(1, [d(1, 1)])
    assert code(resp) == 0


def test_dir_freed_by_unregister_can_be_taken():
    h = Harness()
    h.register(1, [d(1, 1)])
    res, resp = h.unregister(1)
    assert code(resp) == 0 and kinds(res) == ["UnregisterBrokerRecord"]
    _, resp = h.register(2, [d(1, 1)])
    assert code(resp) == 0


def test_unregister_unknown_broker_is_102():
    h = Harness()
    res, resp = h.unregister(5)
    assert code(resp) == 102 and res.records == ()


def test_wrong_cluster_id_is_104():
    h = Harness()
    res, resp = h.register(1, [d(1, 1)], cluster_id="other")
    assert code(resp) == 104 and res.records == ()


def test_new_incarnation_while_old_session_live_is_101():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    res, resp = h.register(1, [d(1, 1)], incarnation=uuid_of(77, 77))
    assert code(resp) == 101 and res.records == ()
    # Once the session has expired it is accepted (new epoch, fenced).
    h.advance(9001)
    h.tick()
    _, resp = h.register(1, [d(1, 1)], incarnation=uuid_of(77, 77))
    assert code(resp) == 0 and resp.broker_epoch == h.image.register_offsets[1]


def test_same_incarnation_keeps_epoch_and_fenced_state_replaces_dirs():
    # KAFKA-16757 / KAFKA-16952 (CCMT testReRegistrationAndBrokerEpoch).
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    epoch = h.epoch(1)
    h.register(5, [d(5, 1)])  # moves the log end on
    res, resp = h.register(1, [d(1, 1), d(1, 3)])
    assert code(resp) == 0 and resp.broker_epoch == epoch
    reg = h.image.brokers[1]
    assert reg.epoch == epoch and not reg.fenced and set(reg.log_dirs) == {d(1, 1), d(1, 3)}
    assert h.image.dir_owner(d(1, 2)) is None


def test_new_incarnation_gets_new_epoch_fenced_and_leaves_isrs():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", 1, 2)
    tid = t.topic_id
    assert h.part(tid).isr == (1, 2) and h.part(tid).leader == 1
    old_epoch = h.epoch(1)
    h.advance(9001)
    h.heartbeat(2)  # broker 2 stays alive
    res, resp = h.register(1, [d(1, 1)], incarnation=uuid_of(8, 8))
    assert code(resp) == 0 and resp.broker_epoch > old_epoch
    assert kinds(res) == ["PartitionChangeRecord", "RegisterBrokerRecord"]
    p = h.part(tid)
    assert p.isr == (2,) and p.leader == 2 and h.image.brokers[1].fenced


def test_registration_v2_without_log_dirs_field_is_42():
    from kio.schema.broker_registration.v1 import request as br1
    h = Harness()
    req = br1.BrokerRegistrationRequest(broker_id=1, cluster_id="jbodlab-cluster-0001",
                                        incarnation_id=uuid_of(1, 1), listeners=(), features=(), rack=None)
    res = h.state.handle_broker_registration(req, 0)
    assert code(res.response) == 42 and res.records == ()


def test_records_use_written_versions():
    h = Harness()
    res, _ = h.register(1, [d(1, 1)])
    assert isinstance(res.records[0], r.RegisterBrokerRecord)
    assert r.encode_record(res.records[0])[:3] == b"\x01\x00\x03"


def test_same_incarnation_dropping_a_dir_leaves_the_isrs_there():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2], [1, 2]])
    tid = t.topic_id
    h.assign(1, {d(1, 1): [(tid, 0)], d(1, 2): [(tid, 1)]})
    res, resp = h.register(1, [d(1, 1)])
    assert code(resp) == 0 and kinds(res) == ["PartitionChangeRecord", "RegisterBrokerRecord"]
    assert h.part(tid, 1).leader == 2 and h.part(tid, 1).isr == (2,)
    assert h.part(tid, 0).leader == 1
