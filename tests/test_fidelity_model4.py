"""Fourth round of the model's audit against Service Bus's documentation (the earlier rounds:
tests/test_fidelity_model.py, tests/test_fidelity_model2.py, tests/test_fidelity_model3.py): a test per
sbspec/fidelity.md row where the model differed, each written failing first; model-level
(``@needs:model-internals``), grading the model, not a target.
"""

from __future__ import annotations

import pytest
from test_fidelity_model2 import fails

from sbreference import RECEIVE_AND_DELETE, ErrorCode, Message, Namespace, VirtualClock
from sbreference.clock import MINUTE

pytestmark = pytest.mark.needs("model-internals")

IDLE = 5 * MINUTE


def deleted_after(ns: Namespace, clock: VirtualClock, path: str, wait: int) -> None:
    """``path`` is still there ``wait - 1`` ms from now, if nothing uses it, and is deleted at ``wait``."""
    clock.advance(wait - 1)
    assert ns.exists(path), f"{path} deleted at {clock.now}, early"
    clock.advance(1)
    assert not ns.exists(path), f"{path} still there at {clock.now}"


def namespace() -> tuple[Namespace, VirtualClock, int]:
    clock = VirtualClock()
    ns = Namespace(clock=clock)
    return ns, clock, ns.connect()


# ------------------------------------------------------------ auto-delete on idle


@pytest.mark.clauses("SETTLE-IDLE-001")
def test_an_idle_queue_is_deleted_with_its_messages_once_its_idle_interval_has_passed() -> None:
    """Audit row ENT-016: "Service Bus queues, topics, and subscriptions can be created as temporary entities, which
    are automatically removed when they haven't been used for a specified period of time" (message-expiration).
    Deleted as time passes, not before: its messages go with it, and a sender or receiver then finds nothing."""
    ns, clock, conn = namespace()
    ns.create_queue("q", auto_delete_on_idle=IDLE)
    ns.create_queue("kept")
    ns.send(conn, "q", Message(b"x", message_id="m"))
    clock.advance(IDLE - 1)
    assert ns.exists("q")
    assert ns.next_due() == IDLE  # the deletion is due then: a server's timer wakes for it
    clock.advance(1)
    assert not ns.exists("q")
    assert "q" not in ns.entities and ns.exists("kept")
    fails(ErrorCode.ENTITY_NOT_FOUND, ns.send, conn, "q", Message(b"y"))
    fails(ErrorCode.ENTITY_NOT_FOUND, ns.receive, conn, "q")
    fails(ErrorCode.ENTITY_NOT_FOUND, ns.peek, "q/$DeadLetterQueue")
    ns.create_queue("q")  # the name is free again, and the new queue holds nothing of the old one
    assert ns.peek("q") == []


@pytest.mark.clauses("SETTLE-IDLE-001")
def test_time_deletes_an_idle_queue_through_tick_due() -> None:
    """What a server calls when its timer fires: the deleted queue's key is among those it changed."""
    ns, clock, conn = namespace()
    ns.create_queue("q", auto_delete_on_idle=IDLE)
    clock.advance(IDLE)
    assert "q" in ns.tick_due()
    assert "q" not in ns.entities and ns.next_due() is None


@pytest.mark.clauses("SETTLE-IDLE-002")
@pytest.mark.parametrize("activity", ["send", "receive", "empty receive", "peek", "update", "schedule", "dead-letter receive"])
def test_any_use_of_a_queue_restarts_its_idle_interval(activity: str) -> None:
    """message-expiration, Idleness: a queue is idle with "No sends / No receives / No updates to the queue / No
    scheduled messages / No browse/peek"; the Service Bus team: "receives (even if nothing is on the queue)"."""
    ns, clock, conn = namespace()
    ns.create_queue("q", auto_delete_on_idle=IDLE)
    ns.send(conn, "q", Message(b"x"))
    clock.advance(IDLE - MINUTE)
    {
        "send": lambda: ns.send(conn, "q", Message(b"y")),
        "receive": lambda: ns.receive(conn, "q"),
        "empty receive": lambda: ns.receive(conn, "q/$DeadLetterQueue"),
        "peek": lambda: ns.peek("q"),
        "update": lambda: ns.update("q", max_delivery_count=3),
        "schedule": lambda: ns.schedule(conn, "q", Message(b"s"), clock.now + MINUTE),
        "dead-letter receive": lambda: ns.peek("q/$DeadLetterQueue"),
    }[activity]()
    deleted_after(ns, clock, "q", IDLE + (MINUTE if activity == "schedule" else 0))


@pytest.mark.clauses("SETTLE-IDLE-002")
def test_reading_a_queue_description_or_counts_is_not_activity() -> None:
    """Reading (SETTLE-DISC-010): a Get of the description or of the runtime counts is not in the Idleness table."""
    ns, clock, conn = namespace()
    ns.create_queue("q", auto_delete_on_idle=IDLE)
    clock.advance(IDLE - 1)
    ns.describe("q")
    ns.runtime_info("q")
    clock.advance(1)
    assert not ns.exists("q")


