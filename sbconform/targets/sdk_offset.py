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
open plus the offset), and ``clock_tolerance`` grows by the uncertainty. The target declares the
capability ``broker-clock`` (sbspec/vocabulary.toml) only when the uncertainty is within
``MAX_UNCERTAINTY_MS``: otherwise, or when the offset could not be measured on an endpoint that is
not this machine, the scenarios comparing the broker's times with the target's clock (tagged
``@needs:broker-clock``: locks, schedules) are skipped up front with the plugin's reason "target
'sdk' lacks capability 'broker-clock' (...)", and the steps comparing two of the broker's own times
(an expiry and an enqueue time: ``stamp_tolerance``) still run. The plugin asks a target it never
opens: asking for ``broker-clock`` measures then (``capabilities.Capabilities``), once per endpoint
and process. ``describe`` says the offset and its uncertainty: the report's target line."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..amqp.sas import LOOPBACK_NAMES
from .capabilities import Capabilities, declared_names

#: how far apart the client's and the broker's clocks (and one call's latency) may be, before the
#: offset's uncertainty is added (ms)
CLOCK_TOLERANCE = 300
#: past this uncertainty (ms) a comparison of the broker's times with the client's grades nothing:
#: scenarios lock for 5 s, and a tolerance of 300 + 500 ms still tells a 5 s lock from a 4 s one
MAX_UNCERTAINTY_MS = 500
#: the capability of comparing the broker's times with the target's clock (sbspec/vocabulary.toml)
BROKER_CLOCK = "broker-clock"
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


def host_port(endpoint: str) -> tuple[str, int]:
    """``sb://host:port/`` (a connection string's Endpoint) -> ``(host, port)``: localhost and 5672 when not said."""
    host, _, port = endpoint.split("://", 1)[-1].strip("/").partition(":")
    return host or "localhost", int(port or 5672)


#: endpoint -> (time.monotonic() when measured, what was measured)
_MEASURED: dict[str, tuple[float, ClockOffset]] = {}


def _recent(endpoint: str) -> ClockOffset | None:
    """What this process measured on ``endpoint`` less than ``REMEASURE_S`` ago, if anything."""
    known = _MEASURED.get(endpoint)
    return known[1] if known is not None and time.monotonic() - known[0] < REMEASURE_S else None


class BrokerClockMixin:
    """The SDK target's measurement of the broker's clock (``broker_clock``), what it grades
    (the capability ``broker-clock``) and its ``capabilities``: the declared ones (``_declared``)
    and ``broker-clock``, decided from the measurement when asked about."""

    broker_clock: ClockOffset
    t0: float
    t0_epoch_ms: int
    host: str
    port: int
    control: Any
    client: Any
    created: list[str]
    name: str
    lacking: Mapping[str, str]
    virtual_time: bool = False
    _opened: bool
    declared_capabilities: frozenset[str] = frozenset()
    #: how far two times the broker stamped (an expiry and an enqueue time) may be from what the
    #: scenario says: one clock, so the offset and its uncertainty are not in it
    stamp_tolerance = CLOCK_TOLERANCE

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(self.__dict__.get("_declared", self.declared_capabilities), {BROKER_CLOCK: self._has_broker_clock})

    @capabilities.setter
    def capabilities(self, value: Any) -> None:
        self._declared = declared_names(value) - {BROKER_CLOCK}

    @property
    def clock_tolerance(self) -> int:
        """How far apart the client's and the broker's clocks (and one call's latency) may be. Meaningful
        for comparing the two only where the target has ``broker-clock``; reading it never skips."""
        return CLOCK_TOLERANCE + int(self.broker_clock.uncertainty or 0)

    def _has_broker_clock(self) -> bool:
        """Whether the broker's times can be compared with the target's clock: one clock (virtual
        time), or the offset measured within ``MAX_UNCERTAINTY_MS``. A target never opened (the
        plugin's probe) takes what this process measured on its endpoint, else measures now. When
        not, ``lacking`` says why (the plugin appends it to the skip reason)."""
        if self.virtual_time:
            return True
        clock = self.broker_clock if self.broker_clock.how != "not measured yet" else self._probes_clock()
        if clock.uncertainty is None:
            why = f"the broker's clock is {clock.describe()}"
        elif clock.uncertainty > MAX_UNCERTAINTY_MS:
            why = (f"the broker's clock is {clock.describe()}; comparing its times with the client's needs an offset "
                   f"known within {MAX_UNCERTAINTY_MS} ms")
        else:
            if BROKER_CLOCK in self.lacking:
                self.lacking = {k: v for k, v in self.lacking.items() if k != BROKER_CLOCK}
            return True
        self.lacking = {**self.lacking, BROKER_CLOCK: why}
        return False

    def _probes_clock(self) -> ClockOffset:
        """A target not opened: the measurement of its endpoint in this process, else one made by
        opening it (and closing it again)."""
        known = _recent(self._configured_endpoint())
        if known is not None:
            self.broker_clock = known
            return known
        if getattr(self, "_opened", False):  # opened without measuring (never the case today): left unknown
            return ClockOffset(0, None, "not measured by the open target")
        try:
            self.open()  # type: ignore[attr-defined]
        except Exception as error:  # the test's own open will say it; here: not measured
            self.broker_clock = ClockOffset(0, None, f"not measured: opening the target failed ({type(error).__name__})")
        finally:
            self.close()  # type: ignore[attr-defined]
        return self.broker_clock

    def _configured_endpoint(self) -> str:
        """``host:port`` of the connection string given (or of the server serve=true started), if any yet."""
        from .sdk_support import parse_connection_string

        connection_string = getattr(self, "connection_string", None)
        if connection_string is None and getattr(self, "serve", False):  # serve=true: the server, if one was started
            from . import serve_process

            connection_string = getattr(serve_process._SERVE, "connection_string", None)
        host, port = host_port(parse_connection_string(connection_string or "").get("endpoint", ""))
        return f"{host}:{port}"

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
        known = _MEASURED.get(self._configured_endpoint())
        return known[1].describe() if known else "not measured (no test opened the target)"

    def _measure_broker_clock(self) -> ClockOffset:
        """The broker's clock, measured once per endpoint and process (``REMEASURE_S``)."""
        key = self._endpoint_key()
        known = _recent(key)
        if known is not None:
            return known
        try:
            measured = self._probe_clock()
        except Exception as error:  # no queue may be created, a send refused: unknown, said
            measured = self._unmeasured(f"not measured: {str(error).splitlines()[0][:200] if str(error) else type(error).__name__}")
        if measured.how.startswith("measured"):  # not an assumption: another target may yet measure it
            _MEASURED[key] = (time.monotonic(), measured)
        return measured

    def _unmeasured(self, why: str) -> ClockOffset:
        if self.host in LOOPBACK_NAMES:  # this machine: one clock (a container shares the host's kernel clock)
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
