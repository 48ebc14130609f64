"""The scenario world: what one scenario has created, sent, received and seen.

Scenarios name things ("queue q", "receiver A", "message m1"); the world maps names to
the target's paths, handles and received messages. Operations go through ``attempt``,
which records a ``ServiceBusError`` instead of raising it: the next step must be
``Then the operation fails with ...``, or the scenario fails (an error nobody asked
about is never swallowed).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest
from sbreference import SECOND, ErrorCode, Message, ServiceBusError

from sbconform.targets import PEEK_LOCK, RECEIVE_AND_DELETE, Handle, Received, Target

QUOTED = re.compile(r'"([^"]*)"')

#: the patterns of the steps that compare a time on the broker's clock (a lock's end, a schedule's
#: enqueue time) with the target's own: every scenario using one is tagged ``@needs:broker-clock``
#: (tests/test_targets_grading.py lints it)
CLOCK_STEPS: list[str] = []


def compares_clocks(pattern: str) -> str:
    """A step pattern, registered in ``CLOCK_STEPS``."""
    CLOCK_STEPS.append(pattern)
    return pattern


def quoted(text: str) -> list[str]:
    return QUOTED.findall(text)


def seconds(text: str | int) -> int:
    return int(text) * SECOND


# ------------------------------------------------------------------ phrases

_ENTITY_PHRASES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]]] = [
    (re.compile(r"lock duration (\d+) seconds?"), lambda m: {"lock_duration": seconds(m[1])}),
    (re.compile(r"max delivery count (\d+)"), lambda m: {"max_delivery_count": int(m[1])}),
    (re.compile(r"dead-lettering on expiration"), lambda m: {"dead_lettering_on_message_expiration": True}),
    (
        re.compile(r"duplicate detection window (\d+) seconds?"),
        lambda m: {"requires_duplicate_detection": True, "duplicate_detection_history_time_window": seconds(m[1])},
    ),
    (re.compile(r"sessions"), lambda m: {"requires_session": True}),
    (re.compile(r"status (Active|Disabled|SendDisabled|ReceiveDisabled)"), lambda m: {"status": m[1]}),
    (re.compile(r"default time to live (\d+) seconds?"), lambda m: {"default_message_time_to_live": seconds(m[1])}),
    (re.compile(r"max size (\d+) MB"), lambda m: {"max_size_in_megabytes": int(m[1])}),
    (re.compile(r"auto-delete on idle (\d+) minutes?"), lambda m: {"auto_delete_on_idle": seconds(m[1]) * 60}),
    (re.compile(r"max message size (\d+) (KB|MB)"), lambda m: {"max_message_size": int(m[1]) * (1024 if m[2] == "KB" else 1024 * 1024)}),
]

_MESSAGE_PHRASES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]]] = [
    (re.compile(r"a body of (\d+) bytes(?: each)?"), lambda m: {"body": b"x" * int(m[1])}),
    (
        re.compile(r'a property "([^"]+)" of (\d+) characters'),
        lambda m: {"application_properties": {m[1]: "p" * int(m[2])}},
    ),
    (re.compile(r'session "([^"]+)"'), lambda m: {"session_id": m[1]}),
    (re.compile(r'partition key "([^"]+)"'), lambda m: {"partition_key": m[1]}),
    (re.compile(r"time to live (\d+) seconds?"), lambda m: {"time_to_live": seconds(m[1])}),
    (re.compile(r'content type "([^"]+)"'), lambda m: {"content_type": m[1]}),
    (re.compile(r"no message id"), lambda m: {"message_id": None}),
    (re.compile(r"a (message|session) id of (\d+) characters"), lambda m: {f"{m[1]}_id": m[1][0] * int(m[2])}),
]


def parse_phrases(text: str, phrases: list, what: str) -> dict[str, Any]:
    """'lock duration 5 seconds and max delivery count 3' -> field values."""
    out: dict[str, Any] = {}
    for part in re.split(r",\s*|\s+and\s+(?=[a-z])", text.strip()):
        part = part.strip()
        if not part:
            continue
        for pattern, build in phrases:
            match = pattern.fullmatch(part)
            if match:
                out.update(build(match))
                break
        else:
            raise ValueError(f"unknown {what} phrase {part!r} in {text!r}")
    return out


def entity_properties(text: str) -> dict[str, Any]:
    return parse_phrases(text, _ENTITY_PHRASES, "entity property")


def message_attributes(text: str | None) -> dict[str, Any]:
    return parse_phrases(text, _MESSAGE_PHRASES, "message attribute") if text else {}


# -------------------------------------------------------------------- world


class World:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.paths: dict[str, str] = {}
        self.receivers: dict[str, Handle] = {}
        self.senders: dict[str, Handle] = {}
        self.peekers: dict[str, Handle] = {}
        self.got: dict[str, list[Received]] = {}  # receiver -> its last receive
        self.held: dict[str, dict[str, Received]] = {}  # receiver -> message id -> latest delivery
        self.received_at: dict[str, int] = {}  # message id -> when it was last received
        self.sequence_numbers: dict[str, int] = {}  # message id -> last known sequence number
        self.scheduled: dict[str, int] = {}  # message id -> number returned by scheduling
        self.renewals: dict[str, tuple[int, int, int]] = {}  # id or receiver -> (renewal asked, answered, locked until)
        self.receive_began: dict[str, int] = {}  # id -> the target's time when the receive that got it was asked for
        self.peeked: list[Received] = []
        self.error: ServiceBusError | None = None
        self.error_checked = True

    # ----------------------------------------------------------- errors
    def attempt(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.require_no_pending_error()
        try:
            return operation(*args, **kwargs)
        except ServiceBusError as error:
            self.error = error
            self.error_checked = False
            return None

    def require_no_pending_error(self) -> None:
        if not self.error_checked:
            raise AssertionError(f"an earlier step failed unexpectedly: {self.error}")

    def take_error(self) -> ServiceBusError:
        if self.error is None or self.error_checked:
            raise AssertionError("the operation was expected to fail, but it succeeded")
        self.error_checked = True
        return self.error

    # ------------------------------------------------------------ names
    def path(self, ref: str) -> str:
        """'q', 'q/$DeadLetterQueue', 't/Subscriptions/s1' -> the target's path."""
        head, sep, rest = ref.partition("/")
        if head not in self.paths:
            raise AssertionError(f"the scenario never created an entity named {head!r}")
        return self.paths[head] + sep + rest

    def sender(self, ref: str) -> Handle:
        path = self.path(ref)
        if path not in self.senders:
            self.senders[path] = self.target.sender(path)
        return self.senders[path]

    def receiver(self, name: str, ref: str | None = None, mode: str = PEEK_LOCK) -> Handle:
        if ref is not None and name not in self.receivers:
            self.receivers[name] = self.target.receiver(self.path(ref), mode)
        if name not in self.receivers:
            raise AssertionError(f"receiver {name!r} was never opened (say 'receiver \"{name}\" on \"<entity>\"')")
        return self.receivers[name]

    def peeker(self, ref: str) -> Handle:
        path = self.path(ref)
        if path not in self.peekers:
            self.peekers[path] = self.target.receiver(path)
        return self.peekers[path]

    def message(self, receiver: str, message_id: str) -> Received:
        try:
            return self.held[receiver][message_id]
        except KeyError:
            raise AssertionError(f"receiver {receiver!r} never received {message_id!r}") from None

    # ------------------------------------------------------------ actions
    def record(self, receiver: str, messages: list[Received], began: int | None = None) -> None:
        """``began``: the target's time before the receive was asked for (its lock was taken between then and now)."""
        now = self.target.now()
        self.got[receiver] = messages
        held = self.held.setdefault(receiver, {})
        for m in messages:
            held[m.message_id] = m
            self.received_at[m.message_id] = now
            self.receive_began[m.message_id] = now if began is None else began
            self.sequence_numbers[m.message_id] = m.sequence_number

    def receive(self, name: str, count: int, wait: int | None = None) -> None:
        """Receive until ``count`` messages arrived or a receive came back empty."""
        handle = self.receiver(name)
        out: list[Received] = []
        first = True
        began = self.target.now()
        while len(out) < count:
            batch = self.attempt(self.target.receive, handle, count - len(out), wait if first else None)
            if batch is None:  # failed: the error is pending
                return
            first = False
            if not batch:
                break
            out.extend(batch)
        self.record(name, out, began)

    def peek_all(self, ref: str, page: int = 250) -> list[Received]:
        """Every message, peeking on from the last sequence number seen until a peek
        comes back empty (a partitioned entity answers one partition at a time)."""
        self.require_no_pending_error()
        found: list[Received] = []
        start = 1
        while True:
            batch = self.target.peek(self.peeker(ref), page, start)
            if not batch:
                break
            early = [m.sequence_number for m in batch if m.sequence_number < start]
            if early:  # else a peek that ignores its start would page here for ever (SETTLE-PEEK-002)
                raise AssertionError(f"a peek from sequence number {start} returned sequence numbers {early}")
            found.extend(batch)
            start = max(m.sequence_number for m in batch) + 1
        for m in found:
            self.sequence_numbers.setdefault(m.message_id, m.sequence_number)
        return found

    def sequence_of(self, message_id: str, ref: str) -> int:
        if message_id not in self.sequence_numbers:
            self.peek_all(ref)
        if message_id not in self.sequence_numbers:
            raise AssertionError(f"no sequence number known for {message_id!r}")
        return self.sequence_numbers[message_id]

    def build(self, message_id: str, attributes: dict[str, Any]) -> Message:
        """The scenario's name is the message id, unless the scenario gives one ("a message id of
        129 characters"): such a message is only ever refused, never looked up by name."""
        return Message(**{"body": message_id.encode(), "message_id": message_id, **attributes})

    def settle(self, receiver: str, op: str, message: Received, reason: str | None = None, description: str | None = None,
               properties: dict | None = None) -> None:
        """``properties``: application properties to modify (SETTLE-MOD-001), for abandon, defer
        and dead-letter; passed only when given."""
        handle = self.receiver(receiver)
        t = self.target
        extra = {"properties": properties} if properties else {}
        if op == "completes":
            self.attempt(t.complete, handle, message)
        elif op == "abandons":
            self.attempt(t.abandon, handle, message, **extra)
        elif op == "defers":
            self.attempt(t.defer, handle, message, **extra)
        elif op == "dead-letters":
            self.attempt(t.dead_letter, handle, message, reason, description, **extra)
        elif op == "renews the lock on":
            renewed_at = t.now()
            until = self.attempt(t.renew_lock, handle, message)
            if until is not None:
                self.renewals[message.message_id] = (renewed_at, t.now(), until)
        else:
            raise ValueError(f"unknown settlement {op!r}")

    def close(self) -> None:
        for handle in [*self.receivers.values(), *self.senders.values(), *self.peekers.values()]:
            try:
                self.target.close_handle(handle)
            except ServiceBusError:
                pass


