"""Step definitions shared by every feature. Each step talks only to the Target.

Action steps are registered for Given, When and Then alike, so scenarios can read
naturally ("Then ... And receiver A receives 1 message").
"""

from __future__ import annotations

import pytest
from pytest_bdd import parsers
from pytest_bdd import step as bdd_step

from sbconform.targets import PEEK_LOCK, RECEIVE_AND_DELETE
from sbreference import ServiceBusError

from .world import (
    World,
    assert_locked_for,
    broker_clock_tolerance,
    compares_clocks,
    entity_properties,
    message_attributes,
    quoted,
    seconds,
    stamp_tolerance,
)

IDS = r'"[^"]+"(?:, "[^"]+")*'
NAME = r'"(?P<{}>[^"]+)"'


def step(pattern: str):
    """Register one regex step for Given, When and Then alike."""
    return bdd_step(parsers.re(pattern))


@pytest.fixture
def world(sb_target):
    w = World(sb_target)
    yield w
    w.close()
    for close in getattr(w, "closers", []):  # transactional clients (steps/transactions.py)
        close()
    for extra in getattr(w, "extra_targets", []):
        extra.close()
    if not w.error_checked:
        raise AssertionError(f"the scenario ended with an error no step checked: {w.error}")


# ---------------------------------------------------------------- entities


@step(r'a queue "(?P<name>[^"]+)"')
def create_plain_queue(world: World, name: str) -> None:
    world.paths[name] = world.target.create_queue(name)


@step(r'a queue "(?P<name>[^"]+)" with (?P<props>(?:(?! is created$).)+)')
def create_queue(world: World, name: str, props: str) -> None:
    world.paths[name] = world.target.create_queue(name, **entity_properties(props))


@step(r'a queue "(?P<name>[^"]+)" with (?P<props>.+) is created')
def try_create_queue(world: World, name: str, props: str) -> None:
    path = world.attempt(world.target.create_queue, name, **entity_properties(props))
    if path is not None:
        world.paths[name] = path


@step(r'a queue "(?P<name>[^"]+)" forwarding to the missing entity "(?P<dest>[^"]+)" is created')
def try_create_forwarding_to_missing(world: World, name: str, dest: str) -> None:
    path = world.attempt(world.target.create_queue, name, forward_to=dest + "-never-created")
    if path is not None:
        world.paths[name] = path


@step(r'"(?P<entity>[^"]+)" is updated to forward to (?:the missing entity )?"(?P<dest>[^"]+)"')
def update_forwarding(world: World, entity: str, dest: str) -> None:
    target = world.paths.get(dest, dest + "-never-created")
    world.attempt(world.target.update_entity, world.path(entity), forward_to=target)


@step(r'a queue named "(?P<name>[^"]+)" is created')
def try_create_named_queue(world: World, name: str) -> None:
    world.attempt(world.target.create_queue, name)


@step(r'a queue with a name of (?P<n>\d+) characters is created')
def try_create_long_queue(world: World, n: str) -> None:
    world.attempt(world.target.create_queue, "q" * int(n))


@step(r'a subscription with a name of (?P<n>\d+) characters is created on "(?P<topic>[^"]+)"')
def try_create_long_subscription(world: World, n: str, topic: str) -> None:
    world.attempt(world.target.create_subscription, world.path(topic), "s" * int(n))


@step(r'a queue "(?P<name>[^"]+)" forwarding its dead letters to "(?P<dest>[^"]+)"(?: with (?P<props>.+))?')
def create_dead_letter_forwarding_queue(world: World, name: str, dest: str, props: str | None) -> None:
    world.paths[name] = world.target.create_queue(
        name, forward_dead_lettered_messages_to=world.path(dest), **entity_properties(props or "")
    )


@step(r'a topic "(?P<name>[^"]+)" with (?P<props>(?!subscriptions ).+) is created')
def try_create_topic(world: World, name: str, props: str) -> None:
    path = world.attempt(world.target.create_topic, name, **entity_properties(props))
    if path is not None:
        world.paths[name] = path


