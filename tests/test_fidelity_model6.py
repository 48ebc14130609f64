"""Sixth round of the model's audit against Service Bus's documentation (the earlier rounds:
tests/test_fidelity_model.py to tests/test_fidelity_model5.py): date values in rules, the transfer
dead-letter queue, send via. Each test was written failing first; model-level
(``@needs:model-internals``) unless it drives ``sbconform serve``.
"""

from __future__ import annotations

import datetime as dt

import pytest
from test_fidelity_model2 import fails

from sbreference import ErrorCode, Message, Namespace, VirtualClock
from sbreference.clock import MINUTE, SECOND
from sbreference.rules import CorrelationFilter, Rule, SqlFilter, SqlRuleAction

pytestmark = pytest.mark.needs("model-internals")

UTC = dt.timezone.utc
NEW_YEAR = dt.datetime(2026, 1, 1, tzinfo=UTC)


def namespace() -> tuple[Namespace, VirtualClock, int]:
    clock = VirtualClock()
    ns = Namespace(clock=clock)
    return ns, clock, ns.connect()


def topic_with(rule: Rule) -> tuple[Namespace, VirtualClock, int]:
    ns, clock, conn = namespace()
    ns.create_topic("t")
    ns.create_subscription("t", "s")
    ns.remove_rule("t/Subscriptions/s", "$Default")
    ns.add_rule("t/Subscriptions/s", rule)
    return ns, clock, conn


def delivered(ns: Namespace, conn: int, **props) -> bool:
    """Whether a message carrying ``props`` reaches the subscription (it is then taken off)."""
    ns.send(conn, "t", Message(b"x", application_properties=props))
    got = ns.receive(conn, "t/Subscriptions/s", max_count=10, mode="receive-and-delete")
    return bool(got)


# ------------------------------------------------------------ date values in rules


@pytest.mark.clauses("RULES-CORR-004")
def test_a_correlation_filter_matches_a_date_property_by_its_instant() -> None:
    """The SDKs take dates as correlation filter property values (JavaScript ``Date``, Python ``datetime``, the
    REST API's ``d6p1:dateTime``); the model refused them ("values are strings, numbers or booleans"). A date
    matches the same instant, whatever the offset it is written with; not another instant, nor the date's text."""
    ns, _, conn = topic_with(Rule("when", CorrelationFilter(properties={"when": NEW_YEAR})))
    assert delivered(ns, conn, when=NEW_YEAR)
    assert delivered(ns, conn, when=NEW_YEAR.astimezone(dt.timezone(dt.timedelta(hours=2))))
    assert not delivered(ns, conn, when=NEW_YEAR + dt.timedelta(milliseconds=1))
    assert not delivered(ns, conn, when=NEW_YEAR.isoformat())
    assert not delivered(ns, conn)


@pytest.mark.clauses("RULES-CORR-004")
def test_a_correlation_filter_matches_a_duration_property() -> None:
    """The Python SDK also takes ``timedelta`` (a .NET TimeSpan, ``d6p1:duration``)."""
    ns, _, conn = topic_with(Rule("lag", CorrelationFilter(properties={"lag": dt.timedelta(seconds=90)})))
    assert delivered(ns, conn, lag=dt.timedelta(minutes=1, seconds=30))
    assert not delivered(ns, conn, lag=90)


@pytest.mark.clauses("RULES-SQL-016")
def test_a_sql_filter_orders_dates_given_as_parameters() -> None:
    """SqlRuleFilter.sqlParameters take dates; "comparison operators ... follow the same semantics as the C#
    operator binding" (service-bus-messaging-sql-filter): DateTime has all six comparisons. The model refused a
    date parameter when the rule was added."""
    ns, _, conn = topic_with(Rule("recent", SqlFilter("user.created >= @since AND user.created <> @skip",
                                                      {"@since": NEW_YEAR, "@skip": NEW_YEAR + dt.timedelta(days=1)})))
    assert delivered(ns, conn, created=NEW_YEAR)
    assert delivered(ns, conn, created=NEW_YEAR + dt.timedelta(days=2))
    assert not delivered(ns, conn, created=NEW_YEAR + dt.timedelta(days=1))
    assert not delivered(ns, conn, created=NEW_YEAR - dt.timedelta(seconds=1))


@pytest.mark.clauses("RULES-SQL-016")
def test_a_date_compared_with_a_string_or_a_number_is_an_evaluation_error() -> None:
    """C# binds no comparison of a DateTime with a string or a long: the rule fails to evaluate and the message
    is dead-lettered (RULES-DLQ-001), as for any other operand pair C# cannot bind."""
    ns, _, conn = topic_with(Rule("recent", SqlFilter("user.created > @since", {"@since": NEW_YEAR})))
    assert not delivered(ns, conn, created="2027-01-01T00:00:00Z")
    assert not delivered(ns, conn, created=5)
    dead = ns.receive(conn, "t/Subscriptions/s/$DeadLetterQueue", max_count=10, mode="receive-and-delete")
    assert len(dead) == 2


