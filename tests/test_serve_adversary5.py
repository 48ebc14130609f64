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



@pytest.mark.needs("model-internals")
@pytest.mark.clauses("RULES-SQL-018")
def test_a_uuid_property_is_a_guid_to_the_filters() -> None:
    """An AMQP uuid application property (as serve's codec and the SDKs read one: a uuid.UUID) compared with newid()'s
    Guid was an evaluation error ("operator '=' cannot be applied to operands of type UUID and Guid") that
    dead-lettered the message: for Service Bus both are System.Guid, which compare (= false for two GUIDs that
    differ); a uuid is still no string."""
    import uuid

    ns = Namespace(clock=VirtualClock())
    conn = ns.connect()
    ns.create_topic("t")
    ns.create_subscription("t", "s")
    ns.remove_rule("t/Subscriptions/s", "$Default")
    ns.add_rule("t/Subscriptions/s", Rule("g", SqlFilter("g = newid() OR g = g2")))
    ns.send(conn, "t", Message(b"x", message_id="same", application_properties={"g": uuid.UUID(int=5), "g2": uuid.UUID(int=5)}))
    ns.send(conn, "t", Message(b"x", message_id="other", application_properties={"g": uuid.UUID(int=5), "g2": uuid.UUID(int=6)}))
    ns.send(conn, "t", Message(b"x", message_id="text", application_properties={"g": uuid.UUID(int=5), "g2": str(uuid.UUID(int=5))}))
    assert [d.message.message_id for d in ns.receive(conn, "t/Subscriptions/s", 10, "receive-and-delete")] == ["same"]
    assert [d.message.message_id for d in ns.peek("t/Subscriptions/s/$DeadLetterQueue", 1, 10)] == ["text"]

# ------------------------------------------------------------ through serve (raw AMQP frames)
pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from proton import Described, symbol, timestamp  # noqa: E402
from proton import Message as ProtonMessage  # noqa: E402

from serve_support import ATTACH, CLOSE, SOURCE, TARGET, TRANSFER, RawClient, flow, frame, performative  # noqa: E402
from test_serve_adversary2 import management, outcome  # noqa: E402
from test_serve_security import InProcess, authorized_sender  # noqa: E402

ACCEPTED = 0x24
TIMESPAN, DATETIME_OFFSET, URI = symbol("com.microsoft:timespan"), symbol("com.microsoft:datetime-offset"), symbol("com.microsoft:uri")
#: .NET's DateTime.MaxValue in AMQP milliseconds, and in Python (whose resolution is a microsecond)
MAX_MS = 253_402_300_799_999
DATETIME_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


class Adv5(InProcess):
    config = {"UserConfig": {"Namespaces": [{"Name": "adv5", "Queues": [{"Name": "q"}],
                                             "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s"}]}]}]}}


@pytest.fixture(scope="module")
def srv5():
    server = Adv5(link_credit=20, max_delivery_size=256 * 1024, open_timeout=2.0, idle_timeout=10.0)
    yield server
    server.stop()


def with_rule(srv: InProcess, rule: Rule, sub: str = "s") -> None:
    """``sub`` of topic 't' holds ``rule`` alone (made on the server's loop)."""

    def change() -> None:
        ns = srv.server.namespace
        path = f"t/Subscriptions/{sub}"
        for r in ns.list_rules(path):
            ns.remove_rule(path, r.name)
        ns.add_rule(path, rule)

    srv.on_loop(change)


def sent_to_topic(srv: InProcess, *props: dict) -> None:
    c = authorized_sender(srv.port, "t")
    for i, p in enumerate(props):
        m = ProtonMessage(body=b"x", id=f"m{i}", properties=p)
        c.send(c.transfer(5, m.encode()))
        assert outcome(c, i + 1) == (ACCEPTED, None)  # (disposition 0: the put-token's)
    c.close()


