"""The CLUSTER_ACTION decision (interfaces.md "Authentication and authorization").

Broker-only APIs (BrokerRegistration 62, BrokerHeartbeat 63, AssignReplicasToDirs 73,
AlterPartition 56, UnregisterBroker 64) need CLUSTER_ACTION on CLUSTER, which only
``super.users`` principals have. With the authorizer disabled everyone may call
everything (Kafka without an authorizer). Others: always allowed.
"""

from __future__ import annotations

CLUSTER_ACTION_APIS = frozenset({62, 63, 73, 56, 64})


def is_authorized(principal: str | None, api_key: int, *, authorizer_enabled: bool,
                  super_users: frozenset[str]) -> bool:
    if not authorizer_enabled or api_key not in CLUSTER_ACTION_APIS:
        return True
    return principal is not None and principal in super_users
