"""The controller listener's authorization rules (interfaces.md "Authentication and
authorization"), as data the listener enforces (``kafka_common.authz``).

Everything a client or a broker may call on the controller needs CLUSTER_ACTION on CLUSTER,
which only ``super.users`` principals hold, as in Kafka:

* the broker-only APIs: BrokerRegistration 62, BrokerHeartbeat 63, AssignReplicasToDirs 73,
  AlterPartition 56, UnregisterBroker 64;
* Fetch 1 of the metadata log (``__cluster_metadata``): the whole cluster's metadata;
* AlterConfigs 33, IncrementalAlterConfigs 44: forwarded by brokers the same way;
* DeleteTopics 20, CreatePartitions 37: forwarded by brokers as CreateTopics is;
* CreateTopics 19: brokers forward their clients' CreateTopics as their own (super-user)
  principal, so clients keep creating topics through any broker;
* the Raft RPCs between voters: Vote 52, BeginQuorumEpoch 53, EndQuorumEpoch 54,
  FetchSnapshot 59 (DescribeQuorum 55 is open, for ``quorum-status``).

With the authorizer disabled everyone may call everything (Kafka without an authorizer).
A new controller API adds its line to :data:`API_RULES` (the Raft RPCs between voters need
CLUSTER_ACTION as well).
"""

from __future__ import annotations

from kafka_common.authz import CLUSTER_ACTION, ApiRule, deny_alter_configs, deny_create_topics, deny_fetch
from kafka_common.wire import ApiKey

from controller_impl.state.topic_admin import deny_create_partitions, deny_delete_topics

API_RULES: dict[int, ApiRule] = {
    ApiKey.BROKER_REGISTRATION: ApiRule(CLUSTER_ACTION),
    ApiKey.BROKER_HEARTBEAT: ApiRule(CLUSTER_ACTION),
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: ApiRule(CLUSTER_ACTION),
    ApiKey.ALTER_PARTITION: ApiRule(CLUSTER_ACTION),
    ApiKey.UNREGISTER_BROKER: ApiRule(CLUSTER_ACTION),
    ApiKey.FETCH: ApiRule(CLUSTER_ACTION, deny=deny_fetch),
    ApiKey.CREATE_TOPICS: ApiRule(CLUSTER_ACTION, deny=deny_create_topics),
    ApiKey.ALTER_CONFIGS: ApiRule(CLUSTER_ACTION, deny=deny_alter_configs),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ApiRule(CLUSTER_ACTION, deny=deny_alter_configs),
    ApiKey.DELETE_TOPICS: ApiRule(CLUSTER_ACTION, deny=deny_delete_topics),
    ApiKey.CREATE_PARTITIONS: ApiRule(CLUSTER_ACTION, deny=deny_create_partitions),
    # the operator's calls, forwarded by brokers as their own principal
    ApiKey.ELECT_LEADERS: ApiRule(CLUSTER_ACTION),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ApiRule(CLUSTER_ACTION),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ApiRule(CLUSTER_ACTION),
    # the Raft RPCs between voters (controllers log in as a super user, sasl.plain.username)
    ApiKey.VOTE: ApiRule(CLUSTER_ACTION),
    ApiKey.BEGIN_QUORUM_EPOCH: ApiRule(CLUSTER_ACTION),
    ApiKey.END_QUORUM_EPOCH: ApiRule(CLUSTER_ACTION),
    ApiKey.FETCH_SNAPSHOT: ApiRule(CLUSTER_ACTION),
}
CLUSTER_ACTION_APIS = frozenset(k for k, rule in API_RULES.items() if rule.permission == CLUSTER_ACTION)


def is_authorized(principal: str | None, api_key: int, *, authorizer_enabled: bool,
                  super_users: frozenset[str]) -> bool:
    if not authorizer_enabled or api_key not in CLUSTER_ACTION_APIS:
        return True
    return principal is not None and principal in super_users
