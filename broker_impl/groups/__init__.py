"""Classic consumer groups: the group coordinator of the broker.

- ``state/`` (pure): :mod:`.state.group` Kafka's group state machine (join, sync,
  heartbeat, leave, offsets validation, timers) returning effects; :mod:`.state.records`
  the ``__consumer_offsets`` record formats (Kafka's keys and values) and the
  group → partition hash.
- :mod:`.coordinator` (the I/O edge): which offsets partitions this broker leads, loading
  them from the log when it becomes their leader and dropping them when it stops,
  writes with acks=all, the timer task, parked JoinGroup/SyncGroup futures.
- the group APIs' handlers (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete) are the
  client API's, in :mod:`broker_impl.api.group_handlers` and :mod:`broker_impl.api.offset_handlers`:
  the coordinator knows nothing of the API package, which drives it.
"""