@step(r'a topic "(?P<name>[^"]+)" with subscriptions (?P<subs>.+)')
def create_topic(world: World, name: str, subs: str) -> None:
    path = world.paths[name] = world.target.create_topic(name)
    for sub in quoted(subs):
        world.target.create_subscription(path, sub)


# ----------------------------------------------------------------- sending


@step(
    r"messages? (?P<ids>" + IDS + r")(?: with (?P<attrs>.+?))? (?:is|are) sent to \"(?P<entity>[^\"]+)\""
    r"(?P<how> as one batch| without waiting for each other| pre-settled)?"
)
def send_messages(world: World, ids: str, attrs: str | None, entity: str, how: str | None) -> None:
    attributes = message_attributes(attrs)
    messages = [world.build(mid, attributes) for mid in quoted(ids)]
    sender = world.attempt(world.sender, entity)  # a target may refuse the link itself (SETTLE-STATUS-001)
    if sender is None:
        return
    t = world.target
    if how == " as one batch":
        world.attempt(t.send, sender, messages, batch=True)
    elif how == " without waiting for each other":
        world.attempt(t.send_concurrently, sender, messages)
    elif how == " pre-settled":
        world.attempt(t.send_presettled, sender, messages)
    else:
        for message in messages:
            world.attempt(t.send, sender, [message])
            if not world.error_checked:
                return


@step(r'message "(?P<mid>[^"]+)" is sent to the missing entity "(?P<name>[^"]+)"')
def send_to_missing(world: World, mid: str, name: str) -> None:
    def send() -> None:
        sender = world.target.sender(name + "-never-created")
        world.target.send(sender, [world.build(mid, {})])

    world.attempt(send)


@step(compares_clocks(r'message "(?P<mid>[^"]+)" is scheduled on "(?P<entity>[^"]+)" in (?P<n>\d+) seconds'))
def schedule_message(world: World, mid: str, entity: str, n: str) -> None:
    broker_clock_tolerance(world)  # the enqueue time is the target's now on the broker's clock, as a lock's end is read
    t = world.target
    numbers = world.attempt(t.schedule, world.sender(entity), [world.build(mid, {})], t.now() + seconds(n))
    if numbers is not None:
        assert len(numbers) == 1, f"scheduling one message answered {numbers!r}, not its sequence number (SETTLE-SCHED-001)"
        world.scheduled[mid] = numbers[0]
        world.senders.setdefault(f"scheduled:{mid}", world.sender(entity))


@step(compares_clocks(r'messages (?P<ids>' + IDS + r') are scheduled on "(?P<entity>[^"]+)" in (?P<n>\d+) seconds'))
def schedule_messages(world: World, ids: str, entity: str, n: str) -> None:
    broker_clock_tolerance(world)
    t = world.target
    mids = quoted(ids)
    numbers = world.attempt(t.schedule, world.sender(entity), [world.build(mid, {}) for mid in mids], t.now() + seconds(n))
    if numbers is not None:
        assert len(numbers) == len(mids), f"scheduling {len(mids)} messages answered {numbers!r} (SETTLE-SCHED-001)"
        world.scheduled.update(zip(mids, numbers))


@step(r'the scheduled messages (?P<ids>' + IDS + r') have different sequence numbers')
def scheduled_apart(world: World, ids: str) -> None:
    numbers = [world.scheduled.get(mid) for mid in quoted(ids)]
    assert len(set(numbers)) == len(numbers), f"scheduling answered the sequence numbers {numbers}"


@step(r'the scheduled message "(?P<mid>[^"]+)" is cancelled')
def cancel_scheduled(world: World, mid: str) -> None:
    world.attempt(world.target.cancel_scheduled, world.senders[f"scheduled:{mid}"], [world.scheduled[mid]])


