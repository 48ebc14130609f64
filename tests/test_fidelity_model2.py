"""The reference model against Service Bus's documentation, continued (tests/test_fidelity_model.py
is at its size limit): one test per row of sbspec/fidelity.md where the model was found to
differ, each written failing first.

Model-level tests (``@needs:model-internals``): they grade the model, not a target.
"""

from __future__ import annotations

import pytest

from sbreference import SECOND, ErrorCode, Message, Namespace, ServiceBusError, VirtualClock

pytestmark = pytest.mark.needs("model-internals")


def fails(code: ErrorCode, call, *args, **kwargs) -> ServiceBusError:
    with pytest.raises(ServiceBusError) as caught:
        call(*args, **kwargs)
    assert caught.value.code is code, caught.value
    return caught.value


# ------------------------------------------------------------ auto-forwarding


@pytest.mark.clauses("SETTLE-FWD-001")
def test_a_session_enabled_queue_or_subscription_cannot_auto_forward() -> None:
    """Audit row ENT-027: a queue or subscription that requires sessions cannot have ForwardTo,
    on creation or by an update (Service Bus answers 400 Bad Request); the destination may
    require sessions, and dead-letter forwarding stays allowed."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("dst", requires_session=True)  # a session destination is fine
    fails(ErrorCode.ARGUMENT_ERROR, ns.create_queue, "src", requires_session=True, forward_to="dst")
    assert not ns.exists("src")
    ns.create_queue("sessions", requires_session=True)
    fails(ErrorCode.ARGUMENT_ERROR, ns.update, "sessions", forward_to="dst")
    assert ns.describe("sessions").forward_to is None
    ns.create_topic("t")
    fails(ErrorCode.ARGUMENT_ERROR, ns.create_subscription, "t", "s", requires_session=True, forward_to="dst")
    ns.create_subscription("t", "plain", forward_to="dst")  # not session-enabled: allowed
    ns.create_queue("dlq-sink")
    ns.create_queue("dead", requires_session=True, forward_dead_lettered_messages_to="dlq-sink")


@pytest.mark.clauses("SETTLE-FWD-001", "SETTLE-FWD-002")
def test_a_forwarding_queue_or_subscription_refuses_receivers() -> None:
    """Audit row OP-050: with ForwardTo set, a user cannot receive from the queue or subscription;
    with ForwardDeadLetteredMessagesTo set, not from its dead-letter subqueue. The other subqueue
    stays receivable (a forward the destination refused is dead-lettered there, to be received)."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("dst", lock_duration=5 * SECOND)
    ns.create_queue("src", forward_to="dst")
    conn = ns.connect()
    ns.send(conn, "src", Message(b"x", message_id="m"))
    fails(ErrorCode.INVALID_OPERATION, ns.receive, conn, "src")
    fails(ErrorCode.INVALID_OPERATION, ns.receive, conn, "src", mode="receive-and-delete")
    fails(ErrorCode.INVALID_OPERATION, ns.receive_deferred, conn, "src", [1])
    assert ns.receive(conn, "src/$DeadLetterQueue") == []  # its dead-letter subqueue is not forwarded
    [got] = ns.receive(conn, "dst")
    assert got.message_id == "m"
    # Set by an update: refused from then on (a receive before it was allowed).
    ns.create_queue("late")
    assert ns.receive(conn, "late") == []
    ns.update("late", forward_to="dst")
    fails(ErrorCode.INVALID_OPERATION, ns.receive, conn, "late")
    ns.update("late", forward_to=None)
    assert ns.receive(conn, "late") == []
    # A subscription forwarding to a queue.
    ns.create_topic("t")
    ns.create_subscription("t", "s", forward_to="dst")
    fails(ErrorCode.INVALID_OPERATION, ns.receive, conn, "t/Subscriptions/s")
    # Dead-letter forwarding: the dead-letter subqueue refuses receivers, the queue does not.
    ns.create_queue("dlq", lock_duration=5 * SECOND, forward_dead_lettered_messages_to="dst")
    ns.send(conn, "dlq", Message(b"y", message_id="d"))
    [mine] = ns.receive(conn, "dlq")
    ns.dead_letter(conn, "dlq", mine.lock_token, "Bad", "bad")
    fails(ErrorCode.INVALID_OPERATION, ns.receive, conn, "dlq/$DeadLetterQueue")
    ns.create_subscription("t", "d", forward_dead_lettered_messages_to="dst")
    fails(ErrorCode.INVALID_OPERATION, ns.receive, conn, "t/Subscriptions/d/$DeadLetterQueue")
    assert [d.message_id for d in ns.receive(conn, "dst")] == ["d"]


