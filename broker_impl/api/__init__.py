"""The broker's client-facing request handlers (Kafka protocol via kio entities).

Entry point: :class:`broker_impl.api.handlers.BrokerApi`, built on the narrow
:class:`broker_impl.api.view.BrokerView` protocol (metadata image lookups, local replicas by
``(topic_id, partition)``, local dir states, controller channel, dir mover) — see
``view.py`` for the contract the runtime implements. One module per API family:
``produce``, ``fetch``, ``metadata``, ``admin`` (ListOffsets, CreateTopics, InitProducerId,
DescribeCluster), ``log_dirs`` (DescribeLogDirs with the directory-id tag, AlterReplicaLogDirs).
"""
