"""The I/O edge of one voter: the pure :class:`RaftState` driven by sockets, the disk and a timer.

- **Effects** of the state are carried out in order, synchronously where the next one
  depends on it: ``PersistQuorumState`` writes the quorum-state file durably before any
  answer or request that follows it leaves; ``TruncateTo`` cuts the log; ``HighWatermark``
  moves the log's commit point and tells the owner (``on_commit``); ``RoleChange`` and
  ``AppendEpochStart`` go to the owner too (the controller builds or drops its state
  machine there); ``Send`` starts an RPC task; ``FetchSnapshot`` is done by the fetch loop.
- **Leader writes**: :meth:`append` writes one batch at once without syncing and wakes the
  followers' parked Fetches; a flusher task fdatasyncs in a worker thread and reports the
  flushed end, so every request that arrives during one fsync shares the next one (group
  commit), and followers copy the batch while the leader syncs it.
- **Follower**: one Fetch at a time to the leader (long-polled there), the batches written
  then synced before the next Fetch (whose offset tells the leader what we hold).
- **Peers**: two connections per peer (the server answers a connection's requests in
  order): one for Vote/Begin/EndQuorumEpoch, one for Fetch and FetchSnapshot.

The parts: the follower's fetch loop (:class:`~controller_impl.runtime.raft_follower.FollowerFetch`,
behind the :class:`~controller_impl.runtime.raft_host.FollowerHost` protocol this node
implements) and the peer connections (:mod:`~controller_impl.runtime.raft_peers`); the
owner (:class:`~controller_impl.runtime.raft_host.RaftOwner`) is told the effects.

A failure to write the metadata log or the quorum-state file is fatal (``on_fatal``).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import TYPE_CHECKING, Any, Callable

from kafka_common.config import ServerConfig
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError
from kafka_runtime.fsutil import atomic_write

from controller_impl.log import MetadataLog
from controller_impl.log.snapshots import SnapshotStore
from controller_impl.raft import messages as m
from controller_impl.raft import quorum_file
from controller_impl.raft.config import LEADER, RaftConfig
from controller_impl.raft.log_shape import LogShape
from controller_impl.raft.quorum import RaftState
from controller_impl.runtime import raft_wire as rw
from controller_impl.runtime.raft_follower import SNAPSHOT_CHUNK, FollowerFetch
from controller_impl.runtime.raft_peers import PeerConnection, raft_sasl

if TYPE_CHECKING:
    from controller_impl.runtime.raft_host import RaftOwner


class RaftNode:
    """One voter: its :class:`RaftState` driven by sockets, the disk and a timer; the one
    :class:`~controller_impl.runtime.raft_host.FollowerHost`."""

    def __init__(self, cfg: ServerConfig, cluster_id: str, log: MetadataLog, snapshots: SnapshotStore, *,
                 clock, events, log_line: Callable[[str], None], owner: RaftOwner,
                 rng: random.Random | None = None) -> None:
        self.cfg = cfg
        self.cluster_id = cluster_id
        self.log = log
        self.snapshots = snapshots
        self.clock = clock
        self.events = events
        self._log_line = log_line
        self.owner = owner
        self.rng = rng or random.Random(random.SystemRandom().random())
        self.node_id = cfg.node_id
        self.voters = {v.node_id: v for v in cfg.controller_quorum_voters}
        self.quorum_path = os.path.join(cfg.metadata_log_dir, quorum_file.FILE_NAME)
        self.state: RaftState | None = None
        self._peers: dict[tuple[int, str], PeerConnection] = {}
        self._tasks: list[asyncio.Task] = []
        self._rpc_tasks: set[asyncio.Task] = set()
        self._data_event = asyncio.Event()      # appended or committed: wake parked Fetches
        self._role_event = asyncio.Event()
        self._flush_needed = asyncio.Event()
        # a flush (worker thread) never overlaps a truncation or a snapshot reset of the log
        self.io_lock = asyncio.Lock()
        self._stopped = False
        self.stats = {"fsyncs": 0, "batches": 0}
        self.follower = FollowerFetch(self)

    # ------------------------------------------------------------------ FollowerHost
    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def last_append_ms(self) -> int:
        """When a follower last appended fetched records."""
        return self.follower.last_append_ms

    def log_line(self, msg: str) -> None:
        self._log_line(msg)

    async def role_changed(self) -> None:
        await self._role_event.wait()

    # ------------------------------------------------------------------ life cycle
    def open_state(self) -> None:
        election = quorum_file.ElectionState()
        try:
            with open(self.quorum_path, encoding="utf-8") as f:
                election = quorum_file.parse(f.read(), source=self.quorum_path)
        except FileNotFoundError:
            pass
        if election.voters and set(election.voters) != set(self.voters):
            self._log_line(f"quorum-state names voters {list(election.voters)}; "
                           f"controller.quorum.voters has {sorted(self.voters)} (the config wins)")
        log = self.log
        shape = LogShape(start_offset=log.start_offset, end_offset=log.end_offset,
                         epochs=[(e, max(o, log.start_offset)) for e, o in log.epoch_starts],
                         snapshot=self.snapshots.latest())
        cfg = self.cfg
        rcfg = RaftConfig(cfg.node_id, tuple(sorted(self.voters)),
                          election_timeout_ms=cfg.controller_quorum_election_timeout_ms,
                          fetch_timeout_ms=cfg.controller_quorum_fetch_timeout_ms,
                          election_backoff_max_ms=cfg.controller_quorum_election_backoff_max_ms)
        self.state = RaftState(rcfg, shape, election, self.rng, self.clock.monotonic_ms())
        self.log.high_watermark = self.state.high_watermark

    async def start(self) -> None:
        assert self.state is not None
        self.execute(self.state.start(self.clock.monotonic_ms()))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._ticker(), name="raft-tick"),
                       loop.create_task(self.follower.run(), name="raft-fetch"),
                       loop.create_task(self._flusher(), name="raft-flush")]

    async def stop(self, *, resign: bool = True) -> None:
        if resign and self.state is not None and self.state.is_leader:
            self.execute(self.state.resign(self.clock.monotonic_ms()))
            if self._rpc_tasks:  # give the EndQuorumEpoch requests a moment to leave
                await asyncio.wait(list(self._rpc_tasks), timeout=0.3)
        self._stopped = True
        for t in self._tasks + list(self._rpc_tasks):
            t.cancel()
        for t in self._tasks + list(self._rpc_tasks):
            try:
                await t
            except BaseException:
                pass
        for p in self._peers.values():
            await p.close()

    # ------------------------------------------------------------------ effects
    def execute(self, fx: list[m.Effect]) -> None:
        for e in fx:
            if isinstance(e, m.PersistQuorumState):
                self._persist(e)
            elif isinstance(e, m.Send):
                self._spawn(self._rpc(e.to, e.message))
            elif isinstance(e, m.HighWatermark):
                self.log.commit(min(e.offset, self.log.end_offset))
                self._data_event.set()
                self.owner.on_commit(e.offset)
            elif isinstance(e, m.TruncateTo):
                self.log.truncate_to(e.offset)
                self.events.emit("metadata_log_truncated", reason="diverging epoch", position=e.offset,
                                 segment="", bytes=0, removed_segments=[])
            elif isinstance(e, m.RoleChange):
                self._log_line(f"raft: {e.previous_role} -> {e.role} in epoch {e.epoch}"
                               + (f", leader {e.leader_id}" if e.leader_id >= 0 else ""))
                self.events.emit("raft_role", role=e.role, epoch=e.epoch, leader_id=e.leader_id,
                                 previous_role=e.previous_role)
                self._role_event.set()
                self._role_event = asyncio.Event()
                self.owner.on_role_change(e)
            elif isinstance(e, m.AppendEpochStart):
                self.owner.on_epoch_start(e.epoch)
            elif isinstance(e, m.FetchSnapshot):
                self.follower.snapshot_wanted = (e.leader_id, e.snapshot_id)

    def _persist(self, e: m.PersistQuorumState) -> None:
        state = quorum_file.ElectionState(e.epoch, e.voted_for, e.leader_id, tuple(sorted(self.voters)))
        try:
            atomic_write(self.quorum_path, quorum_file.render(state).encode())
        except OSError as exc:
            self.owner.on_fatal(f"cannot write {self.quorum_path}: {exc}")
            raise

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._rpc_tasks.add(task)
        task.add_done_callback(self._rpc_tasks.discard)

    def peer(self, node_id: int, purpose: str) -> PeerConnection:
        key = (node_id, purpose)
        p = self._peers.get(key)
        if p is None:
            v = self.voters[node_id]
            p = self._peers[key] = PeerConnection(v.host, v.port, f"controller-{self.node_id}-{purpose}",
                                                  raft_sasl(self.cfg), self.cfg.socket_request_max_bytes)
        return p

    async def _rpc(self, to: int, msg: Any) -> None:
        timeout_s = max(0.05, self.cfg.controller_quorum_election_timeout_ms / 2000)
        try:
            if isinstance(msg, m.VoteRequest):
                resp = rw.parse_vote_response(await self.peer(to, "rpc").request(
                    rw.vote_request(self.cluster_id, msg, to), timeout_s))
                self._act(lambda st, now: st.handle_vote_response(to, resp, msg.pre_vote, now))
            elif isinstance(msg, m.BeginEpochRequest):
                resp = rw.parse_epoch_response(await self.peer(to, "rpc").request(
                    rw.begin_request(self.cluster_id, msg), timeout_s))
                self._act(lambda st, now: st.handle_begin_epoch_response(to, resp, now))
            elif isinstance(msg, m.EndEpochRequest):
                await self.peer(to, "rpc").request(rw.end_request(self.cluster_id, msg), timeout_s)
        except (ClientError, OSError, rw.RaftWireError, asyncio.TimeoutError):
            pass  # the state resends on its timers

    def _act(self, fn) -> None:
        if self.state is not None and not self._stopped:
            self.execute(fn(self.state, self.clock.monotonic_ms()))

    # ------------------------------------------------------------------ timers
    async def _ticker(self) -> None:
        while True:
            st = self.state
            now = self.clock.monotonic_ms()
            self.execute(st.tick(now))
            wait_ms = min(max(st.next_deadline_ms() - self.clock.monotonic_ms(), 2), 50)
            await asyncio.sleep(wait_ms / 1000)

    # ------------------------------------------------------------------ leader writes
    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.role == LEADER

    def append(self, records: list[Any]) -> tuple[int, int]:
        """Write records as one batch of the current epoch (leader only); durable later."""
        st = self.state
        assert st is not None and st.role == LEADER
        first, last = self.log.write_batch(records, leader_epoch=st.epoch, timestamp_ms=time.time_ns() // 1_000_000)
        return self._appended(first, last)

    def append_encoded(self, data: bytes) -> tuple[int, int]:
        """Write one batch encoded elsewhere (at ``log.end_offset``, this epoch; leader only)."""
        st = self.state
        assert st is not None and st.role == LEADER
        first, last = self.log.append_batch(data, sync=False)
        return self._appended(first, last)

    def _appended(self, first: int, last: int) -> tuple[int, int]:
        st = self.state
        st.on_log_appended(first, last, st.epoch)
        self.stats["batches"] += 1
        self._data_event.set()
        self._flush_needed.set()
        return first, last

    async def _flusher(self) -> None:
        while True:
            await self._flush_needed.wait()
            self._flush_needed.clear()
            try:
                async with self.io_lock:
                    end = await asyncio.to_thread(self.log.flush)
            except OSError as exc:
                self.owner.on_fatal(f"cannot write the metadata log: {exc}")
                return
            self.stats["fsyncs"] += 1
            if self.state is not None:
                self.execute(self.state.on_log_flushed(end))

    def wake_fetchers(self) -> None:
        self._data_event.set()

    async def wait_for_data(self, timeout_s: float) -> None:
        ev = self._data_event
        if ev.is_set():
            ev.clear()
        try:
            await asyncio.wait_for(ev.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    # ------------------------------------------------------------------ serving voters
    def handle_vote(self, request: Any, version: int) -> Any:
        req = rw.parse_vote_request(request)
        resp, fx = self.state.handle_vote(req, self.clock.monotonic_ms())
        self.execute(fx)
        return rw.vote_response(resp, version)

    def handle_begin(self, request: Any, version: int) -> Any:
        resp, fx = self.state.handle_begin_epoch(rw.parse_begin_request(request), self.clock.monotonic_ms())
        self.execute(fx)
        return rw.epoch_response(rw.BEGIN, resp, version)

    def handle_end(self, request: Any, version: int) -> Any:
        resp, fx = self.state.handle_end_epoch(rw.parse_end_request(request), self.clock.monotonic_ms())
        self.execute(fx)
        return rw.epoch_response(rw.END, resp, version)

    async def answer_fetch(self, freq: m.FetchRequest, max_wait_ms: int) -> m.FetchAnswer:
        """The leader's answer to a Fetch (voter or observer), parked up to ``max_wait_ms``
        while there is nothing new to read and the high watermark does not move."""
        deadline = time.monotonic() + max_wait_ms / 1000
        start_hw = self.state.high_watermark
        while True:
            ans, fx = self.state.handle_fetch(freq, self.clock.monotonic_ms())
            self.execute(fx)
            remaining = deadline - time.monotonic()
            if (ans.error != ErrorCode.none or ans.diverging or ans.snapshot_id or ans.readable
                    or ans.high_watermark != start_hw or remaining <= 0 or self._stopped):
                return ans
            await self.wait_for_data(remaining)

    def handle_fetch_snapshot(self, request: Any) -> Any:
        st = self.state
        epoch, snapshot_id, position = rw.parse_fetch_snapshot_request(request)
        if st.role != LEADER:
            return rw.fetch_snapshot_response(ErrorCode.not_leader_or_follower, snapshot_id, st.leader_id,
                                              st.epoch, 0, position, b"")
        if epoch >= 0 and epoch != st.epoch:
            code = ErrorCode.fenced_leader_epoch if epoch < st.epoch else ErrorCode.unknown_leader_epoch
            return rw.fetch_snapshot_response(code, snapshot_id, st.leader_id, st.epoch, 0, position, b"")
        if snapshot_id not in self.snapshots.ids():
            return rw.fetch_snapshot_response(ErrorCode.snapshot_not_found, snapshot_id, st.leader_id,
                                              st.epoch, 0, position, b"")
        size = self.snapshots.size(snapshot_id)
        if position < 0 or position > size:
            return rw.fetch_snapshot_response(ErrorCode.position_out_of_range, snapshot_id, st.leader_id,
                                              st.epoch, size, position, b"")
        max_bytes = max(1, min(SNAPSHOT_CHUNK, int(request.max_bytes) if request.max_bytes > 0 else SNAPSHOT_CHUNK))
        data = self.snapshots.read_range(snapshot_id, position, max_bytes)
        return rw.fetch_snapshot_response(ErrorCode.none, snapshot_id, st.leader_id, st.epoch, size, position, data)

    def describe(self, version: int) -> Any:
        st = self.state
        if st.role != LEADER:
            return rw.describe_response(version, ErrorCode.not_leader_or_follower, st.leader_id, st.epoch,
                                        st.high_watermark, [])
        wall_ms = self.clock.wall_ns() // 1_000_000
        now = self.clock.monotonic_ms()
        voters = [(self.node_id, st.flushed_end, wall_ms, wall_ms)]
        for v in st.others:
            end = st.replica_end.get(v, -1)
            seen = st.replica_fetch_ms.get(v)
            ts = wall_ms - (now - seen) if seen is not None else -1
            voters.append((v, end, ts, ts if end >= st.high_watermark else -1))
        return rw.describe_response(version, ErrorCode.none, st.leader_id, st.epoch, st.high_watermark, voters)
