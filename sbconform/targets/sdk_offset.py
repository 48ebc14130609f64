"""How far the broker's clock is from the client's: measured, applied, and said (the SDK target in real time).

Without virtual time (capability ``virtual-time``: only ``sbconform serve`` has it) the SDK target
compares times the broker stamps (a lock's locked-until, a message's enqueued time and expiry, a
schedule's enqueue time) with the client's wall clock, within ``clock_tolerance``. Nothing made
the two clocks agree: on a machine whose clock was a second off, every lock read as a second too
long or too short, a false verdict on the lock clauses.

The offset is measured from probe messages. Service Bus stamps a message's enqueued time when it
accepts it: "The UTC instant at which the message has been accepted and stored in the entity. This
value can be used as an authoritative and neutral arrival time indicator when the receiver does
not want to trust the sender's clock"
(https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.servicebusreceivedmessage.enqueuedtime).
So the stamp falls between the client's send and its settlement: ``enqueued - after <= offset <=
enqueued - before``. Several probes each bound it; their intersection is the tightest bound, its
midpoint the offset and its half-width (plus the stamp's millisecond) the uncertainty
(:func:`offset_from`). The probes go to a queue of their own, created and deleted at once, once per
endpoint and process (again after ``REMEASURE_S``).

The target then counts its time on the broker's clock (``t0_epoch_ms``: the client's wall clock at
open plus the offset), and ``clock_tolerance`` grows by the uncertainty. When the uncertainty
exceeds ``MAX_UNCERTAINTY_MS``, or the offset could not be measured on an endpoint that is not this
machine, a step that compares clocks is skipped as not graded rather than failed (as the emulator
target skips what its documented quotas forbid). ``describe`` says the offset and its uncertainty:
the report's target line."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

#: how far apart the client's and the broker's clocks (and one call's latency) may be, before the
#: offset's uncertainty is added (ms)
CLOCK_TOLERANCE = 300
#: past this uncertainty (ms) a comparison of the broker's times with the client's grades nothing:
#: scenarios lock for 5 s, and a tolerance of 300 + 500 ms still tells a 5 s lock from a 4 s one
MAX_UNCERTAINTY_MS = 500
#: probe messages per measurement
PROBES = 4
#: a measurement is reused this long (s) by the targets of one process on one endpoint: clocks
#: drift by well under a millisecond a minute
REMEASURE_S = 600.0


@dataclass(frozen=True)
class ClockOffset:
    """The broker's clock minus the client's (ms); ``uncertainty`` None: not known."""

    offset: int
    uncertainty: int | None
    how: str

    def describe(self) -> str:
        if self.uncertainty is None:
            return f"offset unknown ({self.how}): clauses timed against the client's clock are not graded"
        return f"{self.offset:+d} ms ± {self.uncertainty} ms from the client's ({self.how})"


def offset_from(samples: Sequence[tuple[float, float, int]]) -> ClockOffset:
    """The offset from probes ``(sent, settled, enqueued)``: the client's wall clock (epoch ms) when it
    began sending and when it saw the settlement, and the broker's stamp (epoch ms, whole)."""
    bounds = [(enqueued - after, enqueued - before) for before, after, enqueued in samples]
    low, high = max(b[0] for b in bounds), min(b[1] for b in bounds)
    if low > high:  # the probes contradict each other (a clock stepped between them): the tightest alone
        low, high = min(bounds, key=lambda b: b[1] - b[0])
    return ClockOffset(round((low + high) / 2), round((high - low) / 2) + 1, f"measured from {len(samples)} probe messages")


#: endpoint -> (time.monotonic() when measured, what was measured)
_MEASURED: dict[str, tuple[float, ClockOffset]] = {}

_LOOPBACK = ("localhost", "127.0.0.1", "::1")


