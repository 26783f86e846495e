"""Broker registration, unregistration and each broker's default directory.

Registration (behaviour.md §2, D2, §6; reference §2.1-2.2), in Kafka's order:
1. wrong cluster id → INCONSISTENT_CLUSTER_ID (104);
2. a registration with another incarnation id whose session is still live (unfenced and
   heard from within the session timeout) → DUPLICATE_BROKER_REGISTRATION (101);
3. ``LogDirs`` empty, reserved (D1), listed twice, or an online dir of another registered
   broker → INVALID_REQUEST (42) (D2; Kafka says 119);
4. same incarnation → same epoch, fenced and controlled-shutdown state kept, dirs replaced
   (KAFKA-16757, KAFKA-16952) — and, beyond Kafka (reference §9.2), it leaves the ISRs of
   its replicas in dirs it no longer lists, so no leader sits in a dir that is gone; new incarnation → epoch = the offset the
   RegisterBrokerRecord will get, fenced. A new incarnation of a known broker first leaves
   every ISR (its old process is gone; it rejoins through AlterPartition).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from kafka_common import wire
from kafka_common.ids import UNASSIGNED, from_wire, is_reserved
from kafka_common.metadata import records as r
from kafka_common.metadata.model import BrokerRegistration
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.heartbeats import BrokerSessions
from controller_impl.state.replication_control import leave_isrs_in_dirs, remove_from_isrs
from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView


def default_dir(reg: BrokerRegistration | None) -> uuid.UUID:
    """Directory for a new replica: the broker's only online dir, else UNASSIGNED (the
    broker picks one and reports it through AssignReplicasToDirs)."""
    if reg is not None and len(reg.log_dirs) == 1:
        return reg.log_dirs[0]
    return UNASSIGNED


def validate_log_dirs(view: WorkingView, broker_id: int, dirs: list[uuid.UUID]) -> str | None:
    """The D2 problem with ``dirs``, or None."""
    if not dirs:
        return "no log directories in the registration"
    reserved = [d for d in dirs if is_reserved(d)]
    if reserved:
        return f"reserved directory id {reserved[0]}"
    if len(set(dirs)) != len(dirs):
        dup = next(d for d in dirs if dirs.count(d) > 1)
        return f"directory id {dup} listed twice"
    for d in dirs:
        owner = view.image.dir_owner(d)
        if owner is not None and owner != broker_id:
            return f"directory {d} is already registered by broker {owner}"
    return None


def register(view: WorkingView, req: Any, now_ms: int, *, cluster_id: str,
             sessions: BrokerSessions, next_offset: int,
             on_problem: Callable[[str], None] | None = None) -> Any:
    cls = wire.response_class(ApiKey.BROKER_REGISTRATION, req.__version__)

    def fail(code: ErrorCode, why: str) -> Any:
        if on_problem is not None:
            on_problem(f"broker {req.broker_id} registration refused ({code.name}): {why}")
        return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=code, broker_epoch=-1)

    if cluster_id and req.cluster_id != cluster_id:
        return fail(ErrorCode.inconsistent_cluster_id,
                    f"cluster id {req.cluster_id!r} is not this cluster's {cluster_id!r}")
    incarnation = from_wire(req.incarnation_id)
    existing = view.broker(req.broker_id)
    same_incarnation = existing is not None and existing.incarnation_id == incarnation
    if existing is not None and not same_incarnation and sessions.has_valid_session(existing, now_ms):
        return fail(ErrorCode.duplicate_broker_registration,
                    f"incarnation {existing.incarnation_id} still has a live session")
    dirs = [from_wire(d) for d in getattr(req, "log_dirs", ())]
    problem = validate_log_dirs(view, req.broker_id, dirs)
    if problem is not None:
        return fail(ErrorCode.invalid_request, problem)
    if same_incarnation:
        assert existing is not None
        epoch, fenced, in_cs = existing.epoch, existing.fenced, existing.in_controlled_shutdown
        dropped = set(existing.log_dirs) - set(dirs)
        if dropped:  # its replicas there are offline now: leave ISRs as for a failed dir
            leave_isrs_in_dirs(view, req.broker_id, dropped)
    else:
        if existing is not None:
            remove_from_isrs(view, req.broker_id)
        epoch, fenced, in_cs = view.next_offset(next_offset), True, False
    view.emit(r.RegisterBrokerRecord(
        broker_id=req.broker_id, incarnation_id=incarnation, broker_epoch=epoch,
        end_points=tuple(r.BrokerEndpoint(name=lst.name, host=lst.host, port=lst.port,
                                          security_protocol=lst.security_protocol)
                         for lst in req.listeners),
        features=tuple(r.BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                       max_supported_version=f.max_supported_version)
                       for f in req.features),
        rack=req.rack, fenced=fenced, in_controlled_shutdown=in_cs, log_dirs=tuple(dirs)))
    sessions.touch(req.broker_id, now_ms)
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, broker_epoch=epoch)


def unregister(view: WorkingView, req: Any, *, sessions: BrokerSessions) -> Any:
    cls = wire.response_class(ApiKey.UNREGISTER_BROKER, req.__version__)
    reg = view.broker(req.broker_id)
    if reg is None:
        return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.broker_id_not_registered,
                         error_message=f"broker {req.broker_id} is not registered")
    remove_from_isrs(view, req.broker_id)
    view.emit(r.UnregisterBrokerRecord(broker_id=req.broker_id, broker_epoch=reg.epoch))
    sessions.remove(req.broker_id)
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None)
