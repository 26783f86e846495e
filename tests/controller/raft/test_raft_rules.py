"""Each rule of the pure Raft state, one voter at a time, manual clock."""

import random

import pytest

from controller_impl.raft import messages as m
from controller_impl.raft.log_shape import LogShape, LogShapeError
from controller_impl.raft.config import RaftConfig, RaftInvariantError
from controller_impl.raft.quorum import RaftState
from controller_impl.raft.quorum_file import ElectionState, QuorumFileError, parse, render

pytestmark = pytest.mark.unit
VOTERS = (1, 2, 3)


def shape(*batches):
    """batches: (epoch, count) in order."""
    s = LogShape()
    for epoch, count in batches:
        s.append(s.end_offset, s.end_offset + count - 1, epoch)
    return s


def node(i=1, log=None, election=None, voters=VOTERS, now=0, **kw):
    cfg = RaftConfig(i, voters, election_timeout_ms=1000, fetch_timeout_ms=2000, election_backoff_max_ms=1000, **kw)
    return RaftState(cfg, log or LogShape(), election or ElectionState(), random.Random(1), now)


def of(fx, cls):
    return [e for e in fx if isinstance(e, cls)]


def make_leader(st, now=0):
    """Drive a voter to leader of the next epoch through pre-vote and vote."""
    fx = st.tick(now + 10_000)
    assert st.role == "prospective"
    for v in st.others:
        fx += st.handle_vote_response(v, m.VoteResponse(m.NONE, st.epoch, -1, True), True, now + 10_000)
    assert st.role == "candidate"
    for v in st.others:
        fx += st.handle_vote_response(v, m.VoteResponse(m.NONE, st.epoch, -1, True), False, now + 10_000)
    assert st.role == "leader"
    return fx


# -- log shape -------------------------------------------------------------------------
def test_log_shape_epochs_and_end_offset_for_epoch():
    s = shape((1, 3), (1, 2), (3, 4))
    assert s.epochs == [(1, 0), (3, 5)] and s.end_offset == 9 and s.last_epoch == 3
    assert s.end_offset_for_epoch(1) == (1, 5)
    assert s.end_offset_for_epoch(2) == (1, 5)     # largest epoch ≤ 2 is 1
    assert s.end_offset_for_epoch(3) == (3, 9)
    assert s.end_offset_for_epoch(0) == (-1, -1)
    assert s.epoch_of(4) == 1 and s.epoch_of(5) == 3 and s.epoch_of(9) is None
    s.truncate_to(5)
    assert s.epochs == [(1, 0)] and s.last_epoch == 1
    with pytest.raises(LogShapeError):
        s.append(7, 8, 2)
    with pytest.raises(LogShapeError):
        s.append(5, 5, 0)  # epochs never go back


def test_log_shape_snapshot_and_drop():
    s = shape((1, 5), (2, 5))
    with pytest.raises(LogShapeError):
        s.drop_before(6)  # no snapshot covers it
    s.snapshot_taken(7, 2)
    s.drop_before(6)
    assert s.start_offset == 6 and s.end_offset_for_epoch(2) == (2, 10)
    s.reset_to_snapshot(20, 4)
    assert (s.start_offset, s.end_offset, s.last_epoch) == (20, 20, 4)
    assert s.end_offset_for_epoch(4) == (4, 20)


def test_quorum_file_round_trip_and_errors():
    st = ElectionState(7, 2, -1, VOTERS)
    assert parse(render(st)) == st
    with pytest.raises(QuorumFileError):
        parse("{}")
    with pytest.raises(QuorumFileError):
        parse('{"leaderEpoch": -1}')


# -- start-up --------------------------------------------------------------------------
def test_restart_roles_from_the_quorum_state_file():
    assert node(election=ElectionState(3, -1, -1)).role == "unattached"
    assert node(election=ElectionState(3, 2, -1)).role == "voted"
    assert node(election=ElectionState(3, 2, 2)).role == "follower"
    assert node(election=ElectionState(3, 1, 1)).role == "resigned"  # was leader: never resumes
    with pytest.raises(ValueError):
        node(i=9)