def received(srv: InProcess, count: int, path: str = "t/Subscriptions/s") -> list[ProtonMessage]:
    """What a receive-and-delete receiver on ``path`` is sent, as it came over the wire: ``count`` messages are
    waited for (5 s at most), then anything more for 0.2 s."""
    from proton import Described as D
    from proton import ubyte, uint, ulong

    r = RawClient(srv.port)
    r.open_session()
    assert r.put_token(path.split("/")[0]) == 200
    before = len(r.frames.of(TRANSFER))
    source, target = D(ulong(SOURCE), [path]), D(ulong(TARGET), [None])
    r.send(frame(performative(ATTACH, "rd", uint(5), True, ubyte(1), ubyte(0), source, target)), flow(5, 50))
    r.read(5, until=lambda f: len(f.of(TRANSFER)) - before >= count)
    r.read(0.2)
    r.close()
    out = []
    for t in r.frames.of(TRANSFER)[before:]:
        m = ProtonMessage()
        m.decode(t[3])
        out.append(m)
    return out


def request(srv: InProcess, path: str, operation: str, body: dict) -> ProtonMessage:
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token(path.split("/")[0]) == 200
    reply = management(c, path, operation, body, 10)
    assert not c.frames.of(CLOSE), [f[2] for f in c.frames.of(CLOSE)]  # the connection goes on
    c.close()
    assert reply is not None, "no reply"
    return reply


def test_enumerate_rules_answers_a_correlation_filter_holding_a_duration(srv5: InProcess) -> None:
    """A correlation filter property that is a duration (the REST API's d6p1:duration, RULES-CORR-004) made
    enumerate-rules fail to encode its answer: amqp:internal-error closed the connection. It is answered as Service
    Bus writes a TimeSpan in AMQP: com.microsoft:timespan, a long of 100 ns ticks (azure-sdk-for-net,
    AmqpMessageConverter.TryGetAmqpObjectFromNetObject)."""
    from sbreference.rules import CorrelationFilter

    with_rule(srv5, Rule("lag", CorrelationFilter(properties={"lag": dt.timedelta(seconds=90, microseconds=5)})))
    reply = request(srv5, "t/Subscriptions/s", "com.microsoft:enumerate-rules", {"top": 10, "skip": 0})
    assert reply.properties["statusCode"] == 200, reply.properties
    [entry] = reply.body["rules"]
    assert entry["rule-description"].value[0].value[8] == {"lag": Described(TIMESPAN, 900_000_050)}


@pytest.mark.parametrize("ms, read_as", [(2**62, DATETIME_MAX), (MAX_MS, DATETIME_MAX), (-2**62, dt.datetime(1970, 1, 1, tzinfo=UTC))],
                         ids=["past-max", "max", "before-1970"])
def test_an_add_rule_timestamp_outside_datetimes_range_is_read_as_service_bus_reads_it(srv5: InProcess, ms: int, read_as) -> None:
    """An AMQP timestamp past DateTime's range in add-rule was a 400 "bad request: Python int too large to convert to
    C int" (Python's words). Service Bus reads timestamps with Microsoft.Azure.Amqp, whose TimeStampEncoding.ToDateTime
    reads a negative one as the epoch and one at or past DateTime.MaxValue's milliseconds as DateTime.MaxValue
    (https://github.com/Azure/azure-amqp, src/Encoding/TimeStampEncoding.cs): the rule is added with that date."""
    from sbreference.timevalues import as_time

    name = f"ts{ms}"
    body = {"rule-name": name, "rule-description": {"correlation-filter": {"properties": {"at": timestamp(ms)}}}}
    reply = request(srv5, "t/Subscriptions/s", "com.microsoft:add-rule", body)
    assert reply.properties["statusCode"] == 200, reply.properties
    [rule] = [r for r in srv5.on_loop(lambda: srv5.server.namespace.list_rules("t/Subscriptions/s")) if r.name == name]
    assert as_time(rule.filter.properties["at"]) == as_time(read_as)


