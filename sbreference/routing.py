"""Routing: how a path resolves to an entity and a store, and injected faults.

Part of ``namespace.Namespace`` (a mixin, as ``provisioning.Provisioning`` is): the one place a path
(``q``, ``q/$DeadLetterQueue``, ``t/Subscriptions/s``, ``.../$DeadLetterQueue``) becomes an entity and
the store a receiver takes from, with the route cache the hot path reads (``_routes``, ``_senders``,
``_queues``), the statuses each route is checked against (SETTLE-STATUS-*), auto-forwarding's
refusal of receivers (SETTLE-FWD-003), and fault injection.
"""

from __future__ import annotations

from .entity import Entity
from .errors import ErrorCode, ServiceBusError
from .forwarding import forwarded_to, refuse_receiver
from .paths import parse
from .status import ACTIVE, refuse_receive
from .store import MessageStore
from .transfer import transfer_dead_letter_queue


class Routing:
    """Path resolution and faults of a ``Namespace``."""

    # ---------------------------------------------------------------- paths

    def _entity(self, path: str) -> Entity:
        entity = self.entities.get(path.lower())
        if entity is None:
            raise ServiceBusError(
                ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{self.name}/{path}' could not be found."
            )
        return entity

    # --------------------------------------------------------------- faults

    def make_unavailable(self, path: str, code: ErrorCode = ErrorCode.ENTITY_UNAVAILABLE, transient: bool | None = None) -> None:
        """Fault injection: every operation on the entity (and its subqueues and
        subscriptions) fails with ``code`` until ``make_available``. What it holds is kept."""
        entity = self._entity(path)
        self.faults[entity.path.lower()] = ServiceBusError(
            code, f"The messaging entity '{self.name}/{entity.path}' is unavailable (injected fault).", transient=transient
        )
        self._forget_routes()

    def make_available(self, path: str) -> None:
        self.faults.pop(self._entity(path).path.lower(), None)
        self._forget_routes()

    def _forget_routes(self) -> None:
        """Resolve every path again: a fault, a status, or an entity changed."""
        self._routes.clear()
        self._senders.clear()
        self._queues.clear()

    def _check_fault(self, entity: Entity) -> None:
        fault = self.faults.get(entity.path.lower())
        if fault is not None:
            raise ServiceBusError(fault.code, fault.text, transient=fault.transient)

    def _resolve(self, path: str, use: bool = False) -> tuple[Entity, MessageStore | None]:
        """``q``, ``q/$DeadLetterQueue``, ``t/Subscriptions/s`` and ``.../$DeadLetterQueue``.

        Returns the entity and, for anything but a queue or topic itself, the store. ``use``: the request
        uses it (SETTLE-IDLE-002/003; a Get does not).
        """
        route = self._routes.get(path)
        if route is None:
            if self._temporary:
                self.reap_idle(self.clock.now)  # SETTLE-IDLE-001: what is idle by now is gone
            route = self._route(path)
            if use:
                self._use(*route, self.clock.now)
            if self.faults:
                self._check_fault(route[0])  # a faulted entity is never cached
            elif route[0].path.lower() in self._temporary:
                pass  # nor one that may be deleted on idle: its requests are recorded and it is checked each time
            elif self._statuses(*route) == (ACTIVE, ACTIVE):  # nor one that is not Active (its operations are checked)
                if route[1] is None:  # the queue or topic itself
                    self._senders[path] = route[0]
                if forwarded_to(*route) is None:  # nor, for receivers, one that forwards (SETTLE-FWD-003)
                    self._routes[path] = route
                    if route[1] is None and route[0].kind == "queue":
                        self._queues[path] = route[0]
        return route

    @staticmethod
    def _statuses(entity: Entity, store: MessageStore | None) -> tuple[str, str]:
        """(the queue's or topic's status, the subscription's: Active for a queue)."""
        sub = parse(store.path).subscription_key if store is not None and entity.kind == "topic" else None
        if sub is not None:
            return entity.description.status, entity.subscriptions[sub].description.status
        return entity.description.status, ACTIVE

    def _taking_store(self, path: str, use: bool = True) -> MessageStore:
        """``_receiving_store`` for what takes or settles messages: refused while the queue or
        subscription is Disabled or ReceiveDisabled, whatever its topic's status (SETTLE-STATUS-002, SETTLE-DISC-011).
        Peeks, lock renewals and releases stay allowed (the documentation names receive and
        complete; a suspension keeps every message)."""
        route = self._routes.get(path)
        if route is not None:  # cached: everything on the route is Active
            return self._store_of(path, *route)
        entity, own = self._resolve(path, use)
        store = self._store_of(path, entity, own)
        entity_status, subscription_status = self._statuses(entity, own)
        if entity.kind == "topic":
            refuse_receive("subscription", path, subscription_status)
        else:
            refuse_receive(entity.kind, path, entity_status)
        refuse_receiver(path, forwarded_to(entity, own))  # SETTLE-FWD-003
        return store

    def _route(self, path: str) -> tuple[Entity, MessageStore | None]:
        parsed = parse(path)
        dead_letter = parsed.dead_letter
        if parsed.subscription is not None:
            topic = self._entity(parsed.key)
            sub = topic.subscriptions.get(parsed.subscription_key) if topic.kind == "topic" else None
            if sub is None:
                raise ServiceBusError(
                    ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{self.name}/{path}' could not be found."
                )
            if parsed.transfer:  # TXN-VIA-003
                return topic, transfer_dead_letter_queue(sub, sub.path, topic.next_lock_token)
            return topic, (sub.store.dead_letter_queue if dead_letter else sub.store)
        entity = self._entity(parsed.key)
        if parsed.transfer:  # TXN-VIA-003: a queue's, or a topic's used as a transfer entity
            return entity, transfer_dead_letter_queue(entity, entity.path, entity.next_lock_token)
        if dead_letter:
            if entity.kind != "queue":
                raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"'{path}': topics have no dead-letter queue.")
            return entity, entity.store.dead_letter_queue
        return entity, None

    def _receiving_store(self, path: str, use: bool = True) -> MessageStore:
        route = self._routes.get(path)
        return self._store_of(path, *(route if route is not None else self._resolve(path, use)))

    def _store_of(self, path: str, entity: Entity, store: MessageStore | None) -> MessageStore:
        """The store a receiver on ``path`` (resolved to ``entity`` and ``store``) takes from,
        with what time made due applied."""
        if entity.schedule_order:
            entity.tick(self.clock.now)
        if store is None:
            if entity.kind == "queue":
                return entity.store
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION, f"Cannot receive from topic '{path}'; receive from a subscription."
            )
        if store.is_dead_letter and store.parent is not None:  # (a transfer dead-letter queue has none)
            parent = self._parent_of(entity, store)
            parent.tick(self.clock.now)  # lock expiries there may dead-letter into here
        return store

    @staticmethod
    def _parent_of(entity: Entity, dead_letter: MessageStore) -> MessageStore:
        return dead_letter.parent