@pytest.mark.clauses("SETTLE-FWD-002")
def test_a_dead_letter_forwarded_on_names_the_entity_it_was_dead_lettered_in() -> None:
    """Audit row OP-051: DeadLetterSource is set on a message dead-lettered and then auto-forwarded
    from the dead-letter subqueue, and names the queue or subscription it was dead-lettered in;
    it is set on no other message (not on one in a dead-letter subqueue, nor on one sent)."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("sink")
    ns.create_queue("q", forward_dead_lettered_messages_to="sink")
    ns.create_queue("plain")
    ns.create_topic("t")
    ns.create_subscription("t", "s", forward_dead_lettered_messages_to="sink")
    conn = ns.connect()
    ns.send(conn, "q", Message(b"x", message_id="from-queue"))
    ns.send(conn, "t", Message(b"y", message_id="from-subscription"))
    ns.send(conn, "plain", Message(b"z", message_id="kept"))
    ns.send(conn, "sink", Message(b"w", message_id="direct"))
    for path in ("q", "t/Subscriptions/s", "plain"):
        [got] = ns.receive(conn, path)
        ns.dead_letter(conn, path, got.lock_token, "Bad", "bad")
    sources = {d.message_id: d.dead_letter_source for d in ns.receive(conn, "sink", max_count=5)}
    assert sources == {"direct": None, "from-queue": "q", "from-subscription": "t/Subscriptions/s"}
    [kept] = ns.receive(conn, "plain/$DeadLetterQueue")
    assert kept.dead_letter_source is None and kept.dead_letter_reason == "Bad"


# ------------------------------------------------------------ scheduling


@pytest.mark.clauses("SETTLE-SCHED-001", "SETTLE-DUP-002")
@pytest.mark.parametrize("partitioned", [False, True])
def test_scheduling_a_duplicate_answers_a_sequence_number_and_stores_nothing(partitioned: bool) -> None:
    """Audit row OP-052: ScheduleMessageAsync "Returns: The sequence number of the message that was
    scheduled": one number for each message scheduled, a duplicate included (a user saw Service Bus
    answer two numbers and drop the second message, Azure/azure-service-bus#265). The model answered
    none for a duplicate, so a schedule of three messages got two numbers back."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("q", requires_duplicate_detection=True, enable_partitioning=partitioned)
    conn = ns.connect()
    first = ns.schedule(conn, "q", [Message(b"a", message_id="1"), Message(b"b", message_id="1"), Message(b"c", message_id="2")], 60 * SECOND)
    [again] = ns.schedule(conn, "q", Message(b"d", message_id="1"), 60 * SECOND)
    numbers = first + [again]
    assert len(numbers) == 4 and len(set(numbers)) == 4 and all(isinstance(n, int) for n in numbers)
    ns.clock.advance(61 * SECOND)
    got = ns.receive(conn, "q", max_count=10)
    assert sorted(d.message_id for d in got) == ["1", "2"]
    assert [d.message.body for d in got if d.message_id == "1"] == [b"a"]


# ------------------------------------------------------------ rules


@pytest.mark.clauses("RULES-RULE-006")
def test_filter_quotas_count_per_topic_sql_and_correlation_filters_apart() -> None:
    """Audit row ENT-028: the quotas are 2,000 SQL filters and 100,000 correlation filters per topic
    (over all its subscriptions); there is no per-subscription figure. The model held each
    subscription to 2,000 rules of any kind: it refused the 2,001st correlation filter of a
    subscription and let a topic hold 2,000 SQL filters in each of its subscriptions."""
    from sbreference import CorrelationFilter, Rule, SqlFilter
    from sbreference.rules import MAX_SQL_FILTERS_PER_TOPIC

    ns = Namespace(clock=VirtualClock())
    ns.create_topic("t")
    ns.create_subscription("t", "a")
    ns.create_subscription("t", "b")
    half = MAX_SQL_FILTERS_PER_TOPIC // 2
    for i in range(half):
        ns.add_rule("t/Subscriptions/a", Rule(f"sql{i}", SqlFilter(f"n = {i}")))
    for i in range(MAX_SQL_FILTERS_PER_TOPIC - half):
        ns.add_rule("t/Subscriptions/b", Rule(f"sql{i}", SqlFilter(f"n = {i}")))
    fails(ErrorCode.QUOTA_EXCEEDED, ns.add_rule, "t/Subscriptions/a", Rule("one-more", SqlFilter("n = -1")))
    # Correlation filters have a quota of their own, far larger.
    for i in range(2500):
        ns.add_rule("t/Subscriptions/a", Rule(f"corr{i}", CorrelationFilter(correlation_id=str(i))))
    ns.remove_rule("t/Subscriptions/b", "sql0")
    ns.add_rule("t/Subscriptions/a", Rule("room-again", SqlFilter("n = -1")))