def test_single_voter_elects_itself_at_once():
    st = node(voters=(1,))
    fx = st.start(0)
    assert st.role == "leader" and st.epoch == 1
    assert of(fx, m.PersistQuorumState)[-1] == m.PersistQuorumState(1, 1, 1)
    assert of(fx, m.AppendEpochStart) == [m.AppendEpochStart(1)]
    st.on_log_appended(0, 0, 1)
    assert st.high_watermark == 0                 # not flushed yet: not committed
    assert st.on_log_flushed(1) == [m.HighWatermark(1)]


# -- Vote ------------------------------------------------------------------------------
def test_vote_granted_once_per_epoch_and_persisted_first():
    st = node(log=shape((1, 5)), election=ElectionState(1, -1, -1))
    resp, fx = st.handle_vote(m.VoteRequest(2, 2, 1, 5), 0)
    assert resp.vote_granted and resp.epoch == 2
    assert of(fx, m.PersistQuorumState)[-1] == m.PersistQuorumState(2, 2, -1)
    assert st.role == "voted"
    resp, _ = st.handle_vote(m.VoteRequest(3, 2, 1, 5), 0)
    assert not resp.vote_granted                  # already voted for 2 in epoch 2
    resp, fx = st.handle_vote(m.VoteRequest(2, 2, 1, 5), 0)
    assert resp.vote_granted and not fx          # the same candidate again: idempotent


@pytest.mark.parametrize("last_epoch,end,granted", [
    (1, 5, True), (1, 6, True), (2, 1, True),     # as long or longer, or a later last epoch
    (1, 4, False), (0, 100, False),               # shorter, or an older last epoch
])
def test_vote_requires_an_up_to_date_log(last_epoch, end, granted):
    st = node(log=shape((1, 5)), election=ElectionState(1, -1, -1))
    resp, _ = st.handle_vote(m.VoteRequest(2, 2, last_epoch, end), 0)
    assert resp.vote_granted is granted
    assert st.epoch == 2                          # the higher epoch is taken either way


def test_vote_refused_from_an_older_epoch_and_from_strangers():
    st = node(election=ElectionState(5, -1, -1))
    resp, fx = st.handle_vote(m.VoteRequest(2, 4, 9, 9), 0)
    assert not resp.vote_granted and resp.error == m.FENCED_LEADER_EPOCH and resp.epoch == 5 and not fx
    resp, _ = st.handle_vote(m.VoteRequest(7, 6, 9, 9), 0)
    assert resp.error == m.INCONSISTENT_VOTER_SET and not resp.vote_granted
    # nor from ourselves (a forged frame must not depose a lone leader)
    lone = node(voters=(1,))
    lone.start(0)
    resp, fx = lone.handle_vote(m.VoteRequest(1, 99, 9, 9), 0)
    assert resp.error == m.INCONSISTENT_VOTER_SET and lone.role == "leader" and not fx
    resp, fx = lone.handle_begin_epoch(m.BeginEpochRequest(1, 99), 0)
    assert resp.error == m.INCONSISTENT_VOTER_SET and lone.role == "leader" and not fx
    resp, fx = lone.handle_end_epoch(m.EndEpochRequest(1, 99), 0)
    assert resp.error == m.INCONSISTENT_VOTER_SET and lone.role == "leader" and not fx


def test_no_vote_while_a_leader_of_the_epoch_is_known():
    st = node(election=ElectionState(4, -1, 3))
    resp, _ = st.handle_vote(m.VoteRequest(2, 4, 9, 9), 0)
    assert not resp.vote_granted and resp.leader_id == 3


