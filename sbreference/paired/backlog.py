"""Backlog queues: where they are, how they are described, which ones pairing creates.

PAIR-BACKLOG-001: ``<primary namespace>/x-servicebus-transfer/<i>``, i in [0, count), as
queues of the secondary namespace. PAIR-BACKLOG-002: the properties set explicitly; all
others are QueueDescription defaults. PAIR-BACKLOG-003..005: only missing queues are
created; existing ones (extra, or described differently) are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping

from ..clock import INT_MAX, MINUTE, TIMESPAN_MAX
from ..entity import EntityDescription

TRANSFER_SEGMENT = "x-servicebus-transfer"

#: PAIR-BACKLOG-002, as ``EntityDescription`` fields.
BACKLOG_QUEUE_PROPERTIES: Mapping[str, Any] = {
    "max_size_in_megabytes": 5120,
    "max_delivery_count": INT_MAX,
    "default_message_time_to_live": TIMESPAN_MAX,
    "auto_delete_on_idle": TIMESPAN_MAX,
    "lock_duration": 1 * MINUTE,
    "dead_lettering_on_message_expiration": True,
    "enable_batched_operations": True,
}


def backlog_path(primary_namespace: str, index: int) -> str:
    """PAIR-BACKLOG-001: ``backlog_path("contoso", 0) == "contoso/x-servicebus-transfer/0"``."""
    return f"{primary_namespace}/{TRANSFER_SEGMENT}/{index}"


def backlog_paths(primary_namespace: str, count: int) -> list[str]:
    """The backlog queues a pairing with ``count`` queues uses, in index order."""
    return [backlog_path(primary_namespace, i) for i in range(count)]


def backlog_queue_description() -> EntityDescription:
    return EntityDescription().with_changes(**BACKLOG_QUEUE_PROPERTIES)


@dataclass(frozen=True)
class CreateQueue:
    """Decision: create this queue in the secondary namespace."""

    path: str
    properties: Mapping[str, Any]


def plan_backlog_queues(paths: list[str], existing: Collection[str]) -> list[CreateQueue]:
    """PAIR-BACKLOG-003: the code first checks whether each queue exists; only the
    missing ones are created. Existing ones are neither recreated nor modified
    (PAIR-BACKLOG-005), and queues outside ``paths`` are never touched (PAIR-BACKLOG-004)."""
    present = {p.lower() for p in existing}
    return [CreateQueue(p, dict(BACKLOG_QUEUE_PROPERTIES)) for p in paths if p.lower() not in present]