@step(r'the scheduled message with sequence number (?P<seq>\d+) is cancelled on "(?P<entity>[^"]+)"')
def cancel_unknown(world: World, seq: str, entity: str) -> None:
    world.attempt(world.target.cancel_scheduled, world.sender(entity), [int(seq)])


# --------------------------------------------------------------- receivers


@step(r'receiver "(?P<r>[^"]+)" on "(?P<entity>[^"]+)"(?P<rad> in receive-and-delete mode)?')
def open_receiver(world: World, r: str, entity: str, rad: str | None) -> None:
    world.receiver(r, entity, RECEIVE_AND_DELETE if rad else PEEK_LOCK)


@step(
    r'receiver "(?P<r>[^"]+)"(?: on "(?P<entity>[^"]+)")? receives (?P<n>\d+) messages?'
    r"(?: within (?P<wait>\d+) seconds?)?"
)
def receive(world: World, r: str, entity: str | None, n: str, wait: str | None) -> None:
    # opening the receiver is part of the operation: a target may refuse its link (SETTLE-STATUS-002)
    if world.attempt(world.receiver, r, entity) is None:
        return
    world.receive(r, int(n), seconds(wait) if wait else None)


@step(r'receiver "(?P<r>[^"]+)"(?: on "(?P<entity>[^"]+)")? receives and abandons "(?P<mid>[^"]+)" (?P<n>\d+) (?:more )?times')
def receive_and_abandon(world: World, r: str, entity: str | None, mid: str, n: str) -> None:
    world.receiver(r, entity)
    for i in range(int(n)):
        world.receive(r, 1)
        got = [m.message_id for m in world.got.get(r, [])]
        assert got == [mid], f"delivery {i + 1}: expected {mid!r}, got {got}"
        world.settle(r, "abandons", world.message(r, mid))
        world.require_no_pending_error()


@step(r'receiver "(?P<r>[^"]+)" on "(?P<entity>[^"]+)" (?P<op>dead-letters|defers) every message it receives')
def settle_everything(world: World, r: str, entity: str, op: str) -> None:
    world.receiver(r, entity)
    while True:
        world.receive(r, 10)
        world.require_no_pending_error()
        batch = world.got[r]
        if not batch:
            return
        for m in batch:
            world.settle(r, op, m, "sbconform" if op == "dead-letters" else None, "test" if op == "dead-letters" else None)
            world.require_no_pending_error()


@step(r'receiver "(?P<r>[^"]+)"(?: on "(?P<entity>[^"]+)")? receives the deferred message "(?P<mid>[^"]+)"')
def receive_deferred(world: World, r: str, entity: str | None, mid: str) -> None:
    handle = world.receiver(r, entity)
    ref = entity or next(k for k, v in world.paths.items() if handle.path.startswith(v))
    seq = world.sequence_of(mid, ref)
    found = world.attempt(world.target.receive_deferred, handle, [seq])
    if found is not None:
        world.record(r, found)


@step(r'receiver "(?P<r>[^"]+)" (?P<op>completes|abandons|defers|dead-letters|renews the lock on) "(?P<mid>[^"]+)"')
def settle(world: World, r: str, op: str, mid: str) -> None:
    world.settle(r, op, world.message(r, mid))


@step(r'receiver "(?P<r>[^"]+)" dead-letters "(?P<mid>[^"]+)" with reason "(?P<reason>[^"]*)" and description "(?P<desc>[^"]*)"')
def dead_letter_with_reason(world: World, r: str, mid: str, reason: str, desc: str) -> None:
    world.settle(r, "dead-letters", world.message(r, mid), reason, desc)


@step(
    r'receiver "(?P<r>[^"]+)" (?P<op>completes|abandons|defers|dead-letters|renews the lock on) '
    r'the message "(?P<mid>[^"]+)" that "(?P<holder>[^"]+)" holds'
)
def settle_someone_elses(world: World, r: str, op: str, mid: str, holder: str) -> None:
    world.settle(r, op, world.message(holder, mid))