def test_pre_vote_changes_nothing_and_is_refused_while_the_leader_is_heard():
    st = node(log=shape((1, 2)), election=ElectionState(1, -1, 2))
    resp, fx = st.handle_vote(m.VoteRequest(3, 2, 1, 2, pre_vote=True), 10)
    assert not resp.vote_granted and not fx and st.epoch == 1   # fetch timer still running
    resp, fx = st.handle_vote(m.VoteRequest(3, 2, 1, 2, pre_vote=True), 2500)
    assert resp.vote_granted and not fx and st.epoch == 1 and st.voted_for == -1
    resp, _ = st.handle_vote(m.VoteRequest(3, 2, 0, 9, pre_vote=True), 2500)
    assert not resp.vote_granted                  # log not up to date


# -- elections -------------------------------------------------------------------------
def test_election_timeout_is_randomized_and_seeded():
    a, b = node(), node()
    assert a.next_deadline_ms() == b.next_deadline_ms()          # same seed, same timeout
    assert 1000 <= a.next_deadline_ms() <= 2000
    fx = a.tick(a.next_deadline_ms() - 1)
    assert a.role == "unattached" and not fx
    fx = a.tick(a.next_deadline_ms())
    assert a.role == "prospective" and a.epoch == 0              # pre-vote: no epoch bump
    sends = of(fx, m.Send)
    assert {s.to for s in sends} == {2, 3} and all(s.message.pre_vote and s.message.candidate_epoch == 1 for s in sends)


def test_pre_vote_then_vote_then_leader_with_begin_epoch():
    st = node(log=shape((1, 3)), election=ElectionState(1, -1, -1))
    fx = make_leader(st)
    assert st.epoch == 2 and st.leader_id == 1
    assert m.PersistQuorumState(2, 1, -1) in fx and m.PersistQuorumState(2, 1, 1) in fx
    assert of(fx, m.AppendEpochStart) == [m.AppendEpochStart(2)]
    assert {s.to for s in of(fx, m.Send) if isinstance(s.message, m.BeginEpochRequest)} == {2, 3}
    assert st.epoch_start_offset == 3


def test_refused_by_a_majority_backs_off_and_retries():
    st = node()
    st.tick(5000)
    st.handle_vote_response(2, m.VoteResponse(m.NONE, 0, -1, False), True, 5000)
    st.handle_vote_response(3, m.VoteResponse(m.NONE, 0, -1, False), True, 5000)
    assert st.role == "prospective"
    deadline = st.next_deadline_ms()
    assert deadline <= 5000 + 1000 + 100          # the backoff, not a whole election timeout
    st.tick(deadline)
    assert st.role == "prospective" and st.epoch == 0


def test_higher_epoch_in_a_response_steps_down():
    st = node()
    make_leader(st)
    fx = st.handle_begin_epoch_response(2, m.EpochResponse(m.NONE, 9, 3), 10_001)
    assert st.role == "follower" and st.epoch == 9 and st.leader_id == 3
    assert of(fx, m.RoleChange)[-1].previous_role == "leader"


def test_candidate_gives_way_to_a_leader_of_its_epoch():
    st = node()
    st.tick(5000)
    st.handle_vote_response(2, m.VoteResponse(m.NONE, 0, -1, True), True, 5000)
    assert st.role == "candidate"
    resp, fx = st.handle_begin_epoch(m.BeginEpochRequest(3, 1), 5001)
    assert resp.error == m.NONE and st.role == "follower" and st.leader_id == 3


def test_begin_epoch_from_an_old_leader_is_fenced():
    st = node(election=ElectionState(5, -1, 2))
    resp, fx = st.handle_begin_epoch(m.BeginEpochRequest(3, 4), 0)
    assert resp.error == m.FENCED_LEADER_EPOCH and st.leader_id == 2 and not fx


def test_end_epoch_lets_the_first_successor_run_at_once():
    st = node(election=ElectionState(5, -1, 2))
    resp, _ = st.handle_end_epoch(m.EndEpochRequest(2, 5, (1, 3)), 100)
    assert resp.error == m.NONE
    st.tick(100)
    assert st.role == "prospective"
    other = node(i=3, election=ElectionState(5, -1, 2))
    other.handle_end_epoch(m.EndEpochRequest(2, 5, (1, 3)), 100)
    other.tick(100)
    assert other.role == "follower"               # second in line waits
    granted, _ = other.handle_vote(m.VoteRequest(1, 6, 0, 0, pre_vote=True), 100)
    assert granted.vote_granted                   # but does not hold the first one back


