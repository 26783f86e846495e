"""The broker's view of which controller is active (pure parts of the controller channel)."""

import pytest

from broker_impl.runtime.controller_channel import ControllerLocator, metadata_leader_hint, not_controller
from kafka_common import wire
from kafka_common.wire import ErrorCode

pytestmark = pytest.mark.unit


def test_failure_moves_to_the_next_voter_and_a_named_leader_is_taken():
    loc = ControllerLocator([(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    assert loc.current()[0] == 1
    loc.failed(2)            # not the current one: nothing moves
    assert loc.current()[0] == 1
    loc.failed(1)
    assert loc.current()[0] == 2
    assert loc.leader_is(1) and loc.current()[0] == 1
    assert not loc.leader_is(9) and loc.current()[0] == 1
    loc.failed(1)
    loc.failed(2)
    loc.failed(3)
    assert loc.current()[0] == 1  # round and round
    lone = ControllerLocator([(1, "a", 1)])
    lone.failed(1)
    assert lone.current()[0] == 1 and lone.changes == 0


def test_not_controller_and_the_leader_hint_are_read_from_responses():
    hb = wire.error_response(63, 1, ErrorCode.not_controller)
    assert not_controller(hb)
    assert not not_controller(wire.error_response(63, 1, ErrorCode.stale_broker_epoch))
    mod = wire.response_module(19, 7)
    ct = wire.make(wire.response_class(19, 7), throttle_time=__import__("datetime").timedelta(0), topics=(
        wire.make(mod.CreatableTopicResult, name="t", topic_id=None, error_code=ErrorCode.not_controller,
                  error_message=None, num_partitions=-1, replication_factor=-1, configs=None),))
    assert not_controller(ct)
    fmod = wire.response_module(1, 13)
    part = wire.make(fmod.PartitionData, partition_index=0, error_code=ErrorCode.not_leader_or_follower,
                     high_watermark=0, current_leader=fmod.LeaderIdAndEpoch(leader_id=3, leader_epoch=5),
                     aborted_transactions=None, records=b"")
    resp = wire.make(wire.response_class(1, 13), throttle_time=__import__("datetime").timedelta(0),
                     error_code=ErrorCode.none, session_id=0,
                     responses=(fmod.FetchableTopicResponse(topic_id=None, partitions=(part,)),))
    assert metadata_leader_hint(resp) == 3
    assert metadata_leader_hint(hb) is None
