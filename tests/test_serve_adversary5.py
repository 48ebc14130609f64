"""``sbconform serve`` against a hostile or careless client (fifth round), on what round 6 of the
model's audit added: dates, durations and GUIDs in rules (REST and AMQP add-rule), the transfer
dead-letter queue, and Service Bus's own AMQP types for .NET values (com.microsoft:timespan,
com.microsoft:datetime-offset, com.microsoft:uri). One test per defect found, each written to
fail first; model-level ones (``@needs:model-internals``) say so."""

from __future__ import annotations

import datetime as dt

import pytest

from sbreference import Message, Namespace, VirtualClock
from sbreference.clock import MINUTE, SECOND
from sbreference.rules import Rule, SqlFilter, SqlRuleAction

UTC = dt.timezone.utc
NEW_YEAR = dt.datetime(2026, 1, 1, tzinfo=UTC)


class ServerClock(VirtualClock):
    """A clock placed in UTC as serve's is (its start: ``epoch_ms``)."""

    epoch_ms = int(NEW_YEAR.timestamp() * 1000)


# ------------------------------------------------------------ rules stamped when the topic's route was resolved
@pytest.mark.needs("model-internals")
@pytest.mark.clauses("RULES-SQL-016", "RULES-ACT-005")
def test_a_scheduled_message_sees_the_epoch_and_forwarding_of_a_subscription_made_after_it_was_sent() -> None:
    """A subscription's rules learnt the clock's epoch and whether it forwards only when its topic's route was next
    resolved (a send to the topic): a scheduled message that became due after the subscription was created, with no
    send in between, was filtered with the 1970 epoch (``sys.EnqueuedTimeUtc >= 2026`` false) and as if the
    subscription did not forward (the action's ScheduledEnqueueTimeUtc ignored)."""
    clock = ServerClock()
    ns = Namespace(clock=clock)
    conn = ns.connect()
    ns.create_topic("t")
    ns.create_queue("q")
    ns.schedule(conn, "t", Message(b"x", message_id="m"), 10 * SECOND)  # the topic's route is resolved here
    ns.create_subscription("t", "s")
    ns.remove_rule("t/Subscriptions/s", "$Default")
    ns.add_rule("t/Subscriptions/s", Rule("since", SqlFilter("sys.EnqueuedTimeUtc >= @t", {"@t": NEW_YEAR})))
    ns.create_subscription("t", "fwd", forward_to="q")
    ns.remove_rule("t/Subscriptions/fwd", "$Default")
    ns.add_rule("t/Subscriptions/fwd", Rule("later", SqlFilter("1=1"), SqlRuleAction(
        "SET sys.ScheduledEnqueueTimeUtc = sys.EnqueuedTimeUtc + @delay", {"@delay": dt.timedelta(minutes=1)})))
    clock.advance(11 * SECOND)
    assert [d.message.message_id for d in ns.receive(conn, "t/Subscriptions/s", mode="receive-and-delete")] == ["m"]
    assert ns.receive(conn, "q", mode="receive-and-delete") == []  # scheduled in the destination by the action
    clock.advance(MINUTE)
    assert [d.message.message_id for d in ns.receive(conn, "q", mode="receive-and-delete")] == ["m"]