@pytest.mark.clauses("RULES-SQL-016")
def test_sys_enqueued_time_is_a_date() -> None:
    """sys.EnqueuedTimeUtc is a DateTime (BrokeredMessage.EnqueuedTimeUtc): it orders against a date parameter, and
    subtracting a date from it gives a TimeSpan that compares with a duration. The model gave the filter its virtual
    milliseconds, a long, so ``sys.EnqueuedTimeUtc > 5`` matched and a date could not be compared. The model's clock
    starts at 1970-01-01T00:00:00Z unless the subscription's rules say otherwise (``RuleSet.epoch_ms``)."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    ns, clock, conn = topic_with(Rule("late", SqlFilter("sys.EnqueuedTimeUtc >= @t AND sys.EnqueuedTimeUtc - user.sent < @lag",
                                                       {"@t": epoch + dt.timedelta(minutes=1), "@lag": dt.timedelta(seconds=10)})))
    assert not delivered(ns, conn, sent=epoch)  # enqueued at 0: before @t
    clock.advance(MINUTE)
    assert delivered(ns, conn, sent=epoch + dt.timedelta(seconds=55))
    assert not delivered(ns, conn, sent=epoch + dt.timedelta(seconds=45))  # 15 s of lag
    ns2, _, conn2 = topic_with(Rule("long", SqlFilter("sys.EnqueuedTimeUtc > 5")))
    assert not delivered(ns2, conn2)
    assert ns2.peek("t/Subscriptions/s/$DeadLetterQueue")  # DateTime > long: an evaluation error


@pytest.mark.clauses("RULES-SQL-016")
def test_the_rules_epoch_places_the_virtual_clock_in_utc() -> None:
    """serve's clock reads milliseconds since it started; what it hands clients as EnqueuedTimeUtc is that plus its
    start (epoch) time, and a filter must see the same instant."""
    rule = Rule("since", SqlFilter("sys.EnqueuedTimeUtc >= @t", {"@t": NEW_YEAR}), SqlRuleAction("SET user.at = sys.EnqueuedTimeUtc"))
    ns, clock, conn = topic_with(rule)
    assert not delivered(ns, conn)  # the virtual clock starts in 1970

    class ServerClock(VirtualClock):
        epoch_ms = int(NEW_YEAR.timestamp() * 1000)

    ns = Namespace(clock=ServerClock(5 * SECOND))
    conn = ns.connect()
    ns.create_topic("t")
    ns.create_subscription("t", "s")
    ns.remove_rule("t/Subscriptions/s", "$Default")
    ns.add_rule("t/Subscriptions/s", rule)
    ns.send(conn, "t", Message(b"x"))
    got = ns.receive(conn, "t/Subscriptions/s", max_count=10, mode="receive-and-delete")
    assert [d.message.application_properties["at"] for d in got] == [NEW_YEAR + dt.timedelta(seconds=5)]


@pytest.mark.clauses("RULES-SQL-016")
def test_date_arithmetic_follows_csharp() -> None:
    """DateTime +/- TimeSpan is a DateTime, DateTime - DateTime a TimeSpan; DateTime + DateTime does not bind."""
    ns, _, conn = topic_with(Rule("due", SqlFilter("user.start + @window > @now AND -(@window) < user.start - user.start",
                                                   {"@window": dt.timedelta(hours=1), "@now": NEW_YEAR})))
    assert delivered(ns, conn, start=NEW_YEAR - dt.timedelta(minutes=30))
    assert not delivered(ns, conn, start=NEW_YEAR - dt.timedelta(hours=2))
    ns2, _, conn2 = topic_with(Rule("bad", SqlFilter("user.start + user.start > @now", {"@now": NEW_YEAR})))
    assert not delivered(ns2, conn2, start=NEW_YEAR)
    assert ns2.peek("t/Subscriptions/s/$DeadLetterQueue")


@pytest.mark.clauses("RULES-SQL-016")
def test_an_action_sets_a_date_from_its_parameters() -> None:
    """SqlRuleAction parameters take dates too; SET stores the DateTime on the copy."""
    ns, _, conn = topic_with(Rule("stamp", SqlFilter("1=1"), SqlRuleAction("SET user.stamped = @at", {"@at": NEW_YEAR})))
    ns.send(conn, "t", Message(b"x"))
    [got] = ns.receive(conn, "t/Subscriptions/s", max_count=1, mode="receive-and-delete")
    assert got.message.application_properties["stamped"] == NEW_YEAR


def test_a_naive_date_is_read_as_utc() -> None:
    """A date without an offset (Python's naive datetime) is UTC, as the SDKs send it (isodate writes it without
    a zone; AMQP timestamps are UTC)."""
    ns, _, conn = topic_with(Rule("when", CorrelationFilter(properties={"when": dt.datetime(2026, 1, 1)})))
    assert delivered(ns, conn, when=NEW_YEAR)


def test_unsupported_values_are_still_refused() -> None:
    fails(ErrorCode.ARGUMENT_ERROR, CorrelationFilter, properties={"x": [1, 2]})
    fails(ErrorCode.ARGUMENT_ERROR, SqlFilter, "user.x = @p", {"@p": object()})


# ------------------------------------------------------------ dates through serve


@pytest.fixture(scope="module")
def served():
    pytest.importorskip("azure.servicebus")
    pytest.importorskip("proton")
    from serve_support import connection_string

    from sbconform.server import Config, serve_in_thread
    from sbconform.server.admin_http import AdminHttp

    server, thread = serve_in_thread(Config())
    http = AdminHttp(server, "127.0.0.1", 0)
    http.start()
    yield server, connection_string(server.port), connection_string(http.port)
    http.stop()
    server.stop()
    thread.join(10)


@pytest.mark.clauses("RULES-CORR-004", "RULES-SQL-016")
def test_serve_round_trips_dated_rules_through_the_rest_api_and_routes_by_them(served) -> None:
    """ServiceBusAdministrationClient writes a datetime as ``d6p1:dateTime`` and a timedelta as ``d6p1:duration``
    (azure.servicebus.management._utils.serialize_value_type) and reads them back the same way; serve refused both
    with a 400 ("the broker takes string, int, long, double and boolean values"). A filter on sys.EnqueuedTimeUtc
    sees the instant serve hands out (its start plus the virtual milliseconds), not 1970 plus them."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.management import CorrelationRuleFilter, ServiceBusAdministrationClient, SqlRuleAction, SqlRuleFilter

    from sbconform.server.admin_http import plain_http_transport

    _, amqp, rest = served
    started = dt.datetime.now(UTC) - dt.timedelta(hours=1)
    with ServiceBusAdministrationClient.from_connection_string(rest, transport=plain_http_transport(), retry_total=0) as admin:
        admin.create_topic("dated")
        admin.create_subscription("dated", "s")
        admin.delete_rule("dated", "s", "$Default")
        corr = {"when": NEW_YEAR}
        admin.create_rule("dated", "s", "corr", filter=CorrelationRuleFilter(properties=corr))
        lagged = {"lag": dt.timedelta(minutes=1, seconds=30.25), "back": -dt.timedelta(days=1, hours=2)}
        admin.create_rule("dated", "s", "lagged", filter=CorrelationRuleFilter(properties=lagged))
        assert dict(admin.get_rule("dated", "s", "lagged").filter.properties) == lagged
        admin.create_rule("dated", "s", "recent", filter=SqlRuleFilter("sys.EnqueuedTimeUtc > @since AND kind = 'sql'", parameters={"@since": started}),
                          action=SqlRuleAction("SET stamped = @at; SET enqueued = sys.EnqueuedTimeUtc", parameters={"@at": NEW_YEAR}))
        got = admin.get_rule("dated", "s", "corr").filter.properties
        assert dict(got) == corr
        sql = admin.get_rule("dated", "s", "recent")
        assert sql.filter.parameters["@since"] == started.replace(microsecond=0)  # the SDK writes whole seconds (isodate)
        assert sql.action.parameters["@at"] == NEW_YEAR
    with ServiceBusClient.from_connection_string(amqp, retry_total=0) as client:
        with client.get_topic_sender("dated") as sender:
            sender.send_messages([ServiceBusMessage("a", application_properties={"when": NEW_YEAR}),
                                  ServiceBusMessage("b", application_properties={"kind": "sql"}),
                                  ServiceBusMessage("c", application_properties={"when": NEW_YEAR + dt.timedelta(days=1)})])
        with client.get_subscription_receiver("dated", "s", max_wait_time=3) as receiver:
            bodies = {}
            for m in receiver.receive_messages(2, max_wait_time=3):
                bodies[str(m)] = m.application_properties
                receiver.complete_message(m)
            assert receiver.peek_messages(5) == []  # nothing else was delivered
    assert set(bodies) == {"a", "b"}, bodies  # 'c': another instant
    stamped, enqueued = bodies["b"][b"stamped"], bodies["b"][b"enqueued"]
    assert stamped == int(NEW_YEAR.timestamp() * 1000), stamped  # an AMQP timestamp (pyamqp gives its milliseconds)
    assert abs(enqueued / 1000 - dt.datetime.now(UTC).timestamp()) < 60, enqueued  # serve's instant, not 1970's