@step(r'the connection of receiver "(?P<r>[^"]+)" drops')
def drop_connection(world: World, r: str) -> None:
    world.attempt(world.target.drop_connection, world.receiver(r))


@step(r"(?P<n>\d+) seconds pass")
def time_passes(world: World, n: str) -> None:
    world.require_no_pending_error()
    world.target.wait(seconds(n))


# ---------------------------------------------------------------- sessions


@step(r'receiver "(?P<r>[^"]+)" accepts session "(?P<s>[^"]+)" on "(?P<entity>[^"]+)"')
def accept_session(world: World, r: str, s: str, entity: str) -> None:
    handle = world.attempt(world.target.accept_session, world.path(entity), s)
    if handle is not None:
        world.receivers[r] = handle


@step(r'receiver "(?P<r>[^"]+)" accepts the next available session on "(?P<entity>[^"]+)"')
def accept_next_session(world: World, r: str, entity: str) -> None:
    handle = world.attempt(world.target.accept_session, world.path(entity), None)
    if handle is not None:
        world.receivers[r] = handle


@step(r'receiver "(?P<r>[^"]+)" renews its session lock')
def renew_session_lock(world: World, r: str) -> None:
    renewed_at = world.target.now()
    until = world.attempt(world.target.renew_session_lock, world.receiver(r))
    if until is not None:
        world.renewals[r] = (renewed_at, world.target.now(), until)


@step(r'receiver "(?P<r>[^"]+)" sets a session state of (?P<kb>\d+) KB')
def set_large_session_state(world: World, r: str, kb: str) -> None:
    world.attempt(world.target.set_session_state, world.receiver(r), b"s" * (int(kb) * 1024))


@step(r'receiver "(?P<r>[^"]+)" sets the session state to "(?P<state>[^"]*)"')
def set_session_state(world: World, r: str, state: str) -> None:
    world.attempt(world.target.set_session_state, world.receiver(r), state.encode())


@step(r'receiver "(?P<r>[^"]+)" closes')
def close_receiver(world: World, r: str) -> None:
    world.attempt(world.target.close_handle, world.receivers.pop(r))


# ------------------------------------------------------------------ checks


@step(r"the operation succeeds")
def operation_succeeds(world: World) -> None:
    world.require_no_pending_error()


@step(r"the operation is refused")
def operation_refused(world: World) -> None:
    """Any error conforms: the clause names no condition (the broker's is one the SDKs do not map)."""
    world.take_error()


@step(r'the operation fails with "(?P<code>[^"]+)"')
def operation_fails(world: World, code: str) -> None:
    error = world.take_error()
    assert str(error.code) == code, f"expected {code!r}, got {error.code!s}: {error.text}"


@step(r'the operation fails with "(?P<code>[^"]+)", or with "(?P<client>[^"]+)" when the client refuses it first')
def failed_either(world: World, code: str, client: str) -> None:
    """For limits a client library may enforce before asking the broker (the Python SDK
    refuses a MessageId over 128 characters with ValueError): either refusal is conforming."""
    error = world.take_error()
    assert str(error.code) in (code, client), f"expected {code!r} (or {client!r}), got {error.code!s}: {error.text}"


@step(r'the operation fails with either "(?P<one>[^"]+)" or "(?P<other>[^"]+)"')
def failed_with_either(world: World, one: str, other: str) -> None:
    """For a refusal the clause does not pin to one condition and brokers word two ways (an update the
    management REST API refuses is HTTP 400, an argument error; over AMQP an invalid operation)."""
    error = world.take_error()
    assert str(error.code) in (one, other), f"expected {one!r} or {other!r}, got {error.code!s}: {error.text}"