@pytest.mark.clauses("SETTLE-IDLE-002")
def test_a_pending_scheduled_message_keeps_a_queue_until_it_comes_due() -> None:
    """"No scheduled messages" (Idleness): a queue holding a scheduled message is not idle; its idle interval runs
    from the moment the message is enqueued."""
    ns, clock, conn = namespace()
    ns.create_queue("q", auto_delete_on_idle=IDLE)
    ns.schedule(conn, "q", Message(b"s", message_id="s"), 3 * IDLE)
    clock.advance(4 * IDLE - 1)
    assert ns.runtime_info("q")["active"] == 1  # enqueued at 3 * IDLE (a Get: not use)
    clock.advance(1)
    assert not ns.exists("q")


@pytest.mark.clauses("SETTLE-IDLE-003")
def test_an_idle_subscription_is_deleted_and_its_copies_released_while_its_topic_stays() -> None:
    """Idleness: a subscription is idle with "No receives / No updates to the subscription / No new rules added to
    the subscription / No browse/peek"; sends to its topic are the topic's use, not the subscription's (reading,
    SETTLE-DISC-010). Its messages go with it and stop counting toward the topic's size."""
    ns, clock, conn = namespace()
    ns.create_topic("t")
    ns.create_subscription("t", "temp", auto_delete_on_idle=IDLE)
    ns.create_subscription("t", "kept")
    for n in range(3):
        clock.advance(2 * MINUTE)
        ns.send(conn, "t", Message(b"x" * 100, message_id=f"m{n}"))
    assert not ns.exists("t/Subscriptions/temp")
    assert ns.exists("t") and ns.exists("t/Subscriptions/kept")
    fails(ErrorCode.ENTITY_NOT_FOUND, ns.receive, conn, "t/Subscriptions/temp")
    assert len(ns.receive(conn, "t/Subscriptions/kept", max_count=5, mode=RECEIVE_AND_DELETE)) == 3
    assert ns.runtime_info("t")["size_bytes"] == 0  # the deleted subscription's copies no longer count


@pytest.mark.clauses("SETTLE-IDLE-003")
@pytest.mark.parametrize("activity", ["receive", "peek", "update", "rule"])
def test_using_a_subscription_restarts_its_idle_interval(activity: str) -> None:
    from sbreference import Rule

    ns, clock, conn = namespace()
    ns.create_topic("t")
    ns.create_subscription("t", "s", auto_delete_on_idle=IDLE)
    clock.advance(IDLE - MINUTE)
    {
        "receive": lambda: ns.receive(conn, "t/Subscriptions/s"),
        "peek": lambda: ns.peek("t/Subscriptions/s"),
        "update": lambda: ns.update("t/Subscriptions/s", max_delivery_count=3),
        "rule": lambda: ns.add_rule("t/Subscriptions/s", Rule("r")),
    }[activity]()
    deleted_after(ns, clock, "t/Subscriptions/s", IDLE)


@pytest.mark.clauses("SETTLE-IDLE-004")
def test_a_topic_is_kept_by_sends_and_by_use_of_its_subscriptions_and_takes_them_with_it() -> None:
    """Idleness: a topic is idle with "No sends / No updates to the topic / No scheduled messages / No operations
    on the topic's subscriptions"."""
    ns, clock, conn = namespace()
    ns.create_topic("t", auto_delete_on_idle=IDLE)
    ns.create_subscription("t", "s")
    ns.send(conn, "t", Message(b"x"))
    clock.advance(IDLE - MINUTE)
    ns.receive(conn, "t/Subscriptions/s")  # the subscription's use keeps its topic
    deleted_after(ns, clock, "t", IDLE)
    fails(ErrorCode.ENTITY_NOT_FOUND, ns.send, conn, "t", Message(b"y"))


@pytest.mark.clauses("SETTLE-IDLE-001")
def test_a_queue_updated_to_be_deleted_on_idle_counts_from_the_update() -> None:
    """Setting AutoDeleteOnIdle on a queue that was used (and cached by the model) counts its idleness from the update."""
    ns, clock, conn = namespace()
    ns.create_queue("q")
    ns.send(conn, "q", Message(b"x"))
    ns.receive(conn, "q")
    clock.advance(IDLE)
    ns.update("q", auto_delete_on_idle=IDLE)
    clock.advance(IDLE - 1)
    assert ns.exists("q")
    ns.update("q", auto_delete_on_idle=2 * IDLE)  # a longer interval, counted from this update
    deleted_after(ns, clock, "q", 2 * IDLE)