@pytest.mark.clauses("RULES-CORR-004", "RULES-SQL-016")
def test_serve_reads_an_amqp_timestamp_in_an_add_rule_request_as_a_date() -> None:
    """The JavaScript SDK's RuleManager adds rules over AMQP (com.microsoft:add-rule): a ``Date`` in a correlation
    filter's properties or a SQL filter's parameters is an AMQP timestamp, which proton gives as an int subclass;
    serve kept it as a number (milliseconds), so a date-valued message property never matched. enumerate-rules
    answers with the timestamp again."""
    proton = pytest.importorskip("proton")
    from sbconform.server.rules import rule_description, rule_from_add_request

    ms = int(NEW_YEAR.timestamp() * 1000)
    rule = rule_from_add_request({"rule-name": "r", "rule-description": {"correlation-filter": {"properties": {"when": proton.timestamp(ms)}}}})
    assert rule.filter.properties == {"when": NEW_YEAR}
    sql = rule_from_add_request({"rule-name": "s", "rule-description": {"sql-filter": {"expression": "a > @t", "parameters": {"@t": proton.timestamp(ms)}}}})
    assert dict(sql.filter.parameters) == {"@t": NEW_YEAR}
    described = rule_description(rule)
    [filt, _, _] = described.value
    assert filt.value[8] == {"when": ms} and isinstance(filt.value[8]["when"], proton.timestamp)