@step(r"the error (?P<tracking>has a tracking id and )?says a retry will not succeed")
def error_details(world: World, tracking: str | None) -> None:
    error = world.error
    assert error is not None, "no error to inspect"
    if tracking:
        assert error.tracking_id, f"the error carries no tracking id: {error!r}"
    assert error.transient is False, f"the error says a retry may succeed: {error!r}"


@step(r'receiver "(?P<r>[^"]+)" got no message')
def got_nothing(world: World, r: str) -> None:
    world.require_no_pending_error()
    got = [m.message_id for m in world.got.get(r, [])]
    assert got == [], f"receiver {r!r} got {got}"


@step(r'receiver "(?P<r>[^"]+)" got (?P<ids>' + IDS + r")(?: with delivery count (?P<dc>\d+))?")
def got_messages(world: World, r: str, ids: str, dc: str | None) -> None:
    world.require_no_pending_error()
    got = world.got.get(r, [])
    assert [m.message_id for m in got] == quoted(ids), f"receiver {r!r} got {[m.message_id for m in got]}, expected {quoted(ids)}"
    if dc is not None:
        counts = [m.delivery_count for m in got]
        assert all(c == int(dc) for c in counts), f"delivery counts {counts}, expected {dc}"


@step(r'receiver "(?P<r>[^"]+)" got "(?P<mid>[^"]+)" with reason "(?P<reason>[^"]*)" and description "(?P<desc>[^"]*)"')
def got_with_reason(world: World, r: str, mid: str, reason: str, desc: str) -> None:
    m = world.message(r, mid)
    assert (m.dead_letter_reason, m.dead_letter_description) == (reason, desc), (
        f"reason/description {(m.dead_letter_reason, m.dead_letter_description)}"
    )
    props = dict(m.application_properties)
    assert props.get("DeadLetterReason") == reason, f"DeadLetterReason property is {props.get('DeadLetterReason')!r}"
    assert props.get("DeadLetterErrorDescription") == desc


@step(r'receiver "(?P<r>[^"]+)" got "(?P<mid>[^"]+)" with the dead-letter source "(?P<source>[^"]+)"')
def got_with_dead_letter_source(world: World, r: str, mid: str, source: str) -> None:
    """SETTLE-FWD-002: DeadLetterSource names the entity the message was dead-lettered in (paths
    compare without case, as Service Bus names entities)."""
    m = world.message(r, mid)
    assert (m.dead_letter_source or "").lower() == world.path(source).lower(), f"dead-letter source {m.dead_letter_source!r}"


@step(r'receiver "(?P<r>[^"]+)" holds session "(?P<s>[^"]+)"')
def holds_session(world: World, r: str, s: str) -> None:
    world.require_no_pending_error()
    assert world.receiver(r).session_id == s, f"receiver {r!r} holds {world.receiver(r).session_id!r}"


@step(r'peeking "(?P<entity>[^"]+)" shows nothing')
def peek_nothing(world: World, entity: str) -> None:
    found = [m.message_id for m in world.peek_all(entity)]
    assert found == [], f"peek shows {found}"


@step(r'peeking "(?P<entity>[^"]+)" shows nothing, or is refused')
def peek_nothing_or_refused(world: World, entity: str) -> None:
    """An entity that auto-forwards refuses receivers (SETTLE-FWD-003); whether it may be peeked is
    not documented, so a refusal is as good as an empty peek."""
    try:
        found = [m.message_id for m in world.peek_all(entity)]
    except ServiceBusError:
        return
    assert found == [], f"peek shows {found}"


@step(r'peeking "(?P<entity>[^"]+)" shows (?P<ids>' + IDS + r")")
def peek_shows(world: World, entity: str, ids: str) -> None:
    found = [m.message_id for m in world.peek_all(entity)]
    assert found == quoted(ids), f"peek shows {found}, expected {quoted(ids)}"


@step(r'peeking "(?P<entity>[^"]+)" shows exactly (?P<ids>' + IDS + r") in any order")
def peek_shows_set(world: World, entity: str, ids: str) -> None:
    found = sorted(m.message_id for m in world.peek_all(entity))
    assert found == sorted(quoted(ids)), f"peek shows {found}"