# -- Fetch, truncation, high watermark -------------------------------------------------
def leader_with_log(*batches):
    st = node(log=shape(*batches), election=ElectionState(max(e for e, _ in batches), -1, -1))
    make_leader(st)
    end = st.log.end_offset
    st.on_log_appended(end, end, st.epoch)        # the epoch-start record
    st.on_log_flushed(end + 1)
    return st


def test_fetch_with_a_diverging_epoch_tells_where_to_truncate():
    st = leader_with_log((1, 5), (3, 5))          # epochs 1: [0,5) 3: [5,10) 4: [10]
    ans, _ = st.handle_fetch(m.FetchRequest(2, st.epoch, 8, 2), 0)
    assert ans.diverging == (1, 5) and not ans.readable
    ans, _ = st.handle_fetch(m.FetchRequest(2, st.epoch, 12, 3), 0)
    assert ans.diverging == (3, 10)               # ahead of our end of epoch 3
    ans, _ = st.handle_fetch(m.FetchRequest(2, st.epoch, 7, 3), 0)
    assert ans.diverging is None and (ans.read_from, ans.read_limit) == (7, 11)


def test_follower_truncates_to_the_smaller_end_and_never_below_its_hw():
    st = node(i=2, log=shape((1, 5), (2, 5)), election=ElectionState(3, -1, 1))
    ok, fx = st.handle_fetch_response(1, m.FetchResponse(m.NONE, 3, 1, 0, diverging=(1, 7)), 0)
    assert not ok and of(fx, m.TruncateTo) == [m.TruncateTo(5)]   # our epoch 1 ends at 5
    assert st.log.end_offset == 5 and st.log.last_epoch == 1
    st2 = node(i=2, log=shape((1, 5), (2, 5)), election=ElectionState(3, -1, 1))
    st2.handle_fetch_response(1, m.FetchResponse(m.NONE, 3, 1, 8), 0)
    assert st2.high_watermark == 8
    with pytest.raises(RaftInvariantError):
        st2.handle_fetch_response(1, m.FetchResponse(m.NONE, 3, 1, 8, diverging=(1, 5)), 0)


def test_commit_needs_a_majority_counting_the_leaders_flush():
    st = leader_with_log((1, 4))                  # end 5 after the epoch start at 4
    assert st.high_watermark == 0                 # nobody else has the epoch start
    _, fx = st.handle_fetch(m.FetchRequest(2, st.epoch, 4, 1), 0)
    assert st.high_watermark == 0 and not of(fx, m.HighWatermark)   # 4 is not past the epoch start
    _, fx = st.handle_fetch(m.FetchRequest(2, st.epoch, 5, st.epoch), 0)
    assert of(fx, m.HighWatermark) == [m.HighWatermark(5)]
    st.on_log_appended(5, 9, st.epoch)            # written, not flushed
    _, fx = st.handle_fetch(m.FetchRequest(3, st.epoch, 10, st.epoch), 0)
    _, fx2 = st.handle_fetch(m.FetchRequest(2, st.epoch, 10, st.epoch), 0)
    assert st.high_watermark == 10                # two followers hold it: a majority without the leader
    st.on_log_appended(10, 14, st.epoch)
    assert st.on_log_flushed(15) == []            # the leader alone: 1 of 3
    _, fx = st.handle_fetch(m.FetchRequest(3, st.epoch, 12, st.epoch), 0)
    assert st.high_watermark == 12