# ------------------------------------------------------------ the transfer dead-letter queue

TDLQ = "via/$Transfer/$DeadLetterQueue"


def stranded(ns: Namespace, conn: int, *ids: str, via: str = "via", dst: str = "dst") -> None:
    """Messages sent via ``via`` to ``dst`` while ``dst`` is SendDisabled: they go to the transfer dead-letter
    queue of ``via`` (TXN-VIA-002)."""
    ns.update(dst, status="SendDisabled")
    txn = ns.transactions.declare(conn)
    for mid in ids:
        ns.transactions.send(conn, txn, dst, Message(b"x", message_id=mid), via=via)
    ns.transactions.discharge(conn, txn, fail=False)
    ns.update(dst, status="Active")


def test_the_transfer_dead_letter_path_parses() -> None:
    """"<queue path>/$Transfer/$DeadLetterQueue", "<topic path>/Subscriptions/<subscription path>/$Transfer/
    $DeadLetterQueue" (service-bus-dead-letter-queues, "Path to the transfer dead-letter queue"): the parser read
    the first as a queue named 'via/$Transfer' and its dead-letter queue."""
    import re

    from sbreference.paths import ENTITY_KEY_PATTERNS, entity_key, parse

    p = parse("Via/$transfer/$deadletterqueue")
    assert (p.entity, p.subscription, p.dead_letter, p.transfer) == ("Via", None, True, True)
    assert str(p) == "Via/$Transfer/$DeadLetterQueue" and p.key == "via"
    s = parse("t/Subscriptions/S/$Transfer/$DeadLetterQueue")
    assert (s.entity, s.subscription, s.transfer, str(s)) == ("t", "S", True, "t/Subscriptions/S/$Transfer/$DeadLetterQueue")
    assert not parse("q/$DeadLetterQueue").transfer
    for path in ("Via/$Transfer/$DeadLetterQueue", "t/Subscriptions/s/$Transfer/$DeadLetterQueue", "q/$DeadLetterQueue", "q", "q/$Transfer"):
        key = path
        for pattern in ENTITY_KEY_PATTERNS:
            key = re.sub(pattern, "", key)
        assert key.lower() == entity_key(path), path


@pytest.mark.clauses("TXN-VIA-003")
def test_the_transfer_dead_letter_queue_is_peeked_received_and_settled() -> None:
    """"The transfer dead-letter queue is a sub-queue of the source entity, so you receive from it the same way you
    receive from a regular dead-letter queue" (service-bus-dead-letter-queues). The model held such messages in a
    tuple, counted but unreachable: the path was not found. Now it is a dead-letter store: peek, peek-lock
    (complete, abandon), receive-and-delete; no dead-lettering from it, no sends to it."""
    ns, clock, conn = namespace()
    ns.create_queue("via")
    ns.create_queue("dst")
    stranded(ns, conn, "a", "b", "c")
    peeked = ns.peek(TDLQ, max_count=10)
    assert [d.message.message_id for d in peeked] == ["a", "b", "c"]
    assert all(d.dead_letter_reason for d in peeked)  # why the transfer failed (the reading: the destination's error)
    assert ns.runtime_info("via")["transfer_dead_letter"] == 3 and ns.runtime_info("via")["active"] == 0
    [first] = ns.receive(conn, TDLQ)
    fails(ErrorCode.INVALID_OPERATION, ns.dead_letter, conn, TDLQ, first.lock_token)
    ns.abandon(conn, TDLQ, first.lock_token)
    [again] = ns.receive(conn, TDLQ)
    assert again.message.message_id == "a" and again.delivery_count == 2
    ns.complete(conn, TDLQ, again.lock_token)
    assert [d.message.message_id for d in ns.receive(conn, TDLQ, max_count=5, mode="receive-and-delete")] == ["b", "c"]
    assert ns.runtime_info("via")["transfer_dead_letter"] == 0
    assert ns.peek("via") == [] and ns.peek("via/$DeadLetterQueue") == [] and ns.peek("dst") == []
    fails(ErrorCode.INVALID_OPERATION, ns.send, conn, TDLQ, Message(b"no"))


