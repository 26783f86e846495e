"""A following voter's side of replication: one Fetch at a time to the leader (long-polled
there), the batches appended then synced before the next Fetch (whose offset tells the
leader what we hold), and a snapshot fetched in chunks when the leader's log starts past ours.

:class:`FollowerFetch` is mixed into :class:`~controller_impl.runtime.raft_node.RaftNode`
and works on its attributes (state, log, snapshots, peers, the I/O lock, the owner)."""

from __future__ import annotations

import asyncio

from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError

from controller_impl.runtime import raft_wire as rw

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 << 20
SNAPSHOT_CHUNK = 4 << 20


class FollowerFetch:
    """The follower's fetch loop of :class:`~controller_impl.runtime.raft_node.RaftNode`."""

    async def _fetch_loop(self) -> None:
        while True:
            st = self.state
            req = st.next_fetch()
            if req is None:
                await self._role_event.wait()
                continue
            leader = st.leader_id
            if self._snapshot_wanted is not None:
                async with self.io_lock:
                    await self._fetch_snapshot(*self._snapshot_wanted)
                continue
            try:
                raw = await self._peer(leader, "fetch").request(
                    rw.voter_fetch_request(self.cluster_id, req, FETCH_MAX_WAIT_MS, FETCH_MAX_BYTES),
                    FETCH_MAX_WAIT_MS / 1000 + max(1.0, self.cfg.controller_quorum_fetch_timeout_ms / 1000))
                resp, records = rw.parse_fetch_response(raw)
            except (ClientError, OSError, rw.RaftWireError, asyncio.TimeoutError):
                await asyncio.sleep(0.05)
                continue
            if self._stopped:
                return
            async with self.io_lock:
                now = self.clock.monotonic_ms()
                accept, fx = st.handle_fetch_response(leader, resp, now)
                self.execute(fx)
                if resp.error != ErrorCode.none:
                    await asyncio.sleep(0.05)
                    continue
                if accept and records and self._append_fetched(records):
                    try:
                        end = await asyncio.to_thread(self.log.flush)
                    except OSError as exc:
                        self.owner.on_fatal(f"cannot write the metadata log: {exc}")
                        return
                    self.execute(st.on_log_flushed(end))

    def _append_fetched(self, records: bytes) -> bool:
        """The fetched batches appended as they came (raw bytes, one write); decoded only
        when committed, by the owner's apply."""
        st = self.state
        written = self.log.append_fetched(records)
        for base, last, epoch in written:
            st.on_log_appended(base, last, epoch)
        if written:
            self.last_append_ms = self.clock.monotonic_ms()
            self.stats["batches"] += len(written)
        return bool(written)

    async def _fetch_snapshot(self, leader: int, snapshot_id: tuple[int, int]) -> None:
        st = self.state
        chunks: list[bytes] = []
        position = 0
        try:
            while True:
                raw = await self._peer(leader, "fetch").request(
                    rw.fetch_snapshot_request(self.cluster_id, self.node_id, st.epoch, snapshot_id, position,
                                              SNAPSHOT_CHUNK), 30.0)
                error, size, pos, _, data = rw.parse_fetch_snapshot_response(raw)
                if error != ErrorCode.none or pos != position:
                    raise rw.RaftWireError(f"FetchSnapshot: {error.name} at {pos}")
                chunks.append(data)
                position += len(data)
                if position >= size or not data:
                    break
        except (ClientError, OSError, rw.RaftWireError, asyncio.TimeoutError) as exc:
            self._log_line(f"FetchSnapshot {snapshot_id} from {leader} failed: {exc}")
            self._snapshot_wanted = None
            await asyncio.sleep(0.1)
            return
        self._snapshot_wanted = None
        blob = b"".join(chunks)
        if st is not self.state or st.leader_id != leader:
            return
        try:
            self.snapshots.write(snapshot_id, blob)
            self.log.reset_to(snapshot_id[0])
        except OSError as exc:
            self.owner.on_fatal(f"cannot write the metadata log: {exc}")
            return
        self.owner.on_snapshot_installed(snapshot_id, blob)
        self.events.emit("snapshot_installed", end_offset=snapshot_id[0], epoch=snapshot_id[1], bytes=len(blob))
        self.execute(st.on_snapshot_installed(*snapshot_id))
