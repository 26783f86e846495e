"""A following voter's side of replication: one Fetch at a time to the leader (long-polled
there), the batches appended then synced before the next Fetch (whose offset tells the
leader what we hold), and a snapshot fetched in chunks when the leader's log starts past ours.

:class:`FollowerFetch` is a part of :class:`~controller_impl.runtime.raft_node.RaftNode`
behind the :class:`~controller_impl.runtime.raft_host.FollowerHost` protocol (state, log,
snapshots, peers, the I/O lock, the owner); it owns the snapshot wanted from the leader
and when fetched records were last appended."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError

from controller_impl.runtime import raft_wire as rw

if TYPE_CHECKING:
    from controller_impl.runtime.raft_host import FollowerHost

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 << 20
SNAPSHOT_CHUNK = 4 << 20


class FollowerFetch:
    """The follower's fetch loop of one voter (module docstring)."""

    def __init__(self, node: FollowerHost) -> None:
        self.node = node
        # (leader, snapshot id): the state's FetchSnapshot effect, done by the fetch loop
        self.snapshot_wanted: tuple[int, tuple[int, int]] | None = None
        self.last_append_ms = 0  # when fetched records were last appended

    async def run(self) -> None:
        """The fetch loop: one Fetch at a time to the leader while following."""
        node = self.node
        while True:
            st = node.state
            req = st.next_fetch()
            if req is None:
                await node.role_changed()
                continue
            leader = st.leader_id
            if self.snapshot_wanted is not None:
                async with node.io_lock:
                    await self._fetch_snapshot(*self.snapshot_wanted)
                continue
            try:
                raw = await node.peer(leader, "fetch").request(
                    rw.voter_fetch_request(node.cluster_id, req, FETCH_MAX_WAIT_MS, FETCH_MAX_BYTES),
                    FETCH_MAX_WAIT_MS / 1000 + max(1.0, node.cfg.controller_quorum_fetch_timeout_ms / 1000))
                resp, records = rw.parse_fetch_response(raw)
            except (ClientError, OSError, rw.RaftWireError, asyncio.TimeoutError):
                await asyncio.sleep(0.05)
                continue
            if node.stopped:
                return
            async with node.io_lock:
                now = node.clock.monotonic_ms()
                accept, fx = st.handle_fetch_response(leader, resp, now)
                node.execute(fx)
                if resp.error != ErrorCode.none:
                    await asyncio.sleep(0.05)
                    continue
                if accept and records and self._append_fetched(records):
                    try:
                        end = await asyncio.to_thread(node.log.flush)
                    except OSError as exc:
                        node.owner.on_fatal(f"cannot write the metadata log: {exc}")
                        return
                    node.execute(st.on_log_flushed(end))

    def _append_fetched(self, records: bytes) -> bool:
        """The fetched batches appended as they came (raw bytes, one write); decoded only
        when committed, by the owner's apply."""
        node = self.node
        st = node.state
        written = node.log.append_fetched(records)
        for base, last, epoch in written:
            st.on_log_appended(base, last, epoch)
        if written:
            self.last_append_ms = node.clock.monotonic_ms()
            node.stats["batches"] += len(written)
        return bool(written)

    async def _fetch_snapshot(self, leader: int, snapshot_id: tuple[int, int]) -> None:
        node = self.node
        st = node.state
        chunks: list[bytes] = []
        position = 0
        try:
            while True:
                raw = await node.peer(leader, "fetch").request(
                    rw.fetch_snapshot_request(node.cluster_id, node.node_id, st.epoch, snapshot_id, position,
                                              SNAPSHOT_CHUNK), 30.0)
                error, size, pos, _, data = rw.parse_fetch_snapshot_response(raw)
                if error != ErrorCode.none or pos != position:
                    raise rw.RaftWireError(f"FetchSnapshot: {error.name} at {pos}")
                chunks.append(data)
                position += len(data)
                if position >= size or not data:
                    break
        except (ClientError, OSError, rw.RaftWireError, asyncio.TimeoutError) as exc:
            node.log_line(f"FetchSnapshot {snapshot_id} from {leader} failed: {exc}")
            self.snapshot_wanted = None
            await asyncio.sleep(0.1)
            return
        self.snapshot_wanted = None
        blob = b"".join(chunks)
        if st is not node.state or st.leader_id != leader:
            return
        try:
            node.snapshots.write(snapshot_id, blob)
            node.log.reset_to(snapshot_id[0])
        except OSError as exc:
            node.owner.on_fatal(f"cannot write the metadata log: {exc}")
            return
        node.owner.on_snapshot_installed(snapshot_id, blob)
        node.events.emit("snapshot_installed", end_offset=snapshot_id[0], epoch=snapshot_id[1], bytes=len(blob))
        node.execute(st.on_snapshot_installed(*snapshot_id))