@pytest.mark.clauses("TXN-VIA-003")
def test_a_lock_on_the_transfer_dead_letter_queue_expires_and_the_message_returns() -> None:
    ns, clock, conn = namespace()
    ns.create_queue("via", lock_duration=5 * SECOND)
    ns.create_queue("dst")
    stranded(ns, conn, "a")
    [d] = ns.receive(conn, TDLQ)
    clock.advance(6 * SECOND)
    fails(ErrorCode.MESSAGE_LOCK_LOST, ns.complete, conn, TDLQ, d.lock_token)
    assert [x.message.message_id for x in ns.receive(conn, TDLQ)] == ["a"]


@pytest.mark.clauses("TXN-VIA-003")
def test_a_topic_and_a_subscription_have_a_transfer_dead_letter_queue() -> None:
    """A send via a topic strands its message in the topic's transfer dead-letter queue (the legacy client's
    TopicClient.FormatTransferDeadLetterPath: "the dead letter queue of the transfer topic ... can be used in
    receiver creation"); a subscription's is addressable too (empty: the model dead-letters failed forwards in the
    ordinary dead-letter queue, SETTLE-DISC-007)."""
    ns, clock, conn = namespace()
    ns.create_topic("vt")
    ns.create_subscription("vt", "s")
    ns.create_queue("dst")
    stranded(ns, conn, "a", via="vt")
    assert [d.message.message_id for d in ns.peek("vt/$Transfer/$DeadLetterQueue")] == ["a"]
    assert ns.peek("vt/Subscriptions/s/$Transfer/$DeadLetterQueue") == []
    assert ns.receive(conn, "vt/Subscriptions/s/$Transfer/$DeadLetterQueue", mode="receive-and-delete") == []
    fails(ErrorCode.ENTITY_NOT_FOUND, ns.peek, "nope/$Transfer/$DeadLetterQueue")


@pytest.mark.clauses("TXN-VIA-004")
def test_a_via_entity_deleted_before_the_commit_fails_the_commit() -> None:
    """Undocumented (the transactions page's "Transfers and send via" says the transfer entity moves the message on;
    nothing says what a commit does once it is gone). The model delivered the message as if the via entity were
    there. The conservative reading (TXN-D-001): the commit fails and nothing is sent; a via entity deleted and
    created again is another entity, and fails it too."""
    ns, clock, conn = namespace()
    ns.create_queue("via")
    ns.create_queue("dst")
    for recreate in (False, True):
        txn = ns.transactions.declare(conn)
        ns.transactions.send(conn, txn, "dst", Message(b"x", message_id="m"), via="via")
        ns.delete("via")
        if recreate:
            ns.create_queue("via")
        error = fails(ErrorCode.TRANSACTION_ROLLBACK, ns.transactions.discharge, conn, txn, False)
        assert "via" in error.text
        assert ns.peek("dst") == []
        if not recreate:
            ns.create_queue("via")


@pytest.mark.clauses("TXN-VIA-002")
def test_a_message_sent_via_to_a_full_destination_goes_to_the_transfer_dead_letter_queue() -> None:
    """"If the destination queue or entity exceeds the entity size, the message is sent to a TDLQ of the source
    queue" (service-bus-dead-letter-queues, "Dead-lettering in send via scenarios", current revision; an earlier one
    said it went to neither). The model refused the send (quota-exceeded), and a commit after the destination
    filled up was rolled back."""
    ns, clock, conn = namespace()
    ns.create_queue("via")
    ns.create_queue("dst", max_size_in_megabytes=1)
    big = b"x" * (200 * 1024)
    for i in range(5):
        ns.send(conn, "dst", Message(big, message_id=f"fill{i}"))
    txn = ns.transactions.declare(conn)
    ns.transactions.send(conn, txn, "dst", Message(big, message_id="late"), via="via")
    ns.transactions.discharge(conn, txn, fail=False)
    assert [d.message.message_id for d in ns.peek(TDLQ)] == ["late"]
    assert len(ns.peek("dst", max_count=10)) == 5


@pytest.mark.clauses("TXN-VIA-003")
def test_serve_lets_the_python_sdk_receive_from_a_transfer_dead_letter_queue(served) -> None:
    """``get_queue_receiver(..., sub_queue=ServiceBusSubQueue.TRANSFER_DEAD_LETTER)`` attaches to
    '<queue>/$Transfer/$DeadLetterQueue'; serve read the address as the queue 'via/$Transfer' (not found)."""
    from azure.servicebus import ServiceBusClient, ServiceBusSubQueue
    from azure.servicebus.management import ServiceBusAdministrationClient
    from serve_support import strand_via

    from sbconform.server.admin_http import plain_http_transport

    server, amqp, rest = served
    with ServiceBusAdministrationClient.from_connection_string(rest, transport=plain_http_transport(), retry_total=0) as admin:
        admin.create_queue("tvia")
        admin.create_queue("tdst")
        strand_via(server.port, admin, "tvia", "tdst")
        assert admin.get_queue_runtime_properties("tvia").transfer_dead_letter_message_count == 1
        with ServiceBusClient.from_connection_string(amqp, retry_total=0) as client:
            with client.get_queue_receiver("tvia", sub_queue=ServiceBusSubQueue.TRANSFER_DEAD_LETTER, max_wait_time=3) as receiver:
                assert [m.message_id for m in receiver.peek_messages(5)] == ["m1"]
                [got] = receiver.receive_messages(1, max_wait_time=3)
                assert got.message_id == "m1" and got.dead_letter_reason
                receiver.complete_message(got)
        assert admin.get_queue_runtime_properties("tvia").transfer_dead_letter_message_count == 0