@step(r'peeking "(?P<entity>[^"]+)" shows (?P<ids>' + IDS + r'), and (?P<optional>' + IDS + r") may also appear")
def peek_shows_maybe(world: World, entity: str, ids: str, optional: str) -> None:
    found = [m.message_id for m in world.peek_all(entity)]
    allowed = set(quoted(optional))
    required = [mid for mid in found if mid not in allowed]
    assert required == quoted(ids), f"peek shows {found}; required {quoted(ids)}, optionally {sorted(allowed)}"


def _peeked(world: World, entity: str, mid: str):
    found = [m for m in world.peek_all(entity) if m.message_id == mid]
    assert found, f"peeking {entity!r} does not show {mid!r}"
    return found[0]


@step(r'peeking "(?P<entity>[^"]+)" shows "(?P<mid>[^"]+)" with delivery count (?P<dc>\d+)')
def peek_delivery_count(world: World, entity: str, mid: str, dc: str) -> None:
    m = _peeked(world, entity, mid)
    assert m.delivery_count == int(dc), f"{mid!r} shows delivery count {m.delivery_count}"


@step(r'peeking "(?P<entity>[^"]+)" shows "(?P<mid>[^"]+)" in state "(?P<state>[^"]+)"')
def peek_state(world: World, entity: str, mid: str, state: str) -> None:
    m = _peeked(world, entity, mid)
    assert m.state == state, f"{mid!r} is in state {m.state!r}"


@step(r'peeking "(?P<entity>[^"]+)" shows "(?P<mid>[^"]+)" expiring (?P<n>\d+) seconds after it was enqueued')
def peek_expiry(world: World, entity: str, mid: str, n: str) -> None:
    m = _peeked(world, entity, mid)
    assert m.expires_at is not None and m.enqueued_time is not None, f"{mid!r} shows no expiry"
    tolerance = stamp_tolerance(world)  # two of the broker's stamps: its offset from the target's clock cancels out
    assert abs(m.expires_at - m.enqueued_time - seconds(n)) <= tolerance, (
        f"{mid!r} expires {m.expires_at - m.enqueued_time} ms after it was enqueued"
    )


@step(r'receiver "(?P<r>[^"]+)" got "(?P<mid>[^"]+)" expiring (?P<n>\d+) seconds after it was enqueued')
def received_expiry(world: World, r: str, mid: str, n: str) -> None:
    """SETTLE-TTL-001: read from a receive, where Service Bus computes the expiry of a message without a
    time to live of its own (a peek need not show it)."""
    m = world.message(r, mid)
    assert m.expires_at is not None and m.enqueued_time is not None, f"{mid!r} shows no expiry"
    tolerance = stamp_tolerance(world)  # two of the broker's stamps: its offset from the target's clock cancels out
    assert abs(m.expires_at - m.enqueued_time - seconds(n)) <= tolerance, (
        f"{mid!r} expires {m.expires_at - m.enqueued_time} ms after it was enqueued"
    )


@step(r'peeking (?P<n>\d+) messages of "(?P<entity>[^"]+)" from the sequence number of "(?P<mid>[^"]+)"')
def peek_from(world: World, n: str, entity: str, mid: str) -> None:
    seq = world.sequence_of(mid, entity)
    world.peeked = world.target.peek(world.peeker(entity), int(n), seq)


@step(r"the peek shows (?P<ids>" + IDS + r")")
def peek_result(world: World, ids: str) -> None:
    found = [m.message_id for m in world.peeked]
    assert found == quoted(ids), f"peek shows {found}"


