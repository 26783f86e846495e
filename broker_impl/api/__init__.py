"""The broker's client-facing request handlers (Kafka protocol via kio entities).

Entry point: :class:`broker_impl.api.handlers.BrokerApi`, serving the one request table
:data:`broker_impl.api.request_table.REQUESTS` (``{ApiKey: Handler}``: ApiVersions is derived
from it), built on the narrow
:class:`broker_impl.api.view.BrokerView` protocol (metadata image lookups, local replicas by
``(topic_id, partition)``, local dir states, controller channel, dir mover) — see
``view.py`` for the contract the runtime implements. One module per API family:
``produce``, ``fetch``, ``metadata``, ``admin`` (ListOffsets, CreateTopics, InitProducerId,
DescribeCluster, FindCoordinator), ``log_dirs`` (DescribeLogDirs with the directory-id tag,
AlterReplicaLogDirs), ``legacy_produce`` (Produce v0–2 schemas kio lacks),
``legacy_versions`` (Kafka 3.9's semantics of the other old versions: ListOffsets v0,
OffsetCommit/OffsetFetch v0, CreateTopics v0–1) and ``down_convert`` (Fetch v0–3's
message formats v0/v1).

Mounting it in the broker runtime::

    api = BrokerApi(view, producer_id_base=(node_id << 48) | ((broker_epoch & 0xFFFFFF) << 24))
    server = KafkaServer(api, host=..., port=..., listener_name=name,
                         security=SecurityConfig.for_listener(cfg, name))
    # after each applied metadata batch:   api.on_image_changes(image.drain_changes())
    # when the HW moves for another reason: api.notify_partition(topic_id, partition)

``storage_view.LogManagerView`` is a complete BrokerView over ``LogManager`` +
``MetadataImage`` (the tests mount exactly that); the broker runtime's
``broker_impl.runtime.runtime_view.RuntimeView`` extends it with status from the broker
core and ISR management (AlterPartition). Handler modules are typed against
``context.ApiContext`` (what ``BrokerApi`` offers them), never against ``handlers``.
"""