__all__ = [
    "ErrorCode",
    "PEEK_LOCK",
    "RECEIVE_AND_DELETE",
    "World",
    "entity_properties",
    "message_attributes",
    "quoted",
    "seconds",
    "broker_clock_tolerance",
    "stamp_tolerance",
    "compares_clocks",
    "CLOCK_STEPS",
]


def broker_clock_tolerance(world: Any) -> int:
    """For a step comparing a time on the broker's clock (a lock's end, a schedule's enqueue time) with
    the target's own (``CLOCK_STEPS``): how far apart the two may be. The target must declare
    ``broker-clock``: the scenario says ``@needs:broker-clock`` and is skipped up front where it
    lacks it; one that reached this step untagged is skipped here with the same reason."""
    target = world.target
    if "broker-clock" not in target.capabilities:
        why = (getattr(target, "lacking", None) or {}).get("broker-clock")
        pytest.skip(f"target {target.name!r} lacks capability 'broker-clock'" + (f" ({why})" if why else "")
                    + "; the scenario does not say @needs:broker-clock")
    return int(getattr(target, "clock_tolerance", 0))


def stamp_tolerance(world: Any) -> int:
    """For a step comparing two times the broker stamped (an expiry and an enqueue time): one clock,
    so the broker's offset from the target's does not count (``stamp_tolerance``, else the clock's)."""
    return int(getattr(world.target, "stamp_tolerance", getattr(world.target, "clock_tolerance", 0)))


def assert_locked_for(world: World, until: int | None, began: int, ended: int, n: str, what: str, when: str) -> None:
    """The lock was taken (or renewed) some time during the call, between ``began`` and ``ended`` on the
    target's clock: ``until`` is ``n`` seconds after an instant in that span, within the target's
    clock tolerance. (The span is one instant on the model; through an SDK a call takes time, and
    measured from one end alone a slow call read as a lock seconds too long or short.)"""
    tolerance = broker_clock_tolerance(world)
    taken = None if until is None else until - seconds(n)
    assert taken is not None and began - tolerance <= taken <= ended + tolerance, (
        f"{what} is locked until {until}: {None if until is None else until - began} ms after {when} was asked for, "
        f"{None if until is None else until - ended} ms after it was answered (expected {seconds(n)})"
    )
