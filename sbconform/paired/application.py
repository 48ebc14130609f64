"""For applications: ``PairedNamespaceSender``, the .NET SDK's send availability for Python
applications on azure-servicebus messages, its options by the seed's names, and
``set_entity_available`` for demonstrations against ``sbconform serve``."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from sbreference import Message, ServiceBusError
from sbreference.paired import PairedNamespaceOptions

from ..targets import Target

from .factory import PairedClient, PairedFactory

# ------------------------------------------------------------ for applications


@dataclass(frozen=True)
class SendAvailabilityPairedNamespaceOptions:
    """The pairing's options, by the seed's names (SendAvailabilityPairedNamespaceOptions), with
    its defaults: BacklogQueueCount 10, FailoverInterval 1 minute, PingPrimaryInterval once a
    minute, EnableSyphon false (an application that only sends leaves it off; one that receives
    runs the syphon)."""

    backlog_queue_count: int = 10
    failover_interval: dt.timedelta = dt.timedelta(minutes=1)
    ping_primary_interval: dt.timedelta = dt.timedelta(minutes=1)
    enable_syphon: bool = False

    def model(self) -> PairedNamespaceOptions:
        return PairedNamespaceOptions(
            backlog_queue_count=self.backlog_queue_count,
            failover_interval=_ms(self.failover_interval),
            ping_primary_interval=_ms(self.ping_primary_interval),
            enable_syphon=self.enable_syphon,
        )


def _ms(value: dt.timedelta | float | int) -> int:
    if isinstance(value, dt.timedelta):
        return round(value.total_seconds() * 1000)
    return round(float(value) * 1000)  # seconds


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def from_sdk_message(message: Any) -> Message:
    """An azure-servicebus ``ServiceBusMessage`` (or a ``sbreference.Message``) as the paired
    client's message. Times become Unix milliseconds: the application API's clock."""
    if isinstance(message, Message):
        return message
    body = message.body
    if isinstance(body, (bytes, bytearray)):
        data = bytes(body)
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = b"".join(bytes(part) if not isinstance(part, str) else part.encode() for part in body)
    ttl = message.time_to_live
    scheduled = message.scheduled_enqueue_time_utc
    if scheduled is not None and scheduled.tzinfo is None:
        scheduled = scheduled.replace(tzinfo=dt.timezone.utc)
    props = {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else v)
             for k, v in (message.application_properties or {}).items()}
    return Message(
        data,
        message_id=message.message_id,
        session_id=message.session_id,
        partition_key=message.partition_key,
        time_to_live=None if ttl is None else round(ttl.total_seconds() * 1000),
        scheduled_enqueue_time=None if scheduled is None else round((scheduled - _EPOCH).total_seconds() * 1000),
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        to=message.to,
        reply_to=message.reply_to,
        application_properties=props,
    )


class PairedNamespaceSender:
    """A paired-namespace sender for ``azure-servicebus`` applications: the .NET SDK's send
    availability (``MessagingFactory.PairNamespaceAsync``), which no Python SDK has.

    Built from two connection strings (the primary and the secondary namespace), it creates the
    missing backlog queues in the secondary (PAIR-BACKLOG-*), sends through the failover sender
    (to the primary while it works; after FailoverInterval of failures, rewritten to a backlog
    queue), pings failed-over entities every PingPrimaryInterval and goes back to the primary
    once a ping is delivered, and, with the syphon on, moves backlog messages to their
    destinations. The decisions are the reference model's (``sbreference.paired``); whether a
    failure counts is decided from the broker's AMQP condition (``sbreference.paired.transience``),
    never from the SDK's retry flag. A background thread acts at the instants the machines name
    (pings, failover timers, syphon polls). Thread-safe: every operation holds one lock.

    Times in backlog messages (x-ms-scheduledenqueuetimeutc) are Unix milliseconds, and
    x-ms-timetolive is milliseconds: readable by any syphon using this class, not by .NET's.
    Entities are provisioned through ``$sbconform`` (``sbconform serve``) or, on Azure, the
    administration client (``control``, as for the SDK target).
    """

    def __init__(self, primary: Target, secondary: Target, options: SendAvailabilityPairedNamespaceOptions | None = None) -> None:
        self.options = options or SendAvailabilityPairedNamespaceOptions()
        self._lock = threading.RLock()
        self._targets = (primary, secondary)
        self.factory = PairedFactory(primary, secondary, self.options.model(), choose=random.SystemRandom().choice)
        self.factory.pair_namespace()
        getattr(secondary, "created", []).clear()  # backlog queues outlive this sender: never deleted at close
        self._clients: dict[str, PairedClient] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sbconform-paired", daemon=True)
        self._thread.start()

    @classmethod
    def from_connection_strings(
        cls,
        primary: str,
        secondary: str,
        options: SendAvailabilityPairedNamespaceOptions | None = None,
        control: str = "auto",
    ) -> "PairedNamespaceSender":
        from ..targets.sdk import SdkTarget
        from ..targets.sdk_clock import SDK_OPEN_POLL

        targets = []
        try:
            for connection_string in (primary, secondary):
                # an application's process: the SDK's own open poll (the kit's 2 ms is for certification)
                target = SdkTarget(connection_string=connection_string, control=control, open_poll_ms=SDK_OPEN_POLL * 1000)
                target.open()
                # the clock is Unix milliseconds, so times written in a backlog queue mean the
                # same instant to a syphon in another process; each broker's stamps are read with
                # its own clock's offset (measured at open, sdk_offset), as share_clock reads them
                target.t0, target.t0_epoch_ms = time.monotonic() - time.time(), target.broker_clock.offset
                targets.append(target)
            return cls(targets[0], targets[1], options)
        except BaseException:
            for target in targets:
                target.close()
            raise

    # ------------------------------------------------------------ sending
    def send(self, entity: str, messages: Any) -> list[str]:
        """Send one message or several (``ServiceBusMessage`` or ``sbreference.Message``) to the
        queue or topic ``entity`` of the primary namespace. Returns where each went: ``entity``,
        or the backlog queue's path. Raises ``sbreference.ServiceBusError`` as the seed's client
        would (a failure within FailoverInterval, a client error, no backlog queue left)."""
        batch = list(messages) if isinstance(messages, (list, tuple)) else [messages]
        with self._lock:
            client = self._clients.get(entity) or self._clients.setdefault(entity, self.factory.client(entity))
            return [self.factory.send(client, from_sdk_message(m)) for m in batch]

    # ------------------------------------------------------------- syphon
    def start_syphon(self) -> None:
        with self._lock:
            self.factory.start_syphon()

    def stop_syphon(self) -> None:
        with self._lock:
            self.factory.stop_syphon()

    def backlog_counts(self) -> dict[str, int]:
        with self._lock:
            return self.factory.backlog_counts()

    def wait_for_empty_backlog(self, timeout: float) -> bool:
        """With the syphon on: wait until every backlog queue is empty (True) or ``timeout``
        seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(self.backlog_counts().values()):
                return True
            time.sleep(0.2)
        return not any(self.backlog_counts().values())

    # -------------------------------------------------------------- close
    def _loop(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            with self._lock:
                try:
                    self.factory.work()
                except ServiceBusError:
                    pass  # the machines keep their state; the next instant tries again
                due = self.factory.next_due()
                now = self.factory.now()
            delay = 1.0 if due is None else min(max((due - now) / 1000, 0.02), 1.0)

    def close(self) -> None:
        """Stop the background work, close both factories (PAIR-CLOSE-*) and every link."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        with self._lock:
            try:
                self.factory.close()
            finally:
                self.factory.dispose()
                for target in self._targets:
                    target.close()

    def __enter__(self) -> "PairedNamespaceSender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def set_entity_available(connection_string: str, entity: str, available: bool) -> None:
    """For demonstrations and tests against ``sbconform serve``: take an entity down (every
    operation on it fails with com.microsoft:entity-disabled) or bring it back, through the
    server's control node."""
    from ..targets.sdk import SdkTarget
    from ..targets.sdk_clock import SDK_OPEN_POLL

    target = SdkTarget(connection_string=connection_string, control="amqp", open_poll_ms=SDK_OPEN_POLL * 1000)
    target.open()
    try:
        if available:
            target.make_available(entity)
        else:
            target.make_unavailable(entity, "entity-unavailable", False)
    finally:
        target.close()
