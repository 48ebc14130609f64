"""The failover sender of one paired MessagingFactory (PAIR-FAIL-*, PAIR-ROUTE-*, PAIR-PING-003..005).

"When sending, all messages go through an internal MessageSender object that behaves
normally when everything works, and redirects to the backlog queues when things break."

Per entity of the primary namespace, one of three situations:

- healthy: sends go to the primary entity (PAIR-FAIL-001);
- failing: a send failed in a way that counts (PAIR-FAIL-002) and the failover timer runs.
  Sends still go to the primary; a successful one stops the timer (PAIR-FAIL-004);
- failed over: the timer ran for ``failover_interval`` with no successful send. Sends go to
  a backlog queue, rewritten (PAIR-ROUTE-001, PAIR-RENAME-*), for every client of the
  factory (PAIR-ROUTE-004); none goes to the primary (PAIR-FAIL-006) until a ping succeeds
  (PAIR-PING-004). The ping task starts at the moment of failover.

Backlog queues: the factory keeps one rotation; each client picks one queue from it and
keeps it while it stays in the rotation (PAIR-ROUTE-005, PAIR-DISC-007). A queue whose send
fails is pulled from the rotation for every client of the factory and the message goes to
another one (PAIR-ROUTE-002); with none left the caller gets the error (PAIR-ROUTE-003). A
message too large for the backlog is the message's fault, not the queue's: the caller gets
the size error and the queue stays (PAIR-SIZE-001).

Which queue a client picks is the one nondeterministic choice: ``backlog_choices()`` lists
the allowed queues, and the caller's ``choose`` picks one (by default, the first).

The shell asks ``start`` where a send goes, carries out the ``Send``, and reports with
``succeeded`` or ``failed`` (which answers with the next ``Send``, or a ``Fail`` for the
caller). ``tick`` engages failovers whose interval has passed and lists the pings due;
their outcomes come back through ``ping_succeeded`` / ``ping_failed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from ..errors import ErrorCode, ServiceBusError
from ..message import Message
from .backlog import backlog_paths
from .options import PRIMARY, SECONDARY, PairedNamespaceOptions
from .ping import PingTask, ping_message, ping_session_id
from .rewrite import to_backlog
from .transience import starts_failover_timer  # PAIR-FAIL-002/003: decided from the AMQP condition

Choose = Callable[[Sequence[int]], int]


@dataclass(frozen=True)
class Send:
    """Decision: send ``message`` to ``path`` in the ``namespace`` (PRIMARY or SECONDARY)."""

    namespace: str
    path: str
    message: Message
    backlog_index: int | None = None


@dataclass(frozen=True)
class Fail:
    """Decision: the send fails; the caller gets ``error``."""

    error: ServiceBusError


@dataclass
class EntityHealth:
    """What the factory believes about one primary entity."""

    path: str
    timer_started: int | None = None  # the failover timer, while failing (PAIR-FAIL-002)
    failed_over_at: int | None = None  # set once failed over (PAIR-FAIL-004)
    ping: PingTask | None = None  # while failed over (PAIR-FAIL-006)


def first(choices: Sequence[int]) -> int:
    return choices[0]


class FailoverSender:
    """The failover state of one paired MessagingFactory, shared by all its clients."""

    def __init__(self, options: PairedNamespaceOptions, primary_namespace: str) -> None:
        self.options = options
        self.backlog_paths = backlog_paths(primary_namespace, options.backlog_queue_count)
        self.rotation: list[int] = list(range(options.backlog_queue_count))
        self.picks: dict[Hashable, int] = {}  # client -> its backlog queue
        self.entities: dict[str, EntityHealth] = {}
        self.pings_made = 0  # numbers the pings' SessionIds

    # ------------------------------------------------------------ queries

    def _health(self, entity: str) -> EntityHealth:
        key = entity.lower()
        health = self.entities.get(key)
        if health is None:
            health = self.entities[key] = EntityHealth(entity)
        return health

    def failed_over(self, entity: str) -> bool:
        health = self.entities.get(entity.lower())
        return health is not None and health.failed_over_at is not None

    def timer_running(self, entity: str) -> bool:
        health = self.entities.get(entity.lower())
        return health is not None and health.timer_started is not None and health.failed_over_at is None

    def backlog_choices(self) -> list[int]:
        """The backlog queues a client may pick now: those still in the rotation."""
        return list(self.rotation)

    # ------------------------------------------------------------ sending

    def start(self, client: Hashable, entity: str, message: Message, now: int, choose: Choose | None = None) -> Send | Fail:
        """Where a send of ``message`` to ``entity`` by ``client`` goes first."""
        self._engage_due(now)
        if not self.failed_over(entity):
            return Send(PRIMARY, entity, message)
        return self._to_backlog(client, entity, message, choose, None)

    def succeeded(self, entity: str, send: Send, now: int) -> None:
        if send.namespace == PRIMARY:
            health = self.entities.get(entity.lower())
            if health is not None and health.failed_over_at is None:
                health.timer_started = None  # PAIR-FAIL-004: a successful send stops the timer

    def failed(
        self,
        client: Hashable,
        entity: str,
        message: Message,
        send: Send,
        error: ServiceBusError,
        now: int,
        choose: Choose | None = None,
    ) -> Send | Fail:
        """The ``send`` failed with ``error``: what happens to the message now."""
        if send.namespace == PRIMARY:
            if not starts_failover_timer(error):
                return Fail(error)  # PAIR-FAIL-003
            health = self._health(entity)
            if health.timer_started is None:
                health.timer_started = now  # PAIR-FAIL-002; failed sends do not reset it (PAIR-DISC-002)
            self._engage_due(now)
            if not self.failed_over(entity):
                return Fail(error)  # within the interval: the caller sees the failure
            # The interval has passed (at once if it is zero): this message is the first
            # to go to the backlog (PAIR-DISC-006).
            return self._to_backlog(client, entity, message, choose, error)
        if error.code is ErrorCode.MESSAGE_SIZE_EXCEEDED:  # PAIR-SIZE-001: the queue is fine
            return Fail(ServiceBusError(
                ErrorCode.MESSAGE_SIZE_EXCEEDED,
                f"'{entity}' has failed over and message {message.message_id!r}, rewritten for backlog queue "
                f"'{send.path}' (x-ms-* properties added), no longer fits: {error.text}",
                error.tracking_id,
                transient=False,
            ))
        self._pull(send.backlog_index)  # PAIR-ROUTE-002
        return self._to_backlog(client, entity, message, choose, error)

    def _to_backlog(
        self, client: Hashable, entity: str, message: Message, choose: Choose | None, error: ServiceBusError | None
    ) -> Send | Fail:
        index = self._pick(client, choose)
        if index is None:  # PAIR-ROUTE-003
            return Fail(error or ServiceBusError(
                ErrorCode.ENTITY_UNAVAILABLE,
                f"'{entity}' has failed over and no backlog queue is left in the rotation.",
                transient=False,
            ))
        return Send(SECONDARY, self.backlog_paths[index], to_backlog(message, entity), index)

    def _pick(self, client: Hashable, choose: Choose | None) -> int | None:
        """PAIR-ROUTE-005: one queue per client, kept while it stays in the rotation."""
        index = self.picks.get(client)
        if index is not None and index in self.rotation:
            return index
        allowed = self.backlog_choices()
        if not allowed:
            self.picks.pop(client, None)
            return None
        index = (choose or first)(allowed)
        if index not in allowed:
            raise ValueError(f"choose() picked backlog queue {index!r}, which is not among the allowed {allowed}")
        self.picks[client] = index
        return index

    def _pull(self, index: int | None) -> None:
        """PAIR-ROUTE-002: "All senders on the MessagingFactory instance learn of the failure."""
        if index in self.rotation:
            self.rotation.remove(index)

    # --------------------------------------------------------------- time

    def _engage_due(self, now: int) -> None:
        """PAIR-FAIL-004: fail over every entity whose timer has run for the interval;
        PAIR-FAIL-006: its ping task starts at that moment."""
        interval = self.options.failover_interval
        for health in self.entities.values():
            if health.failed_over_at is None and health.timer_started is not None:
                at = health.timer_started + interval
                if at <= now:
                    health.failed_over_at = at
                    health.timer_started = None
                    health.ping = PingTask.start(at, self.options.ping_primary_interval)

    def next_due(self) -> int | None:
        """The next instant at which time alone changes something here."""
        times = []
        for health in self.entities.values():
            if health.failed_over_at is None and health.timer_started is not None:
                times.append(health.timer_started + self.options.failover_interval)
            elif health.ping is not None:
                times.append(health.ping.next_at)
        return min(times) if times else None

    def tick(self, now: int) -> list[Send]:
        """Engage due failovers and list the pings due now, one per failed-over entity
        of this factory (PAIR-PING-003)."""
        self._engage_due(now)
        pings = []
        for health in self.entities.values():
            if health.ping is not None and health.ping.due(now):
                health.ping.sent(now)
                self.pings_made += 1
                pings.append(Send(PRIMARY, health.path, ping_message(ping_session_id(self.pings_made))))
        return pings

    def ping_succeeded(self, entity: str, now: int) -> None:
        """PAIR-PING-004/005: the entity is available again: new sends go to the primary
        at once, for every client, and its pings stop."""
        self.entities.pop(entity.lower(), None)

    def ping_failed(self, entity: str, now: int) -> None:
        """Still unavailable: keep pinging (the next ping is already scheduled)."""