def test_a_message_property_timestamp_outside_datetimes_range_is_stored_as_sent(srv5: InProcess) -> None:
    """A message whose application property is an AMQP timestamp past DateTime's range (2**62 ms; valid AMQP) was
    refused: argument-error "The message could not be decoded: malformed message: OverflowError: date value out of
    range". Service Bus stores messages as sent and reads such a timestamp as DateTime.MaxValue
    (Microsoft.Azure.Amqp's TimeStampEncoding.ToDateTime): it is accepted, delivered with the bytes it came with, and
    a filter sees DateTime.MaxValue."""
    with_rule(srv5, Rule("max", SqlFilter("at >= @p", {"@p": DATETIME_MAX})))
    sent_to_topic(srv5, {"at": timestamp(2**62)}, {"at": timestamp(MAX_MS - 1)})
    got = received(srv5, 1)
    assert [(m.id, m.properties["at"]) for m in got] == [("m0", timestamp(2**62))]


def test_service_bus_encodings_of_timespan_datetimeoffset_and_uri_are_read_as_those_values(srv5: InProcess) -> None:
    """A TimeSpan property, as Service Bus's clients send one (a long of ticks described by com.microsoft:timespan;
    azure-sdk-for-net AmqpMessageConverter), reached the filters as a (descriptor, value) pair: 'lag > @p' with a
    TimeSpan parameter was an evaluation error and the message was dead-lettered. It is a TimeSpan to its tick (15
    ticks > 1 us), a com.microsoft:datetime-offset a date (its UtcTicks), a com.microsoft:uri a Uri (an action's copy
    of it is written as one, not as an AMQP list); each goes back out as sent."""
    new_year_ticks = 621_355_968_000_000_000 + int(NEW_YEAR.timestamp()) * 10_000_000
    with_rule(srv5, Rule("typed", SqlFilter("lag > @p AND at = @d", {"@p": dt.timedelta(microseconds=1), "@d": NEW_YEAR}),
                         SqlRuleAction("SET copy = link")))
    sent_to_topic(srv5,
                  {"lag": Described(TIMESPAN, 15), "at": Described(DATETIME_OFFSET, new_year_ticks), "link": Described(URI, "http://x/")},
                  {"lag": Described(TIMESPAN, 10), "at": Described(DATETIME_OFFSET, new_year_ticks), "link": Described(URI, "http://x/")})
    got = received(srv5, 1)
    assert [m.id for m in got] == ["m0"]
    props = got[0].properties
    assert props["lag"] == Described(TIMESPAN, 15) and props["at"] == Described(DATETIME_OFFSET, new_year_ticks)
    assert props["copy"] == props["link"] == Described(URI, "http://x/")
    assert not received(srv5, 0, "t/Subscriptions/s/$DeadLetterQueue")


@pytest.fixture(scope="module")
def rest5(srv5: InProcess):
    from sbconform.server.admin_http import AdminHttp

    http = AdminHttp(srv5.server, "127.0.0.1", 0)
    http.start()
    yield http
    http.stop()


RULE_ENTRY = ('<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription '
              'xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">'
              '<Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>w</Key><Value i:type="d6p1:{type}" '
              'xmlns:d6p1="http://www.w3.org/2001/XMLSchema">{text}</Value></KeyValueOfstringanyType></Properties></Filter>'
              '</RuleDescription></content></entry>')
TIMESPAN_MAX_TICKS = 2**63 - 1


def rest_value(http, name: str) -> tuple[str, str]:
    """(xs type, text) of rule ``name``'s one correlation property, as GET answers it."""
    import re

    from test_admin_http import raw

    status, body = raw(http, "GET", f"/t/Subscriptions/s/Rules/{name}?api-version=2021-05")
    assert status == 200, body[:300]
    [(kind, text)] = re.findall(r'<Value i:type="d6p1:(\w+)"[^>]*>([^<]*)</Value>', body.decode())
    return kind, text


