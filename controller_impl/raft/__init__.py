"""KRaft's Raft (KIP-595, KIP-630 snapshots, KIP-996 pre-vote) as pure state: no I/O.

- :mod:`.log_shape` — what Raft needs to know of the log: epochs per offset range, the
  log start (after a snapshot), the end; ``end_offset_for_epoch``.
- :mod:`.messages` — the RPCs between voters as plain values (the runtime maps them to
  kio's Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch/FetchSnapshot) and the effects the
  state returns (send, persist the quorum state, truncate, high watermark moved, role change).
- :mod:`.quorum` — :class:`~.quorum.RaftState`: roles, elections, replication, commit.
- :mod:`.quorum_file` — the ``quorum-state`` file (Kafka's JSON), parse and render.

Every input is ``(value, now_ms)``; every output is values. The runtime
(``controller_impl.runtime.raft_node``) does the sockets, the fsyncs and the timers.
"""