# ------------------------------------------------------------ sessions


@pytest.mark.clauses("SETTLE-SESS-008")
def test_a_session_state_holds_at_most_one_message() -> None:
    """Audit row OP-038: "the message session state is an opaque binary object that can hold data of
    the size of one message, which is 256 KB for Service Bus Standard, and 100 MB for Service Bus
    Premium" (message-sessions). The model kept a state of any size."""
    from sbreference.entity import KB, MB

    ns = Namespace(clock=VirtualClock())
    ns.create_queue("sq", requires_session=True)
    conn = ns.connect()
    ns.accept_session(conn, "sq", "s1")
    fails(ErrorCode.MESSAGE_SIZE_EXCEEDED, ns.set_session_state, conn, "sq", "s1", b"x" * (256 * KB + 1))
    assert ns.get_session_state(conn, "sq", "s1") is None
    ns.set_session_state(conn, "sq", "s1", b"x" * (256 * KB))
    ns.create_topic("t")
    ns.create_subscription("t", "s", requires_session=True)
    ns.accept_session(conn, "t/Subscriptions/s", "s1")
    fails(ErrorCode.MESSAGE_SIZE_EXCEEDED, ns.set_session_state, conn, "t/Subscriptions/s", "s1", b"x" * (300 * KB))
    premium = Namespace(clock=VirtualClock(), sku="premium")
    premium.create_queue("sq", requires_session=True)  # 1 MB messages unless set; the state may hold 100 MB
    conn = premium.connect()
    premium.accept_session(conn, "sq", "s1")
    premium.set_session_state(conn, "sq", "s1", b"x" * (2 * MB))
    fails(ErrorCode.MESSAGE_SIZE_EXCEEDED, premium.set_session_state, conn, "sq", "s1", b"x" * (100 * MB + 1))