def test_observers_read_committed_records_only():
    st = leader_with_log((1, 4))
    st.handle_fetch(m.FetchRequest(2, st.epoch, 5, st.epoch), 0)
    st.on_log_appended(5, 9, st.epoch)
    st.on_log_flushed(10)
    ans, _ = st.handle_fetch(m.FetchRequest(-1, -1, 0, -1), 0)
    assert (ans.read_from, ans.read_limit) == (0, 5)
    ans, _ = st.handle_fetch(m.FetchRequest(-1, -1, 6, -1), 0)
    assert ans.error == m.OFFSET_OUT_OF_RANGE


def test_fetch_epoch_checks_and_non_leaders():
    st = leader_with_log((1, 4))
    assert st.handle_fetch(m.FetchRequest(2, st.epoch - 1, 0, -1), 0)[0].error == m.FENCED_LEADER_EPOCH
    assert st.handle_fetch(m.FetchRequest(2, st.epoch + 1, 0, -1), 0)[0].error == m.UNKNOWN_LEADER_EPOCH
    f = node(i=2, election=ElectionState(3, -1, 1))
    ans, _ = f.handle_fetch(m.FetchRequest(-1, -1, 0, -1), 0)
    assert ans.error == m.NOT_LEADER_OR_FOLLOWER and ans.leader_id == 1


def test_fetch_below_the_log_start_points_to_the_snapshot():
    log = shape((1, 10))
    log.snapshot_taken(8, 1)
    log.drop_before(8)
    st = node(log=log, election=ElectionState(1, -1, -1))
    make_leader(st)
    ans, _ = st.handle_fetch(m.FetchRequest(2, st.epoch, 3, 1), 0)
    assert ans.snapshot_id == (8, 1)
    ans, _ = st.handle_fetch(m.FetchRequest(-1, -1, 0, -1), 0)
    assert ans.snapshot_id == (8, 1)
    f = node(i=2, election=ElectionState(st.epoch, -1, 1))
    ok, fx = f.handle_fetch_response(1, m.FetchResponse(m.NONE, st.epoch, 1, 8, snapshot_id=(8, 1)), 0)
    assert not ok and of(fx, m.FetchSnapshot) == [m.FetchSnapshot(1, (8, 1))]
    assert f.on_snapshot_installed(8, 1) == [m.HighWatermark(8)]
    assert f.next_fetch() == m.FetchRequest(2, st.epoch, 8, 1)


def test_follower_hw_is_bounded_by_its_flushed_log():
    st = node(i=2, election=ElectionState(1, -1, 1))
    ok, fx = st.handle_fetch_response(1, m.FetchResponse(m.NONE, 1, 1, 5), 0)
    assert ok and not of(fx, m.HighWatermark)
    st.on_log_appended(0, 2, 1)
    assert st.on_log_flushed(3) == [m.HighWatermark(3)]
    st.on_log_appended(3, 9, 1)
    assert st.on_log_flushed(10) == [m.HighWatermark(5)]


def test_fetch_timeout_starts_a_pre_vote():
    st = node(i=2, election=ElectionState(1, -1, 1))
    st.handle_fetch_response(1, m.FetchResponse(m.NONE, 1, 1, 0), 100)
    st.tick(2099)
    assert st.role == "follower"
    st.tick(2100)
    assert st.role == "prospective" and st.leader_id == -1 and st.epoch == 1


def test_check_quorum_resigns_a_leader_nobody_fetches_from():
    st = leader_with_log((1, 1))
    t = 10_000
    st.handle_fetch(m.FetchRequest(2, st.epoch, 2, st.epoch), t + 2000)
    st.tick(t + 4999)
    assert st.role == "leader"
    fx = st.tick(t + 2000 + 3000)
    assert st.role == "resigned"
    ends = [s.message for s in of(fx, m.Send)]
    assert all(isinstance(e, m.EndEpochRequest) for e in ends) and ends[0].preferred_successors == (2, 3)


def test_graceful_resign_sends_end_epoch():
    st = leader_with_log((1, 1))
    fx = st.resign(20_000)
    assert st.role == "resigned" and len(of(fx, m.Send)) == 2