def duration_ticks(text: str) -> int:
    """An xs:duration's ticks, exactly (as .NET's XmlConvert.ToTimeSpan reads one; days, hours, minutes, seconds)."""
    import re
    from decimal import Decimal

    m = re.fullmatch(r"(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?)?", text)
    days, hours, minutes = (int(g or 0) for g in m.group(2, 3, 4))
    ticks = ((days * 24 + hours) * 60 + minutes) * 60 * 10**7 + int(Decimal(m.group(5) or 0) * 10**7)
    return -ticks if m.group(1) else ticks


def test_durations_past_timespan_are_refused_and_timespan_max_is_written_back_readable(srv5: InProcess, rest5) -> None:
    """The REST API took P10675199DT2H48M5.4775808S, one tick past TimeSpan.MaxValue (Service Bus's reader,
    XmlConvert.ToTimeSpan, overflows: a 400), and wrote TimeSpan.MaxValue itself back as ...5.477581S (rounded to the
    microsecond, past MaxValue: a .NET client could not read the rule back). A duration is read to the tick, refused
    past TimeSpan's range, and written no larger than it was."""
    from test_admin_http import raw

    put = lambda name, text: raw(rest5, "PUT", f"/t/Subscriptions/s/Rules/{name}?api-version=2021-05",  # noqa: E731
                                 body=RULE_ENTRY.format(type="duration", text=text).encode())
    assert put("span-over", "P10675199DT2H48M5.4775808S")[0] == 400
    assert put("span-days-over", "P10675200D")[0] == 400
    assert put("span-max", "P10675199DT2H48M5.4775807S")[0] == 201
    kind, text = rest_value(rest5, "span-max")
    assert kind == "duration" and TIMESPAN_MAX_TICKS - 10 < duration_ticks(text) <= TIMESPAN_MAX_TICKS, text


def test_a_rule_added_over_amqp_with_a_timespan_reads_back_through_rest_as_a_duration(srv5: InProcess, rest5) -> None:
    """A correlation property added over AMQP as com.microsoft:timespan is a TimeSpan to the model; the REST API wrote
    it as d6p1:string 'Span(...)'. It is a d6p1:duration of the same ticks (to the microsecond, as written)."""
    body = {"rule-name": "amqp-span", "rule-description": {"correlation-filter": {"properties": {"w": Described(TIMESPAN, 900_000_000)}}}}
    assert request(srv5, "t/Subscriptions/s", "com.microsoft:add-rule", body).properties["statusCode"] == 200
    assert rest_value(rest5, "amqp-span") == ("duration", "PT1M30S")


@pytest.mark.parametrize("when", ["soon", Described(TIMESPAN, 5), 5], ids=["string", "timespan", "long"])
def test_a_scheduled_enqueue_time_that_is_no_timestamp_is_refused_saying_so(srv5: InProcess, when) -> None:
    """x-opt-scheduled-enqueue-time is a DateTime, an AMQP timestamp (every SDK writes one). A string was refused with
    Python's words ("malformed message: ValueError: invalid literal for int() with base 10: 'soon'"), a described
    value with "TypeError: int() argument must be ... not 'tuple'", and a long was taken as milliseconds. Each is
    refused with an argument error naming the annotation and what it holds."""
    c = authorized_sender(srv5.port, "q")
    m = ProtonMessage(body=b"x", id="when")
    m.annotations = {symbol("x-opt-scheduled-enqueue-time"): when}
    c.send(c.transfer(5, m.encode()))
    assert outcome(c, 1) == (0x25, "com.microsoft:argument-error")
    text = c.frames.of(0x15)[1][2].value[4].value[0].value[1]
    assert "x-opt-scheduled-enqueue-time" in text and "timestamp" in text and "Error" not in text, text
    c.close()
    assert srv5.on_loop(lambda: srv5.server.namespace.runtime_info("q")["scheduled"]) == 0