@pytest.mark.clauses("SETTLE-SESS-009")
def test_a_message_expiring_in_a_session_expires_the_whole_session() -> None:
    """Audit row OP-053: "if there's a single message in the session that has passed the TTL, all the
    messages in the session are expired" (message-sessions, Message expiration): dropped or
    dead-lettered as the entity says. Other sessions keep theirs; a message that arrives later is new."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("sq", requires_session=True, dead_lettering_on_message_expiration=True)
    ns.create_queue("plain", requires_session=True)
    conn = ns.connect()
    for path in ("sq", "plain"):
        ns.send(conn, path, [
            Message(b"1", message_id="short", session_id="A", time_to_live=5 * SECOND),
            Message(b"2", message_id="long", session_id="A"),
            Message(b"3", message_id="other", session_id="B"),
        ])
    ns.clock.advance(6 * SECOND)
    ns.send(conn, "sq", Message(b"4", message_id="later", session_id="A"))
    assert sorted(d.message_id for d in ns.peek("sq", max_count=10)) == ["later", "other"]
    dead = {d.message_id: d.dead_letter_reason for d in ns.peek("sq/$DeadLetterQueue", max_count=10)}
    assert dead == {"short": "TTLExpiredException", "long": "TTLExpiredException"}
    assert [d.message_id for d in ns.peek("plain", max_count=10)] == ["other"]
    assert ns.next_available_sessions("plain") == ["B"]


# ------------------------------------------------------------ tiers


@pytest.mark.clauses("SETTLE-TIER-005")
def test_basic_entities_keep_messages_14_days_at_most() -> None:
    """Audit row TIER-012: "For the basic tier, the default (also maximum) expiration time is 14 days"
    (message-expiration). The model gave Basic queues the Standard default (TimeSpan.MaxValue). A longer
    one is held to 14 days, not refused: .NET sends TimeSpan.MaxValue unless told otherwise."""
    from sbreference import DAY, TIMESPAN_MAX

    ns = Namespace(clock=VirtualClock(), sku="basic")
    queue = ns.create_queue("q")
    assert queue.description.default_message_time_to_live == 14 * DAY
    assert ns.create_queue("as-dotnet-sends-it", default_message_time_to_live=TIMESPAN_MAX).description.default_message_time_to_live == 14 * DAY
    assert ns.update("q", default_message_time_to_live=15 * DAY).default_message_time_to_live == 14 * DAY
    assert ns.create_queue("shorter", default_message_time_to_live=DAY).description.default_message_time_to_live == DAY
    conn = ns.connect()
    ns.send(conn, "q", Message(b"x", message_id="m", time_to_live=30 * DAY))
    [peeked] = ns.peek("q")
    assert peeked.expires_at == peeked.enqueued_time + 14 * DAY  # the entity default caps it (SETTLE-TTL-001)
    standard = Namespace(clock=VirtualClock())
    assert standard.create_queue("q").description.default_message_time_to_live > 14 * DAY


@pytest.mark.clauses("SETTLE-TIER-004")
def test_a_standard_entity_size_is_one_of_1_to_5_gb() -> None:
    """Audit row ENT-007: "The property 'MaxSizeInMegabytes', must be one of the following values:
    1024;2048;3072;4096;5120" (Resource Manager exceptions). The model took any size up to 5 GB
    (sizes under 1 GB stay an extension: capability small-quota)."""
    for sku in ("basic", "standard"):
        ns = Namespace(clock=VirtualClock(), sku=sku)
        for size in (1024, 2048, 3072, 4096, 5120, 1):
            ns.create_queue(f"q{size}", max_size_in_megabytes=size)
        fails(ErrorCode.ARGUMENT_ERROR, ns.create_queue, "odd", max_size_in_megabytes=1500)
        fails(ErrorCode.ARGUMENT_ERROR, ns.update, "q1024", max_size_in_megabytes=2000)
    ns = Namespace(clock=VirtualClock())
    ns.create_topic("t", max_size_in_megabytes=3072)
    fails(ErrorCode.ARGUMENT_ERROR, ns.create_topic, "odd", max_size_in_megabytes=4000)


@pytest.mark.clauses("SETTLE-TIER-003")
def test_basic_entities_cannot_be_deleted_on_idle() -> None:
    """Audit row TIER-014: on Basic, AutoDeleteOnIdle "can't be set or updated" (Resource Manager
    exceptions: "The property 'property name' can't be set when creating a Queue because the namespace
    'namespace name' is using the 'Basic' Tier."). Its default, TimeSpan.MaxValue (never), is accepted."""
    from sbreference import HOUR, TIMESPAN_MAX

    ns = Namespace(clock=VirtualClock(), sku="basic")
    fails(ErrorCode.INVALID_OPERATION, ns.create_queue, "q", auto_delete_on_idle=HOUR)
    ns.create_queue("q", auto_delete_on_idle=TIMESPAN_MAX)
    fails(ErrorCode.INVALID_OPERATION, ns.update, "q", auto_delete_on_idle=HOUR)
    Namespace(clock=VirtualClock()).create_queue("q", auto_delete_on_idle=HOUR)


# ------------------------------------------------------------ names


@pytest.mark.clauses("SETTLE-ENT-002")
def test_entity_names_are_letters_digits_periods_hyphens_and_underscores() -> None:
    """Audit row ENT-029: "Entity segments can contain only letters, numbers, periods(.), hyphens(-), and
    underscores(_). Any other characters cause the request to fail." (Resource Manager exceptions); a queue
    or topic path is segments joined by slashes, and "Cannot start or end with a slash" (QueueProperties.Name).
    The model took any characters."""
    ns = Namespace(clock=VirtualClock())
    for good in ("q", "Orders.v2-eu_1", "app/orders", "a/b/c"):
        ns.create_queue(good)
    ns.create_topic("t")
    ns.create_subscription("t", "sub.v2-eu_1")
    for bad in ("a b", "q!", "q$x", "q#", "q?x", "q*", "q@x", "a//b", "/lead", "trail/"):
        fails(ErrorCode.ARGUMENT_ERROR, ns.create_queue, bad)
        fails(ErrorCode.ARGUMENT_ERROR, ns.create_topic, bad)
    for bad in ("a b", "s$", "a/b", "s#"):
        fails(ErrorCode.ARGUMENT_ERROR, ns.create_subscription, "t", bad)


@pytest.mark.clauses("SETTLE-FWD-001")
def test_a_forwarding_source_is_never_deleted_on_idle() -> None:
    """Audit row ENT-030: "When autoforwarding is setup, the value for AutoDeleteOnIdle on the source entity
    is automatically set to the maximum value of the data type" (service-bus-auto-forwarding); the
    destination keeps its own. The model kept the source's."""
    from sbreference import HOUR, TIMESPAN_MAX

    ns = Namespace(clock=VirtualClock())
    ns.create_queue("dst", auto_delete_on_idle=HOUR)
    ns.create_queue("src", forward_to="dst", auto_delete_on_idle=HOUR)
    assert ns.describe("src").auto_delete_on_idle == TIMESPAN_MAX
    assert ns.describe("dst").auto_delete_on_idle == HOUR
    ns.create_queue("late", auto_delete_on_idle=HOUR)
    ns.update("late", forward_to="dst")
    assert ns.describe("late").auto_delete_on_idle == TIMESPAN_MAX
    ns.create_topic("t")
    ns.create_subscription("t", "s", forward_to="dst", auto_delete_on_idle=HOUR)
    assert ns.describe("t/Subscriptions/s").auto_delete_on_idle == TIMESPAN_MAX