# ------------------------------------------------------------ system properties a filter may read


@pytest.mark.clauses("RULES-SQL-017")
def test_a_filter_reads_the_brokered_message_properties_the_model_did_not_know() -> None:
    """"The `sys` value indicates system scope where `<property_name>` is a public property name of the
    BrokeredMessage class" (service-bus-messaging-sql-filter): DeliveryCount, EnqueuedSequenceNumber, ExpiresAtUtc,
    DeadLetterSource, LockedUntilUtc and LockToken are such properties. The model knew only those of
    ServiceBusMessage (plus SequenceNumber, EnqueuedTimeUtc, Size) and called the others non-existent: an evaluation
    error that dead-lettered every message. At the topic a message has not been delivered, locked or dead-lettered:
    DeliveryCount is 0, the lock and dead-letter properties are null; ExpiresAtUtc is EnqueuedTimeUtc + TimeToLive."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    ns, clock, conn = topic_with(Rule("r", SqlFilter(
        "sys.DeliveryCount = 0 AND sys.EnqueuedSequenceNumber = sys.SequenceNumber AND sys.LockToken IS NULL "
        "AND sys.LockedUntilUtc IS NULL AND sys.DeadLetterSource IS NULL AND sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = @ttl",
        {"@ttl": dt.timedelta(minutes=5)})))
    clock.advance(MINUTE)
    ns.send(conn, "t", Message(b"x", time_to_live=5 * MINUTE))
    assert len(ns.receive(conn, "t/Subscriptions/s", max_count=5, mode="receive-and-delete")) == 1
    assert ns.peek("t/Subscriptions/s/$DeadLetterQueue") == []
    ns2, _, conn2 = topic_with(Rule("never", SqlFilter("sys.ExpiresAtUtc < @t", {"@t": epoch + dt.timedelta(days=365 * 8000)})))
    assert not delivered(ns2, conn2)  # no time to live: DateTime.MaxValue
    assert ns2.peek("t/Subscriptions/s/$DeadLetterQueue") == []
    ns3, _, conn3 = topic_with(Rule("bad", SqlFilter("sys.NoSuchProperty = 1")))
    assert not delivered(ns3, conn3)
    assert len(ns3.peek("t/Subscriptions/s/$DeadLetterQueue")) == 1  # still an error


@pytest.mark.clauses("TXN-VIA-003")
def test_the_transfer_dead_letter_queue_locks_for_its_entitys_current_lock_duration() -> None:
    """Its locks last the queue's lock duration, as the dead-letter queue's do, also after an update."""
    ns, clock, conn = namespace()
    ns.create_queue("via", lock_duration=5 * SECOND)
    ns.create_queue("dst")
    stranded(ns, conn, "a")
    [d] = ns.receive(conn, TDLQ)
    assert d.locked_until == clock.now + 5 * SECOND
    ns.abandon(conn, TDLQ, d.lock_token)
    ns.update("via", lock_duration=30 * SECOND)
    [d] = ns.receive(conn, TDLQ)
    assert d.locked_until == clock.now + 30 * SECOND


@pytest.mark.clauses("TXN-VIA-005")
@pytest.mark.parametrize("status", ["Disabled", "SendDisabled"])
def test_a_send_via_an_entity_whose_sends_are_disabled_is_refused(status: str) -> None:
    """A send via an entity is a send to it (its transfer queue): "SendDisabled: You can't send messages to the queue
    ... You'll get an exception if you try to send messages to the queue" (entity-suspend). The model took the send
    and delivered it at the commit. Refused now at the send, and a commit after the via entity was disabled fails."""
    ns, clock, conn = namespace()
    ns.create_queue("via")
    ns.create_queue("dst")
    ns.update("via", status=status)
    txn = ns.transactions.declare(conn)
    fails(ErrorCode.ENTITY_UNAVAILABLE, ns.transactions.send, conn, txn, "dst", Message(b"x", message_id="m"), via="via")
    ns.update("via", status="Active")
    ns.transactions.send(conn, txn, "dst", Message(b"x", message_id="m"), via="via")
    ns.update("via", status=status)
    fails(ErrorCode.TRANSACTION_ROLLBACK, ns.transactions.discharge, conn, txn, False)
    assert ns.peek("dst") == []
    ns.update("via", status="ReceiveDisabled")  # sends allowed
    txn = ns.transactions.declare(conn)
    ns.transactions.send(conn, txn, "dst", Message(b"y", message_id="n"), via="via")
    ns.transactions.discharge(conn, txn, fail=False)
    assert [d.message.message_id for d in ns.peek("dst")] == ["n"]


@pytest.mark.clauses("RULES-ACT-006")
def test_an_action_sets_the_copys_time_to_live() -> None:
    """The action page: sys names "any of the properties on the Service Bus message"; TimeToLive is one a sender sets,
    and topic-filters' list of properties an action changes to no effect does not name it. The model refused the
    statement as it ran (a system property an action cannot change): every message was dead-lettered with
    FilterEvaluationException. Now the copy expires after the TimeSpan set; REMOVE leaves it the entity's default; a
    value that is no TimeSpan is an evaluation error (C# converts nothing to TimeSpan implicitly)."""
    ns, clock, conn = topic_with(Rule("short", SqlFilter("1=1"), SqlRuleAction("SET sys.TimeToLive = @ttl", {"@ttl": dt.timedelta(seconds=10)})))
    ns.send(conn, "t", Message(b"x", message_id="m", time_to_live=MINUTE))
    assert ns.peek("t/Subscriptions/s/$DeadLetterQueue") == []
    [d] = ns.peek("t/Subscriptions/s")
    assert d.message.time_to_live == 10 * SECOND
    clock.advance(11 * SECOND)
    assert ns.receive(conn, "t/Subscriptions/s", mode="receive-and-delete") == []  # expired
    ns2, clock2, conn2 = topic_with(Rule("none", SqlFilter("1=1"), SqlRuleAction("REMOVE sys.TimeToLive")))
    ns2.send(conn2, "t", Message(b"x", time_to_live=SECOND))
    clock2.advance(2 * SECOND)
    assert len(ns2.receive(conn2, "t/Subscriptions/s", mode="receive-and-delete")) == 1  # the default: never
    ns3, _, conn3 = topic_with(Rule("bad", SqlFilter("1=1"), SqlRuleAction("SET sys.TimeToLive = 10")))
    assert not delivered(ns3, conn3)
    assert len(ns3.peek("t/Subscriptions/s/$DeadLetterQueue")) == 1


def test_an_instant_writes_the_date_it_holds() -> None:
    """sbreference.timevalues computes civil dates without the datetime module: checked against it."""
    from sbreference.timevalues import Instant, Span, as_time

    for d in (dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2000, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
              dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), dt.datetime(1969, 12, 31, 12, 0, 0, 5)):
        t = as_time(d)
        assert isinstance(t, Instant) and t == d
        expected = d.replace(tzinfo=None).isoformat().rstrip("0") if d.microsecond else d.replace(tzinfo=None).isoformat()
        assert t.isoformat() == expected + "Z"
    assert as_time(dt.timedelta(days=-1, seconds=5)) == Span(-86_395_000_000)
    with pytest.raises(OverflowError):
        Instant(as_time(dt.datetime(9999, 12, 31, 23, 59, 59, 999999)).us + 1)


