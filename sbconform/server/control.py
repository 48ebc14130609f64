"""The ``$sbconform`` control node: what the SDK target needs that no SDK call does (creating
and deleting entities, faults, virtual time). A table from operation name to handler; each
handler returns the response body and the ``Changes`` the server acts on."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any, Callable

from sbreference import ErrorCode, Namespace, ServiceBusError, paths

from .management import NOTHING, Changes
from .state import WallClock

log = logging.getLogger("sbconform.serve")

EVERYTHING = Changes(everything=True)
TEN_YEARS_MS = 10 * 365 * 86_400_000

Handler = Callable[[Namespace, WallClock, dict, dict], tuple[Any, Changes]]


def _create_queue(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return {"path": ns.create_queue(str(body["name"]), **props).path}, NOTHING


def _create_topic(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return {"path": ns.create_topic(str(body["name"]), **props).path}, NOTHING


def _create_subscription(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return {"path": ns.create_subscription(str(body["topic"]), str(body["name"]), **props).path}, NOTHING


def _delete(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    ns.delete(str(body["path"]))
    return {}, Changes(keys=frozenset({paths.entity_key(str(body["path"]))}), deleted=True)


def _update(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    ns.update(str(body["path"]), **props)
    return {}, EVERYTHING


def _describe(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return dict(asdict(ns.describe(str(body["path"])))), NOTHING


def _runtime_info(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return ns.runtime_info(str(body["path"])), NOTHING


def _partition(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    path, index = str(body["path"]), int(body["partition"])
    if body.get("available"):
        ns.make_partition_available(path, index)
    else:
        ns.make_partition_unavailable(path, index)
    return {}, EVERYTHING


def _entity_availability(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    path = str(body["path"])
    if body.get("available"):
        ns.make_available(path)
    else:
        ns.make_unavailable(path, ErrorCode(str(body.get("code", "entity-unavailable"))), body.get("transient"))
    return {}, EVERYTHING


def _cpu(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return {"cpu": time.process_time()}, NOTHING


def _now(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    return {"now": clock.now, "epoch": clock.epoch_ms}, NOTHING


def _advance_time(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    """Virtual time (capability virtual-time through the SDK target): the clock moves ``ms``
    forward; the server lets time act on every entity and shortens session waits as much."""
    ms = int(body.get("ms", 0))
    if ms < 0 or ms > TEN_YEARS_MS:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"advance-time takes 0 to ten years of milliseconds, not {ms}")
    clock.shift(ms)
    return {"now": clock.now}, Changes(everything=True, shifted_ms=ms)


def _next_due(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    """How long until time alone changes something, or None."""
    due = ns.next_due()
    return {"in": None if due is None else max(0, due - clock.now)}, NOTHING


def _available(ns: Namespace, clock: WallClock, body: dict, props: dict) -> tuple[Any, Changes]:
    """How many messages a receive on the path could be given now (the SDK target in virtual time
    asks before it waits: a receive there has nothing to wait for in real time when none)."""
    return {"count": ns.available_count(str(body["path"]))}, NOTHING


OPERATIONS: dict[str, Handler] = {
    "create-queue": _create_queue,
    "create-topic": _create_topic,
    "create-subscription": _create_subscription,
    "delete": _delete,
    "update": _update,
    "describe": _describe,
    "runtime-info": _runtime_info,
    "partition": _partition,
    "entity-availability": _entity_availability,
    "cpu": _cpu,
    "now": _now,
    "advance-time": _advance_time,
    "next-due": _next_due,
    "available": _available,
}
LOGGED = ("create-queue", "create-topic", "create-subscription", "delete", "update")


def dispatch(ns: Namespace, clock: WallClock, operation: str, body: dict) -> tuple[Any, Changes]:
    handler = OPERATIONS.get(operation)
    if handler is None:
        raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"unknown control operation {operation!r}")
    given = body.get("properties") or {}
    if not isinstance(given, dict):
        raise ValueError("properties is not a map")
    props = {str(k): val for k, val in given.items()}
    if operation in LOGGED:
        log.info("entity %s: %s", operation, body.get("path") or "/".join(str(body[k]) for k in ("topic", "name") if k in body))
    return handler(ns, clock, body, props)