class BrokerClockMixin:
    """The SDK target's measurement of the broker's clock (``broker_clock``) and what it grades."""

    broker_clock: ClockOffset
    t0: float
    t0_epoch_ms: int
    host: str
    port: int
    control: Any
    client: Any
    created: list[str]

    @property
    def clock_tolerance(self) -> int:
        """How far apart the client's and the broker's clocks (and one call's latency) may be; a step
        that asks, to compare them, is skipped as not graded when the offset is not known well enough."""
        clock = self.broker_clock
        if clock.uncertainty is None or clock.uncertainty > MAX_UNCERTAINTY_MS:
            not_graded(f"not graded: the broker's clock is {clock.describe()}; comparing its times with the "
                       f"client's needs an offset known within {MAX_UNCERTAINTY_MS} ms")
        return CLOCK_TOLERANCE + int(clock.uncertainty or 0)

    def _count_on_broker_clock(self) -> None:
        """From now on the target's time is the broker's: its clock measured (real time), and the
        target's zero (``t0``, ``t0_epoch_ms``) this instant on it. Called by ``open``, and by a
        subclass that gets its provisioner only after (the emulator target)."""
        self.broker_clock = self._measure_broker_clock()
        self.t0 = time.monotonic()
        self.t0_epoch_ms = int(time.time() * 1000) + self.broker_clock.offset

    def _endpoint_key(self) -> str:
        return f"{self.host}:{self.port}"

    def said_clock(self) -> str:
        """The broker's clock for the report: this target's, or (a target never opened, as the
        plugin's probe is) what the process measured on its endpoint, if anything."""
        if getattr(self, "virtual_time", False):
            return "virtual time: the endpoint's own clock, read from its $sbconform node"
        if self.broker_clock.how != "not measured yet":
            return self.broker_clock.describe()
        from .sdk_support import parse_connection_string

        connection_string = getattr(self, "connection_string", None)
        if connection_string is None and getattr(self, "serve", False):  # serve=true: the server, if one was started
            from . import serve_process

            connection_string = getattr(serve_process._SERVE, "connection_string", None)
        endpoint = parse_connection_string(connection_string or "").get("endpoint", "")
        host, _, port = endpoint.split("://", 1)[-1].strip("/").partition(":")
        known = _MEASURED.get(f"{host or 'localhost'}:{int(port or 5672)}")
        return known[1].describe() if known else "not measured (no test opened the target)"

    def _measure_broker_clock(self) -> ClockOffset:
        """The broker's clock, measured once per endpoint and process (``REMEASURE_S``)."""
        key = self._endpoint_key()
        known = _MEASURED.get(key)
        if known is not None and time.monotonic() - known[0] < REMEASURE_S:
            return known[1]
        try:
            measured = self._probe_clock()
        except Exception as error:  # no queue may be created, a send refused: unknown, said
            measured = self._unmeasured(f"not measured: {str(error).splitlines()[0][:200] if str(error) else type(error).__name__}")
        if measured.how.startswith("measured"):  # not an assumption: another target may yet measure it
            _MEASURED[key] = (time.monotonic(), measured)
        return measured

    def _unmeasured(self, why: str) -> ClockOffset:
        if self.host in _LOOPBACK:  # this machine: one clock (a container shares the host's kernel clock)
            return ClockOffset(0, 0, f"{why}; the endpoint is on this machine, whose clock it shares")
        return ClockOffset(0, None, why)

    def _probe_clock(self) -> ClockOffset:
        from azure.servicebus import ServiceBusMessage

        from .sdk_clock import close_sdk_client
        from .sdk_support import _ms

        if self.control is None:
            return self._unmeasured("not measured: no queue can be created for the probes (control=none)")
        # straight through the provisioner: no tier guard, no emulator quota (a skip) for the kit's own queue
        path = self.control.call("create-queue", name=self._name("sbconform-clock"), properties={})["path"]  # type: ignore[attr-defined]
        self.created.append(path)  # deleted by close should the delete below fail
        try:
            sender = self.client.get_queue_sender(queue_name=path)
            sender.__enter__()
            sent: dict[str, tuple[float, float]] = {}
            try:
                for i in range(PROBES):
                    before = time.time() * 1000
                    sender.send_messages(ServiceBusMessage(b"clock probe", message_id=f"probe-{i}"))
                    sent[f"probe-{i}"] = (before, time.time() * 1000)
            finally:
                close_sdk_client(sender)
            receiver = self.client.get_queue_receiver(queue_name=path, prefetch_count=0)
            receiver.__enter__()
            try:
                stamped = {m.message_id: _ms(m.enqueued_time_utc) for m in receiver.peek_messages(max_message_count=PROBES)}
            finally:
                close_sdk_client(receiver)
        finally:
            try:
                self.control.call("delete", path=path)
                self.created.remove(path)
            except Exception:  # left for close, which deletes what the target created
                pass
        samples = [(*sent[mid], enqueued) for mid, enqueued in stamped.items() if mid in sent and enqueued is not None]
        if not samples:
            return self._unmeasured("not measured: the probe messages came back without an enqueued time")
        return offset_from(samples)


def not_graded(reason: str) -> None:
    """Skip the running test as not graded (a pytest skip: the report's "skip" with this reason)."""
    try:
        import pytest
    except ImportError:  # outside pytest: an error that says why, never a verdict
        raise RuntimeError(reason) from None
    pytest.skip(reason)
