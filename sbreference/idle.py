"""Auto-delete on idle: when an entity was last used, and its deletion once it has been idle too long.

"Service Bus queues, topics, and subscriptions can be created as temporary entities, which are automatically
removed when they haven't been used for a specified period of time"
(https://learn.microsoft.com/azure/service-bus-messaging/message-expiration, SETTLE-IDLE-001). What counts as
use is that page's Idleness table (SETTLE-IDLE-002..004; SETTLE-DISC-010 records the other readings):

- a queue: sends, receives, updates, scheduled messages, peeks;
- a topic: sends, updates, scheduled messages, operations on its subscriptions;
- a subscription: receives, updates, new rules, peeks.

Nothing here runs per operation. Operations leave timestamps (one attribute store each): ``accessed_at`` on a
queue or topic for a send (what the runtime properties call AccessedAt, SETTLE-ENT-004) and on a store for a
receive request; ``used_at`` for the rest (peeks, settlements, session operations, rules, cancellations);
``updated_at`` for an update. An entity with an AutoDeleteOnIdle other than never, or holding a subscription
with one, is "temporary": the namespace never caches its routes (``routing.Routing._resolve``), so every
request on it takes the slow path, which records its use and deletes what is due. When it is idle is computed
from the timestamps only when time is asked about (``next_due``, ``tick_due``, a request on the slow path).
"""

from __future__ import annotations

from typing import Any, Iterable

from .clock import TIMESPAN_MAX
from .paths import parse


def _store_used_at(store: Any) -> int:
    """The last receive request or other use of a queue's or subscription's store, or of its dead-letter subqueue."""
    dead = store.dead_letter_queue
    return max(getattr(store, "accessed_at", 0), getattr(store, "used_at", 0), getattr(dead, "accessed_at", 0), getattr(dead, "used_at", 0))


def store_accessed_at(store: Any) -> int:
    """The last receive request on a store or its dead-letter subqueue (AccessedAt, SETTLE-ENT-004)."""
    return max(getattr(store, "accessed_at", 0), getattr(store.dead_letter_queue, "accessed_at", 0))


def subscription_used_at(sub: Any) -> int:
    """SETTLE-IDLE-003: receives, peeks, settlements and session operations on it or its dead-letter subqueue,
    its updates (creation included) and rule changes. Copies its topic makes are not its use (SETTLE-DISC-010)."""
    return max(getattr(sub, "updated_at", 0), getattr(sub, "used_at", 0), _store_used_at(sub.store))


def entity_used_at(entity: Any) -> int:
    """SETTLE-IDLE-002/004: a queue's or topic's last use. A scheduled message still held counts as used until it
    is enqueued ("No scheduled messages"); its enqueue is a send (``Entity.tick`` stamps ``accessed_at``)."""
    used = max(entity.updated_at, entity.accessed_at, entity.used_at)
    if entity.scheduled:
        used = max(used, max(m.enqueued_time for m in entity.scheduled.values()))
    if entity.kind == "queue":
        return max(used, _store_used_at(entity.store))
    return max([used, *(subscription_used_at(s) for s in entity.subscriptions.values())])


def _deadline(used_at: int, description: Any) -> int | None:
    interval = description.auto_delete_on_idle
    return None if interval >= TIMESPAN_MAX else used_at + interval


def is_temporary(entity: Any) -> bool:
    """Whether ``entity`` or one of its subscriptions may be deleted on idle."""
    if entity.description.auto_delete_on_idle < TIMESPAN_MAX:
        return True
    return any(s.description.auto_delete_on_idle < TIMESPAN_MAX for s in getattr(entity, "subscriptions", {}).values())


def deadlines(entity: Any) -> list[tuple[int, str | None]]:
    """When ``entity`` (name ``None``) and each of its subscriptions (by name) is deleted if nothing uses it first."""
    out = []
    own = _deadline(entity_used_at(entity), entity.description)
    if own is not None:
        out.append((own, None))
    for sub in getattr(entity, "subscriptions", {}).values():
        due = _deadline(subscription_used_at(sub), sub.description)
        if due is not None:
            out.append((due, sub.name))
    return out


class Idleness:
    """The auto-delete-on-idle part of a ``Namespace``: which entities are temporary, their use, their deletion."""

    def auto_delete_at(self, path: str) -> int | None:
        """When the model deletes the queue, topic or subscription at ``path`` if nothing uses it first (``None``:
        never). A Get: not use (SETTLE-IDLE-002)."""
        entity, store = self._resolve(path)
        if store is None:
            return next((due for due, name in deadlines(entity) if name is None), None)
        if entity.kind != "topic":
            return self.auto_delete_at(entity.path)
        sub = entity.subscriptions[parse(store.path).subscription_key]
        subscription = _deadline(subscription_used_at(sub), sub.description)
        topic = self.auto_delete_at(entity.path)
        return min((t for t in (subscription, topic) if t is not None), default=None)

    def next_idle_deadline(self) -> int | None:
        times = [due for key in self._temporary if key in self.entities for due, _ in deadlines(self.entities[key])]
        return min(times) if times else None

    def reap_idle(self, now: int) -> list[str]:
        """SETTLE-IDLE-001: delete every queue, topic and subscription idle for its AutoDeleteOnIdle by ``now``, with
        what it holds (a topic with its subscriptions). Returns the keys of the queues and topics it deleted or took
        a subscription from."""
        reaped = []
        for key in list(self._temporary):
            entity = self.entities.get(key)
            if entity is None:  # deleted meanwhile
                self._temporary.discard(key)
                continue
            due = [(when, name) for when, name in deadlines(entity) if when <= now]
            if not due:
                continue
            reaped.append(key)
            if any(name is None for _, name in due):
                del self.entities[key]
                self._temporary.discard(key)
            else:
                for _, name in due:
                    entity.remove_subscription(name)
                self.mark_temporary(entity)
        if reaped:
            self._forget_routes()
        return reaped

    def mark_temporary(self, entity: Any) -> None:
        """Keep ``_temporary`` (the keys of entities that may be deleted on idle) up to date after ``entity`` or one of
        its subscriptions was created, updated or deleted; its routes are no longer cached once it is temporary."""
        key = entity.path.lower()
        if is_temporary(entity) and key in self.entities:
            if key not in self._temporary:
                self._temporary.add(key)
                self._forget_routes()
        else:
            self._temporary.discard(key)

    def _use(self, entity: Any, store: Any, now: int) -> None:
        """A request other than a send or receive used ``store`` of ``entity`` (SETTLE-IDLE-002/003)."""
        if store is None:
            entity.used_at = now
        else:
            store.used_at = now


def stamp(owners: Iterable[Any], now: int, created: bool = False) -> None:
    """A creation or an update of each of ``owners`` at ``now`` (SETTLE-ENT-004's CreatedAt, UpdatedAt)."""
    for owner in owners:
        if created:
            owner.created_at = now
        owner.updated_at = now