# ------------------------------------------------------------ newid()


@pytest.mark.clauses("RULES-SQL-018")
def test_newid_gives_a_new_guid_on_every_call() -> None:
    """"The newid() function returns a System.Guid generated by the System.Guid.NewGuid() method" (the SQL filter and
    action pages): a new one each time. The model's evaluator restarted its counter for every message, so every copy
    got the same GUID, ...0001, in every subscription."""
    ns, _, conn = topic_with(Rule("id", SqlFilter("1=1"), SqlRuleAction("SET user.a = newid(); SET user.b = newid()")))
    ns.create_subscription("t", "s2")
    ns.remove_rule("t/Subscriptions/s2", "$Default")
    ns.add_rule("t/Subscriptions/s2", Rule("id", SqlFilter("1=1"), SqlRuleAction("SET user.a = newid()")))
    for i in range(2):
        ns.send(conn, "t", Message(b"x", message_id=str(i)))
    got = [d.message.application_properties for path in ("t/Subscriptions/s", "t/Subscriptions/s2")
           for d in ns.receive(conn, path, max_count=5, mode="receive-and-delete")]
    ids = [str(p[k]) for p in got for k in ("a", "b") if k in p]
    assert len(ids) == 6 and len(set(ids)) == 6, ids
    assert all(len(i) == 36 and i.count("-") == 4 for i in ids)


@pytest.mark.clauses("RULES-SQL-018")
def test_a_guid_is_not_a_string() -> None:
    """newid() is a System.Guid: C# binds no comparison of a Guid with a string, so ``newid() = 'x'`` is an evaluation
    error (RULES-DLQ-001), where the model compared two strings. serve stores a Guid an action sets as an AMQP uuid."""
    ns, _, conn = topic_with(Rule("cmp", SqlFilter("newid() = 'x'")))
    assert not delivered(ns, conn)
    assert len(ns.peek("t/Subscriptions/s/$DeadLetterQueue")) == 1
    uuid = pytest.importorskip("uuid")
    pytest.importorskip("proton")
    import sbconform.server.rules  # noqa: F401  (installs serve's conversion of the model's values)
    from sbreference.timevalues import Guid, outward

    assert outward(Guid("00000000-0000-0000-0000-000000000007")) == uuid.UUID(int=7)