@pytest.mark.clauses("SETTLE-IDLE-001")
def test_a_forwarded_message_is_use_of_its_destination() -> None:
    """Reading: a message auto-forwarded into a queue arrives as if sent there (SETTLE-FWD-004), so it is a send."""
    ns, clock, conn = namespace()
    ns.create_queue("dst", auto_delete_on_idle=IDLE)
    ns.create_queue("src", forward_to="dst")
    clock.advance(IDLE - 1)
    ns.send(conn, "src", Message(b"x"))
    deleted_after(ns, clock, "dst", IDLE)


# ------------------------------------------------------------ topic runtime properties


@pytest.mark.clauses("SETTLE-ENT-004")
def test_a_topic_reports_its_own_runtime_properties_not_its_subscriptions_counts() -> None:
    """Audit row ENT-031: TopicRuntimeProperties (azure-servicebus) has accessed_at_utc, created_at_utc, name,
    scheduled_message_count, size_in_bytes, subscription_count and updated_at_utc: no active or dead-letter count
    (those are each subscription's). The model reported its subscriptions' counts summed."""
    ns, clock, conn = namespace()
    clock.advance(1000)
    ns.create_topic("t")
    ns.create_subscription("t", "a")
    ns.create_subscription("t", "b")
    clock.advance(1000)
    ns.update("t", max_size_in_megabytes=2048)
    clock.advance(1000)
    ns.send(conn, "t", Message(b"x"))
    ns.schedule(conn, "t", Message(b"s"), clock.now + MINUTE)
    [d] = ns.receive(conn, "t/Subscriptions/a")
    ns.dead_letter(conn, "t/Subscriptions/a", d.lock_token)
    clock.advance(1000)
    info = ns.runtime_info("t")
    assert not {"active", "deferred", "dead_letter"} & set(info), info
    assert info["subscription_count"] == 2
    assert info["scheduled"] == 1
    assert info["size_bytes"] > 0
    assert (info["created_at"], info["updated_at"], info["accessed_at"]) == (1000, 2000, 3000)
    assert ns.runtime_info("t/Subscriptions/a")["dead_letter"] == 1  # counted where the message is


@pytest.mark.clauses("SETTLE-ENT-004")
def test_queue_and_subscription_runtime_properties_show_when_they_were_created_updated_and_accessed() -> None:
    """QueueRuntimeProperties / SubscriptionRuntimeProperties: created_at_utc, updated_at_utc, accessed_at_utc ("Last
    time a message was sent, or the last time there was a receive request")."""
    ns, clock, conn = namespace()
    ns.create_queue("q")
    ns.create_topic("t")
    ns.create_subscription("t", "s")
    clock.advance(1000)
    ns.update("q", max_delivery_count=3)
    ns.update("t/Subscriptions/s", max_delivery_count=3)
    clock.advance(1000)
    ns.send(conn, "q", Message(b"x"))
    clock.advance(1000)
    ns.receive(conn, "t/Subscriptions/s")
    q, s = ns.runtime_info("q"), ns.runtime_info("t/Subscriptions/s")
    assert (q["created_at"], q["updated_at"], q["accessed_at"]) == (0, 1000, 2000)
    assert (s["created_at"], s["updated_at"], s["accessed_at"]) == (0, 1000, 3000)


@pytest.mark.clauses("SETTLE-IDLE-003")
def test_the_model_says_when_it_deletes_a_subscription_of_a_topic_whose_path_has_segments() -> None:
    """``auto_delete_at``: the earlier of the subscription's own deadline and its topic's; a Get, not use."""
    ns, clock, conn = namespace()
    ns.create_topic("a/t", auto_delete_on_idle=3 * IDLE)
    ns.create_subscription("a/t", "s", auto_delete_on_idle=IDLE)
    ns.create_subscription("a/t", "p")
    assert ns.auto_delete_at("a/t/Subscriptions/s") == IDLE
    assert ns.auto_delete_at("a/t/Subscriptions/p") == ns.auto_delete_at("a/t") == 3 * IDLE
    clock.advance(IDLE)
    ns.receive(conn, "a/t/Subscriptions/p")
    assert not ns.exists("a/t/Subscriptions/s")
    assert ns.auto_delete_at("a/t") == 4 * IDLE


@pytest.mark.clauses("SETTLE-IDLE-003")
def test_tick_due_names_a_topic_that_lost_an_idle_subscription_once() -> None:
    ns, clock, conn = namespace()
    ns.create_topic("t")
    ns.create_subscription("t", "s", auto_delete_on_idle=IDLE, lock_duration=IDLE)
    ns.create_subscription("t", "kept", lock_duration=IDLE)
    ns.send(conn, "t", Message(b"x"))
    ns.receive(conn, "t/Subscriptions/kept")  # its lock expires when s is due for deletion
    assert ns.next_due() == IDLE
    clock.advance(IDLE)
    assert ns.tick_due() == ["t"]
    assert ns.exists("t/Subscriptions/kept") and not ns.exists("t/Subscriptions/s")
