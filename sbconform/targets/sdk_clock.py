"""Time on the SDK target: wall-clock milliseconds since the target opened, or virtual time where
the endpoint offers it (``sbconform serve``'s ``$sbconform`` node: ``advance-time``, ``next-due``),
and what waiting costs through the SDK (long receives, opening and closing a client).

With ``time=virtual`` the endpoint's clock is moved on instead of waiting; it also runs in real time
between moves (``clock_runs_in_real_time``). A receive with a wait is then a real one followed by
moves of the clock to the next instant at which time alone changes something; a receive on an
entity that holds no message a receive could be given does not wait in real time for one that
cannot come, and one on an entity that holds n asks the SDK for at most n."""

from __future__ import annotations

import time
from typing import Any

from sbreference import ServiceBusError

from .base import Handle, Received, Target


def close_sdk_client(client: Any) -> None:
    """Close an azure-servicebus sender or receiver without waiting for its keep-alive thread.

    The SDK's ``close`` sends the detach, end and close frames, then joins the keep-alive thread,
    which sleeps in steps of one second: every close waited about half a second after the
    connection was already closed (measured: 0.54 s a handle against ``sbconform serve``). The
    thread stops by itself at its next step, since its loop runs only while the connection is
    there; the close frames have gone out when ``close`` returns either way."""
    handler = getattr(client, "_handler", None)
    if handler is not None and getattr(handler, "_keep_alive_thread", None) is not None:
        handler._keep_alive_thread = None
    client.close()


#: What azure-servicebus sleeps between two looks at a handle it is opening (seconds): its open loops
#: (``_servicebus_receiver._open``, ``_servicebus_sender._open``, ``_session_browser._open``) and
#: pyamqp's wait for a link or a token (``_pyamqp.client``) read one frame, and sleep this long
#: whenever the handle is not ready yet.
SDK_OPEN_POLL = 0.05
#: The SDK modules with such a loop.
POLLING_MODULES = (
    "azure.servicebus._servicebus_receiver",
    "azure.servicebus._servicebus_sender",
    "azure.servicebus._session_browser",
    "azure.servicebus._pyamqp.client",
)
#: The target's default (option ``open_poll_ms``): an open is about nine frames from sbconform
#: serve, so the SDK's own 50 ms made every sender or receiver take 0.46 s to open (measured); at
#: 2 ms it takes what the frames take.
OPEN_POLL_MS = 2.0


class _PollingTime:
    """The ``time`` module as the SDK's polling modules see it: the same, but for the length of their
    open poll. Nothing else changes: the same frames go out and come back, in the same order, and
    every other sleep (keep-alive, retry back-off) is the SDK's own."""

    def __init__(self, poll: float) -> None:
        self.poll = poll

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(self.poll if seconds == SDK_OPEN_POLL else seconds)


def set_open_poll(poll_ms: float) -> list[str]:
    """Make the SDK's open poll last ``poll_ms`` milliseconds in this process; 50, the SDK's own,
    gives the modules their ``time`` back. Returns the modules whose poll is not the SDK's own. A
    version of the SDK without one of these modules, or whose module is not as we know it, keeps
    its own."""
    import importlib

    own = poll_ms / 1000 == SDK_OPEN_POLL
    changed = []
    for name in POLLING_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        current = getattr(module, "time", None)
        if not isinstance(current, _PollingTime) and current is not time:
            continue  # not the module we know: left as it is
        if own:
            module.time = time
            continue
        if isinstance(current, _PollingTime):
            current.poll = poll_ms / 1000
        else:
            module.time = _PollingTime(poll_ms / 1000)
        changed.append(name)
    return changed


class ClockMixin:
    """``now``, ``wait`` and the long receive of ``SdkTarget`` (which sets ``t0``, ``skew``,
    ``time_control``, ``control``, ``empty_wait`` and ``clock_partners``)."""

    t0: float
    skew: int
    time_control: bool
    control: Any
    empty_wait: int
    clock_partners: list

    def now(self) -> int:
        return int((time.monotonic() - self.t0) * 1000) + self.skew

    def wait(self, duration: int) -> None:
        """Virtual time where the endpoint offers it (``sbconform serve``'s ``advance-time``: locks,
        TTLs, schedules, session waits and transaction timeouts all follow), real time otherwise."""
        if duration <= 0:
            return
        if self.time_control:
            for target in [self, *self.clock_partners]:
                target.control.call("advance-time", ms=int(duration))
                target.skew += int(duration)
        else:
            time.sleep(duration / 1000)

    def _offers_time_control(self) -> bool:
        try:
            self.control.call("advance-time", ms=0)
            return True
        except ServiceBusError:  # an older endpoint: real time
            return False

    def share_clock(self, other: Target) -> None:
        """Paired namespaces on two endpoints: both measure time from one instant (paired_sdk), and
        with virtual time moving one's clock moves both."""
        from .paired_sdk import share_clock

        share_clock(self, other)  # type: ignore[arg-type]
        other = getattr(other, "unwrap", lambda: other)()
        if isinstance(other, ClockMixin) and other is not self and other.time_control and self.time_control:
            if other not in self.clock_partners:
                self.clock_partners.append(other)
                other.clock_partners.append(self)

    def _receive_now(self, receiver: Handle, max_count: int, wait_ms: int) -> list[Received]:  # pragma: no cover
        raise NotImplementedError  # SdkTarget's

    def _receive_in_virtual_time(self, receiver: Handle, max_count: int, wait_ms: int) -> list[Received]:
        """A wait on an endpoint with virtual time: a real receive of what the endpoint says is there
        to be given, then, while nothing came, the clock moves to the next instant at which time
        alone changes something (a lock expiring, a schedule falling due), never past the wait."""
        left = wait_ms
        while True:
            started = time.monotonic()
            got = self._receive_available(receiver, max_count, min(left, self.empty_wait))
            left -= int((time.monotonic() - started) * 1000)  # the endpoint's clock ran meanwhile
            if got or left <= 0:
                return got
            due = self.control.call("next-due").get("in")
            step = left if due is None else min(left, max(int(due), 1))
            self.wait(step)
            left -= step

    def _receive_available(self, receiver: Handle, max_count: int, wait_ms: int) -> list[Received]:
        """A real receive, sized by what the endpoint says a receive could be given now: with none,
        none (the endpoint answered for the entity, so it is there and receives are allowed; an
        SDK receive takes 0.2 s however short its wait); when it cannot say, one; with n, at
        most n messages, so that the SDK does not wait on for more (it waits 0.2 s past the first
        message for the rest of ``max_count``), waiting as long as they take to come over the wire
        even when the caller would not wait."""
        available = self._available(receiver)
        if available is None:
            return self._receive_now(receiver, max_count, wait_ms)
        if available == 0:
            return []
        return self._receive_now(receiver, min(max_count, available), max(wait_ms, self.empty_wait))

    def _available(self, receiver: Handle) -> int | None:
        """How many messages a receive on the receiver's entity could be given now, as the endpoint
        counts them (its control node's ``available``: stored, not locked, deferred or scheduled);
        None when it cannot say."""
        try:
            return int(self._node().call("available", path=receiver.path)["count"])
        except ServiceBusError:  # an unavailable entity, say: the real receive tells
            return None

    def _node(self) -> Any:  # pragma: no cover
        raise NotImplementedError  # SdkTarget's