@pytest.mark.clauses("RULES-ACT-005")
def test_a_scheduled_enqueue_time_set_by_an_action_is_evaluated_again_when_the_subscription_forwards() -> None:
    """topic-filters: an action's ScheduledEnqueueTime "is ignored on the subscription. Although when autoforwarding to
    another queue or topic, they're reevaluated". The model ignored it there too (its note: which values convert to a
    DateTime was undocumented; dates are values since RULES-SQL-016): the forwarded copy arrived at once. Now a date
    set by the action schedules the copy in the destination; a subscription that does not forward still ignores it."""
    ns, clock, conn = topic_with(Rule("later", SqlFilter("1=1"), SqlRuleAction("SET sys.ScheduledEnqueueTimeUtc = sys.EnqueuedTimeUtc + @delay",
                                                                                   {"@delay": dt.timedelta(minutes=1)})))
    ns.create_queue("q")
    ns.create_subscription("t", "fwd", forward_to="q")
    ns.remove_rule("t/Subscriptions/fwd", "$Default")
    ns.add_rule("t/Subscriptions/fwd", Rule("later", SqlFilter("1=1"), SqlRuleAction(
        "SET sys.ScheduledEnqueueTimeUtc = sys.EnqueuedTimeUtc + @delay", {"@delay": dt.timedelta(minutes=1)})))
    ns.send(conn, "t", Message(b"x", message_id="m"))
    assert [d.message.message_id for d in ns.receive(conn, "t/Subscriptions/s", mode="receive-and-delete")] == ["m"]
    assert ns.receive(conn, "q", mode="receive-and-delete") == []  # scheduled in the destination
    clock.advance(MINUTE)
    assert [d.message.message_id for d in ns.receive(conn, "q", mode="receive-and-delete")] == ["m"]


def test_dates_at_the_ends_of_datetimes_range_are_written_with_four_digit_years() -> None:
    # strftime's %Y wrote year 1 as '1-01-01T...', which the SDK's ISO 8601 parser refuses: a rule
    # created with datetime(1, 1, 1) could not be read back
    from sbconform.server.atom_rules import _date_text, _parse_date, _value_type

    first = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)
    assert _value_type(first) == ("dateTime", "0001-01-01T00:00:00Z")
    assert _parse_date(_date_text(first)) == first
    assert _date_text(dt.datetime(9999, 12, 31, 23, 59, 59, 999999)) == "9999-12-31T23:59:59.999999Z"


def test_a_date_whose_utc_instant_is_outside_datetimes_range_is_refused_when_read() -> None:
    # 0001-01-01T00:30:00+01:00 is before year 1 in UTC: read it, and writing it back overflowed
    from sbconform.server.atom_rules import _parse_date

    with pytest.raises((ValueError, OverflowError)):
        _parse_date("0001-01-01T00:30:00+01:00")
    assert _parse_date("2026-01-01T01:00:00+01:00") == dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    assert _parse_date("2026-01-01T00:00:00+01:00").utcoffset() == dt.timedelta(0)


@pytest.mark.clauses("SETTLE-FWD-004", "SETTLE-SESS-001")
def test_a_message_without_session_id_forwarded_into_a_session_queue_is_dead_lettered_as_session_id_is_null() -> None:
    """The dead-letter page's system reasons: "Session ID is null: Session enabled entity doesn't allow a message
    whose session identifier is null" (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-dead-letter-queues).
    A copy fanned out to a session subscription already said so (OP-023); one auto-forwarded into a session queue
    was dead-lettered in its source with the model's own code, "invalid-operation"."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("sessions", requires_session=True)
    ns.create_queue("src", forward_to="sessions")
    conn = ns.connect()
    ns.send(conn, "src", Message(b"x", message_id="m"))
    [dead] = ns.peek("src/$DeadLetterQueue")
    assert (dead.message_id, dead.dead_letter_reason) == ("m", "Session ID is null.")
    assert dead.dead_letter_description == "Session enabled entity doesn't allow a message whose session identifier is null."
    assert ns.peek("sessions") == []


@pytest.mark.clauses("TXN-VIA-003")
def test_a_transfer_dead_letter_lock_is_a_deadline_the_namespace_reports() -> None:
    """next_due / lock_deadlines / tick_due are what a server waits on to serve waiting receivers: a lock on
    a transfer dead-letter queue ending must be among them, as one on an ordinary dead-letter queue is."""
    ns, clock, conn = namespace()
    ns.create_queue("via", lock_duration=5 * SECOND)
    ns.create_queue("dst")
    stranded(ns, conn, "a")
    [d] = ns.receive(conn, TDLQ)
    assert ns.next_due() == d.locked_until
    assert ns.lock_deadlines() == [d.locked_until]
    clock.advance(6 * SECOND)
    assert "via" in ns.tick_due()
    assert ns.next_due() is None