@step(r"the peek shows (?P<ids>" + IDS + r"), or fewer of them from the first")
def peek_result_prefix(world: World, ids: str) -> None:
    """SETTLE-PEEK-002: "there's no way to guarantee a minimum size for the batch" (message-browsing): a peek
    may return fewer messages than asked for, in order from where it starts, but not none while there are some."""
    found = [m.message_id for m in world.peeked]
    expected = quoted(ids)
    assert found and found == expected[: len(found)], f"peek shows {found}, expected {expected} or a beginning of it"


@step(r'the dead-letter queue of "(?P<entity>[^"]+)" holds "(?P<mid>[^"]+)" with reason "(?P<reason>[^"]+)"')
def dead_letter_holds(world: World, entity: str, mid: str, reason: str) -> None:
    m = _peeked(world, f"{entity}/$DeadLetterQueue", mid)
    assert m.dead_letter_reason == reason, f"{mid!r} was dead-lettered with reason {m.dead_letter_reason!r}"


@step(compares_clocks(r'"(?P<mid>[^"]+)" is locked until (?P<n>\d+) seconds after (?P<when>it was received|the renewal)'))
def locked_until(world: World, mid: str, n: str, when: str) -> None:
    world.require_no_pending_error()
    if when == "it was received":
        holder = next(r for r, held in world.held.items() if mid in held)
        began, ended = world.receive_began[mid], world.received_at[mid]
        until = world.held[holder][mid].locked_until
    else:
        began, ended, until = world.renewals[mid]
    assert_locked_for(world, until, began, ended, n, f"{mid!r}", when)


@step(compares_clocks(r'the session lock of "(?P<r>[^"]+)" is held until (?P<n>\d+) seconds after the renewal'))
def session_locked_until(world: World, r: str, n: str) -> None:
    world.require_no_pending_error()
    began, ended, until = world.renewals[r]
    assert_locked_for(world, until, began, ended, n, "the session lock", "the renewal")


@step(r"the sequence numbers of (?P<ids>" + IDS + r") strictly increase")
def sequence_increases(world: World, ids: str) -> None:
    numbers = [world.sequence_numbers[mid] for mid in quoted(ids)]
    assert all(a < b for a, b in zip(numbers, numbers[1:])), f"sequence numbers {numbers}"


@step(r'the scheduling returned a sequence number for "(?P<mid>[^"]+)"')
def scheduling_returned(world: World, mid: str) -> None:
    world.require_no_pending_error()
    assert isinstance(world.scheduled.get(mid), int), f"scheduling returned {world.scheduled.get(mid)!r}"


@step(r'"(?P<mid>[^"]+)" was received with a sequence number above the one its scheduling returned')
def new_sequence_number(world: World, mid: str) -> None:
    assert world.sequence_numbers[mid] > world.scheduled[mid], (
        f"received as {world.sequence_numbers[mid]}, scheduled as {world.scheduled[mid]}"
    )


@step(r'the session state seen by "(?P<r>[^"]+)" is (?:empty|"(?P<state>[^"]*)")')
def session_state_is(world: World, r: str, state: str | None) -> None:
    seen = world.attempt(world.target.get_session_state, world.receiver(r))
    world.require_no_pending_error()
    expected = state.encode() if state is not None else None
    assert seen == expected, f"session state is {seen!r}, expected {expected!r}"


# ------------------------------------------------------- properties to modify (SETTLE-MOD-001)
@step(r'receiver "(?P<r>[^"]+)" (?P<op>abandons|defers|dead-letters) "(?P<mid>[^"]+)" setting propert(?:y|ies) (?P<props>.+)')
def settle_modifying(world: World, r: str, op: str, mid: str, props: str) -> None:
    from .rules import pairs

    world.settle(r, op, world.message(r, mid), properties=pairs(props))


@step(r'receiver "(?P<r>[^"]+)" holds "(?P<mid>[^"]+)" with (?P<checks>(?:no )?property .+)')
def held_with(world: World, r: str, mid: str, checks: str) -> None:
    from .rules import check_properties

    check_properties(world.message(r, mid), checks)
