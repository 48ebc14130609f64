"""Message fidelity on the wire (sbspec/wire.md): what a sender put in a message comes back
as sent, AMQP types and sections included; what the broker owns is set as Service Bus sets it.

Three levels: the codec alone, byte for byte (``sbconform.amqp.codec``); a raw AMQP client
(python-qpid-proton, which keeps AMQP types: uuid, ulong, binary, symbol, ...) against
``sbconform serve``; and the Python SDK's public API (``AmqpAnnotatedMessage``: header,
delivery annotations, footer, value and sequence bodies).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import deque

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue  # noqa: E402
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType, AmqpMessageHeader  # noqa: E402
from proton import (  # noqa: E402
    Array, Condition, Data, Delivery, Described, Message, byte, char, decimal32, decimal64, decimal128, int32, short, symbol, timestamp, ubyte, uint,
    ulong, ushort,
)
from proton.reactor import AtLeastOnce  # noqa: E402
from proton._utils import Fetcher  # noqa: E402  (the blocking receiver's handler, subclassed to keep raw bytes)
from proton.utils import BlockingConnection, BlockingReceiver, SyncRequestResponse  # noqa: E402

from sbreference import NEVER, PEEK_LOCK, Namespace  # noqa: E402
from sbreference.message import Delivery as ModelDelivery, StoredMessage  # noqa: E402
from sbconform.amqp import codec, values  # noqa: E402
from sbconform.server import Config, serve_in_thread  # noqa: E402
from sbconform.server.limits import plain  # noqa: E402
from sbconform.amqp.sas import make_token  # noqa: E402

from serve_support import KEY, KEY_NAME, connection_string  # noqa: E402

QUEUES = ["ids", "bodies", "sections", "absent", "sdk", "state", "dlq", "assigned", "mgmt"]


@pytest.fixture(scope="module")
def server():
    config = Config(queues=[(q, {"lock_duration": 30_000}) for q in QUEUES] + [("pq", {"enable_partitioning": True})])
    srv, thread = serve_in_thread(config)
    yield srv
    srv.stop()
    thread.join(10)


# ------------------------------------------------------------- a raw client
class RawFetcher(Fetcher):
    """proton's blocking fetcher, keeping each transfer's bytes beside the decoded message."""

    def on_delivery(self, event) -> None:
        dlv = event.delivery
        if not dlv.link.is_receiver or dlv.partial or not dlv.readable:
            return
        raw = dlv.link.recv(dlv.pending)
        dlv.link.advance()
        msg = Message()
        msg.decode(raw)
        self.incoming.append(((msg, raw), dlv))
        self.connection.container.yield_()


class RawClient:
    """A plain AMQP 1.0 client: SASL ANONYMOUS, a CBS token per entity, then links."""

    def __init__(self, port: int) -> None:
        self.conn = BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=20)
        self.cbs = SyncRequestResponse(self.conn, "$cbs")

    def authorize(self, path: str) -> None:
        audience = f"sb://localhost/{path}"
        reply = self.cbs.call(Message(body=make_token(audience, KEY_NAME, KEY),
                                      properties={"operation": "put-token", "type": "jwt", "name": audience}))
        assert reply.properties["status-code"] == 200, reply.properties

    def send(self, path: str, message: Message) -> None:
        self.authorize(path)
        sender = self.conn.create_sender(path, options=AtLeastOnce())
        sender.send(message)
        sender.close()

    def receive(self, path: str, count: int = 1) -> list[tuple[Message, bytes]]:
        self.authorize(path)
        fetcher = RawFetcher(self.conn, count)
        link = self.conn.container.create_receiver(self.conn.conn, path, handler=fetcher)
        receiver = BlockingReceiver(self.conn, link, fetcher, credit=count)
        out = []
        for _ in range(count):
            out.append(receiver.receive(timeout=10))
            receiver.accept()
        receiver.close()
        return out

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def raw(server):
    client = RawClient(server.port)
    yield client
    client.close()


def round_trip(raw: RawClient, path: str, message: Message) -> tuple[Message, bytes]:
    raw.send(path, message)
    return raw.receive(path)[0]


def section_bytes(data: bytes) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for code, start, _at, end in codec.sections(data):
        out.setdefault(code, []).append(data[start:end])
    return out


# ------------------------------------------------------------------ codec
def _full_message() -> bytes:
    """A message with every section and a spread of AMQP types, plus a footer (proton has none)."""
    m = Message(body=[1, "two", b"three"], inferred=True)  # an amqp-sequence body
    m.durable = True
    m.priority = 7
    m.id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    m.user_id = b"someone"
    m.address = "dest"
    m.subject = "subj"
    m.reply_to = "back"
    m.correlation_id = ulong(2**64 - 1)
    m.content_type = symbol("application/x-thing")
    m.content_encoding = symbol("gzip")
    m.expiry_time = 4_000_000_000.0
    m.creation_time = 1_700_000_000.5
    m.group_id = "g1"
    m.group_sequence = 9
    m.reply_to_group_id = "rg"
    m.instructions = {symbol("x-da"): ulong(3), symbol("x-da-s"): "v"}
    m.annotations = {symbol("x-custom"): uuid.UUID(int=5), symbol("x-opt-partition-key"): "g1", ulong(77): symbol("numeric key")}
    m.properties = {
        "ulong": ulong(1), "uint": uint(2), "ushort": ushort(3), "ubyte": ubyte(4), "char": char("c"),
        "decimal": decimal32(5), "symbol": symbol("sym"), "binary": b"\x00\x01", "uuid": uuid.UUID(int=7),
        "ts": timestamp(1_700_000_000_000), "float": 1.5, "none": None, "bool": True,
        "described": Described(symbol("d"), "x"), "byte": byte(-5), "short": short(-300), "int": int32(-70000),
        "long": -(2**40), "double": 2.5e300, "decimal64": decimal64(6), "decimal128": decimal128(b"\x01" * 16),
        "string": "unicode \u00e9\u4e2d",
    }
    footer = values.described(codec.FOOTER, values.map_entries([values.symbol("x-footer") + values.binary(b"sig")]))
    return m.encode() + footer


def _through_model(data: bytes, **queue) -> tuple[bytes, object]:
    ns = Namespace("n")
    ns.create_queue("q", **queue)
    conn = ns.connect()
    message = codec.decode(data, 0)
    ns.send(conn, "q", [message])
    d = ns.receive(conn, "q", 1, PEEK_LOCK)[0]
    return codec.encode(d, 0), d


def test_every_section_the_broker_does_not_own_goes_back_out_byte_for_byte() -> None:
    sent = _full_message()
    out, _ = _through_model(sent)
    before, after = section_bytes(sent), section_bytes(out)
    for code in (codec.DELIVERY_ANNOTATIONS, codec.PROPERTIES, codec.APPLICATION_PROPERTIES, codec.AMQP_SEQUENCE, codec.FOOTER):
        assert after[code] == before[code], hex(code)
    annotations = after[codec.MESSAGE_ANNOTATIONS][0]
    for key, raw in codec._entries(before[codec.MESSAGE_ANNOTATIONS][0], 3):
        assert raw in annotations, key  # every sender annotation, as encoded
    assert list(after) == [codec.HEADER, codec.DELIVERY_ANNOTATIONS, codec.MESSAGE_ANNOTATIONS, codec.PROPERTIES,
                           codec.APPLICATION_PROPERTIES, codec.AMQP_SEQUENCE, codec.FOOTER]  # the standard's order
    header = values.read(after[codec.HEADER][0], 3)[0]
    assert header[:2] == [True, 7]  # durable and priority as sent; delivery-count is the broker's
    assert header[4] == 0


def test_the_model_reads_typed_ids_as_dotnet_strings() -> None:
    m = codec.decode(_full_message(), 0)
    assert m.message_id == "12345678-1234-5678-1234-567812345678"
    assert m.correlation_id == str(2**64 - 1)
    assert m.session_id == "g1" and m.partition_key == "g1" and m.content_type == "application/x-thing"
    assert m.application_properties["ulong"] == 1 and m.application_properties["none"] is None


def test_broker_annotations_replace_a_senders_never_double() -> None:
    m = Message(body=b"x", inferred=True)
    m.annotations = {symbol("x-opt-sequence-number"): 999, symbol("x-opt-message-state"): 5, symbol("x-keep"): 1}
    out, d = _through_model(m.encode())
    got = Message()
    got.decode(out)
    assert got.annotations[symbol("x-opt-sequence-number")] == d.sequence_number
    assert got.annotations[symbol("x-opt-message-state")] == 0
    assert got.annotations[symbol("x-keep")] == 1
    keys = [k for k, _ in codec._entries(section_bytes(out)[codec.MESSAGE_ANNOTATIONS][0], 3)]
    assert len(keys) == len(set(keys))


def test_undecodable_messages_are_refused_not_guessed() -> None:
    with pytest.raises(values.WireError):
        codec.decode(b"\x00\x53\x99\x40", 0)  # descriptor 0x99 is no message section
    with pytest.raises(values.WireError):
        codec.decode(b"\x00\x53\x75\xa0\x09ab", 0)  # a data section cut short


# ---------------------------------------------------------- raw AMQP client
KINDS = {uuid.UUID: "uuid", ulong: "ulong", bytes: "binary", str: "string"}


def _plain(x):
    return bytes(x) if isinstance(x, memoryview) else x


@pytest.mark.parametrize("value", [
    uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"), ulong(42), ulong(2**64 - 1), b"\x01\x02binary-id", "a-string-id",
], ids=["uuid", "ulong", "ulong-max", "binary", "string"])
def test_message_and_correlation_ids_keep_their_amqp_type(raw: RawClient, value) -> None:
    m = Message(body=b"x", inferred=True)
    m.id = value
    m.correlation_id = value
    got, data = round_trip(raw, "ids", m)
    # proton's getters lose some types (a ulong id reads as int, binary as memoryview): read the bytes
    fields = values.read(section_bytes(data)[codec.PROPERTIES][0], 3)[0]
    sent_fields = values.read(section_bytes(m.encode())[codec.PROPERTIES][0], 3)[0]
    kinds = [values.read_typed(values.elements(section_bytes(x)[codec.PROPERTIES][0], 3)[i], 0)[0]
             for x in (data, m.encode()) for i in (0, 5)]
    assert kinds[:2] == kinds[2:] == [KINDS[type(value)]] * 2
    assert fields[0] == fields[5] == sent_fields[0]
    assert _plain(got.id) == _plain(got.correlation_id) == value


@pytest.mark.parametrize("body,inferred", [
    (None, False), (b"", True), (b"bytes", True), ("a string value", False), (b"binary value", False), (12345, False),
    ({"k": [1, 2], "n": None}, False), ([1, "two", b"3"], True), ([1, "a list value"], False), (uuid.UUID(int=9), False),
], ids=["no-body", "empty-data", "data", "value-string", "value-binary", "value-int", "value-map", "sequence",
        "value-list", "value-uuid"])
def test_bodies_come_back_as_sent(raw: RawClient, body, inferred) -> None:
    m = Message(body=body, inferred=inferred)
    m.id = "body"
    got, data = round_trip(raw, "bodies", m)
    sent = section_bytes(m.encode())
    back = section_bytes(data)
    for code in codec.BODY_SECTIONS:
        assert back.get(code) == sent.get(code), hex(code)
    assert _plain(got.body) == body


def test_multiple_data_sections_come_back_as_sent(raw: RawClient, server) -> None:
    m = Message(body=b"a", inferred=True)
    m.id = "two-data"
    encoded = m.encode() + values.described(codec.DATA, values.binary(b"second part"))
    raw.authorize("bodies")
    sender = raw.conn.create_sender("bodies", options=AtLeastOnce())

    class Encoded:
        def send(self, link, tag=None):
            dlv = link.delivery(tag or link.delivery_tag())
            link.stream(encoded)
            link.advance()
            return dlv

    sender.send(Encoded())
    sender.close()
    _, data = raw.receive("bodies")[0]
    assert section_bytes(data)[codec.DATA] == section_bytes(encoded)[codec.DATA]


def test_header_annotations_and_application_properties_keep_their_types(raw: RawClient) -> None:
    sent = Message()
    sent.decode(_full_message())
    got, data = round_trip(raw, "sections", sent)
    assert got.durable is True and got.priority == 7
    assert got.instructions == sent.instructions
    for key, value in sent.annotations.items():
        assert got.annotations[key] == value and type(got.annotations[key]) is type(value)
    for key, value in sent.properties.items():
        assert type(got.properties[key]) is type(value), key
        assert got.properties[key] == value, key
    for name in ("user_id", "address", "subject", "reply_to", "content_type", "content_encoding", "expiry_time",
                 "creation_time", "group_id", "group_sequence", "reply_to_group_id"):
        assert getattr(got, name) == getattr(sent, name), name
    assert section_bytes(data)[codec.PROPERTIES] == section_bytes(sent.encode())[codec.PROPERTIES]


def test_absent_properties_stay_absent(raw: RawClient) -> None:
    m = Message(body=b"x", inferred=True)
    m.id = "only-an-id"
    got, data = round_trip(raw, "absent", m)
    fields = values.read(section_bytes(data)[codec.PROPERTIES][0], 3)[0]
    assert fields[0] == "only-an-id" and all(f is None for f in fields[1:])
    # (proton's own getters read an absent content-type as symbol('None'): the old server sent that back)
    for name in ("address", "subject", "reply_to", "correlation_id", "group_id", "reply_to_group_id"):
        assert getattr(got, name) is None, name
    assert got.properties is None  # no application-properties section was sent, none comes back
    assert got.instructions is None


def test_broker_owned_fields_are_set_as_service_bus_sets_them(raw: RawClient) -> None:
    m = Message(body=b"x", inferred=True)
    m.id = "owned"
    before = time.time()
    got, _ = round_trip(raw, "absent", m)
    ann = got.annotations
    assert isinstance(ann[symbol("x-opt-sequence-number")], int) and ann[symbol("x-opt-sequence-number")] >= 1
    assert isinstance(ann[symbol("x-opt-enqueued-time")], timestamp)
    assert before - 2 <= ann[symbol("x-opt-enqueued-time")] / 1000 <= time.time() + 2
    assert ann[symbol("x-opt-locked-until")] > ann[symbol("x-opt-enqueued-time")]
    assert ann[symbol("x-opt-message-state")] == 0
    assert got.delivery_count == 0  # the broker's count of earlier failed deliveries


def test_a_partitioned_entity_says_the_partition(raw: RawClient) -> None:
    m = Message(body=b"x", inferred=True)
    m.id = "p"
    m.annotations = {symbol("x-opt-partition-key"): "key-1"}
    got, _ = round_trip(raw, "pq", m)
    part = got.annotations[symbol("x-opt-partition-id")]
    assert 0 <= part < 16
    assert got.annotations[symbol("x-opt-sequence-number")] >> 48 == part  # the topmost 16 bits (PART-KEY docs)


def test_the_broker_assigns_a_message_id_when_the_sender_set_none(raw: RawClient) -> None:
    got, _ = round_trip(raw, "assigned", Message(body=b"no id", inferred=True))
    assert isinstance(got.id, str) and len(got.id) == 32 and int(got.id, 16) >= 0
    got2, _ = round_trip(raw, "assigned", Message(body=b"no id", inferred=True))
    assert got2.id != got.id


# -------------------------------------------------------------- Python SDK
@pytest.fixture
def sdk(server):
    with ServiceBusClient.from_connection_string(connection_string(server.port), retry_total=0) as c:
        yield c


def test_sdk_annotated_messages_keep_every_section(sdk) -> None:
    footer = {b"x-footer": b"signature"}
    sent = [
        AmqpAnnotatedMessage(value_body={"answer": 42, "list": [1, 2]}, header=AmqpMessageHeader(durable=True, priority=3),
                             delivery_annotations={b"x-da": 1}, footer=footer, annotations={b"x-mine": "m"},
                             application_properties={"k": "v"}, properties={"message_id": "v1"}),
        AmqpAnnotatedMessage(sequence_body=[[1, "two"], ["three"]], properties={"message_id": "s1"}),
        AmqpAnnotatedMessage(data_body=[b"part one", b"part two"], properties={"message_id": "d1"}),
    ]
    with sdk.get_queue_sender("sdk") as s:
        s.send_messages(sent)
    with sdk.get_queue_receiver("sdk", max_wait_time=5) as r:
        got = []
        while len(got) < 3:
            batch = r.receive_messages(3, max_wait_time=5)
            assert batch
            for m in batch:
                r.complete_message(m)
            got += batch
    value, sequence, data = (g.raw_amqp_message for g in got)
    assert value.body_type == AmqpMessageBodyType.VALUE and value.body == {b"answer": 42, b"list": [1, 2]}
    assert value.header.durable is True and value.header.priority == 3
    assert value.delivery_annotations == {b"x-da": 1}
    assert value.footer == footer
    assert value.annotations[b"x-mine"] == b"m"  # the SDK reads strings as bytes
    assert sequence.body_type == AmqpMessageBodyType.SEQUENCE and list(sequence.body) == [[1, b"two"], [b"three"]]
    assert data.body_type == AmqpMessageBodyType.DATA and list(data.body) == [b"part one", b"part two"]


def test_sdk_absent_properties_are_none_not_the_string_none(sdk) -> None:
    with sdk.get_queue_sender("absent") as s:
        s.send_messages(ServiceBusMessage(b"x", message_id="plain"))
    with sdk.get_queue_receiver("absent", max_wait_time=5) as r:
        (m,) = r.receive_messages(1, max_wait_time=5)
        r.complete_message(m)
    assert m.message_id == "plain"
    for name in ("subject", "correlation_id", "content_type", "to", "reply_to", "session_id", "partition_key",
                 "reply_to_session_id", "application_properties", "scheduled_enqueue_time_utc", "time_to_live"):
        assert getattr(m, name) is None, name


def test_sdk_peek_shows_deferred_and_scheduled_states(sdk) -> None:
    with sdk.get_queue_sender("state") as s:
        s.send_messages(ServiceBusMessage(b"deferred", message_id="d"))
        s.schedule_messages(ServiceBusMessage(b"later", message_id="s"), dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    with sdk.get_queue_receiver("state", max_wait_time=5) as r:
        (m,) = r.receive_messages(1, max_wait_time=5)
        assert m.state == ServiceBusMessageState.ACTIVE
        r.defer_message(m)
        peeked = {p.message_id: p for p in r.peek_messages(10, sequence_number=1)}
    assert peeked["d"].state == ServiceBusMessageState.DEFERRED
    assert peeked["s"].state == ServiceBusMessageState.SCHEDULED
    assert peeked["s"].scheduled_enqueue_time_utc is not None


def test_sdk_dead_letter_fields(sdk) -> None:
    with sdk.get_queue_sender("dlq") as s:
        s.send_messages(ServiceBusMessage(b"bad", message_id="bad", application_properties={"mine": 1}))
    with sdk.get_queue_receiver("dlq", max_wait_time=5) as r:
        (m,) = r.receive_messages(1, max_wait_time=5)
        r.dead_letter_message(m, reason="why", error_description="because")
    with sdk.get_queue_receiver("dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5) as r:
        (d,) = r.receive_messages(1, max_wait_time=5)
        r.complete_message(d)
    assert d.message_id == "bad" and d.dead_letter_reason == "why" and d.dead_letter_error_description == "because"
    assert d.application_properties[b"mine"] == 1


def test_sdk_message_without_id_gets_one_from_the_broker(sdk) -> None:
    with sdk.get_queue_sender("assigned") as s:
        s.send_messages(AmqpAnnotatedMessage(data_body=b"anonymous"))
    with sdk.get_queue_receiver("assigned", max_wait_time=5) as r:
        (m,) = r.receive_messages(1, max_wait_time=5)
        r.renew_message_lock(m)
        r.complete_message(m)
    assert m.message_id and m.message_id != "None"


# ------------------------------------------------------------------ links
def test_entity_links_advertise_the_entity_limit_a_tracking_id_and_the_type(raw: RawClient, server) -> None:
    raw.authorize("ids")
    sender = raw.conn.create_sender("ids", options=AtLeastOnce())
    assert sender.link.remote_max_message_size == 256 * 1024  # Standard: 256 KB [quotas]
    props = sender.link.remote_properties
    assert uuid.UUID(props[symbol("com.microsoft:tracking-id")])
    assert props[symbol("com.microsoft:entity-type")] == 0  # a queue
    sender.close()
    receiver = raw.conn.create_receiver("ids")
    assert receiver.link.remote_max_message_size == 256 * 1024
    receiver.close()


def test_premium_entities_advertise_their_own_limit(server, raw: RawClient) -> None:
    big = 4 * 1024 * 1024
    premium, thread = serve_in_thread(Config(sku="premium", queues=[("large", {"max_message_size": big})]))
    try:
        other = RawClient(premium.port)
        other.authorize("large")
        sender = other.conn.create_sender("large", options=AtLeastOnce())
        assert sender.link.remote_max_message_size == big  # the entity's MaxMessageSizeInKilobytes [premium]
        sender.close()
        other.close()
    finally:
        premium.stop()
        thread.join(10)
    with ServiceBusClient.from_connection_string(connection_string(server.port), retry_total=0) as c:
        # (the Python SDK caps a batch at 1 MB whatever the link says: batches are not large messages)
        with c.get_queue_sender("ids") as s:
            assert s.create_message_batch().max_size_in_bytes == 256 * 1024


def test_concurrent_management_requests_each_get_their_own_correlation_id(raw: RawClient, server) -> None:
    with ServiceBusClient.from_connection_string(connection_string(server.port), retry_total=0) as c:
        with c.get_queue_sender("mgmt") as s:
            s.send_messages([ServiceBusMessage(f"m{i}".encode(), message_id=f"c{i}") for i in range(5)])
    raw.authorize("mgmt")
    replies = raw.conn.create_receiver("mgmt/$management", credit=10)
    sender = raw.conn.create_sender("mgmt/$management")
    requests = []
    for i in range(5):
        request = Message(body={"from-sequence-number": i + 1, "message-count": 1},
                          properties={"operation": "com.microsoft:peek-message"})
        request.id = uuid.uuid4()
        request.reply_to = "mgmt/$management"
        requests.append(request)
    for request in requests:  # all sent before any answer is read
        sender.send(request)
    answers = [replies.receive(timeout=10) for _ in requests]  # answers come settled
    by_correlation = {a.correlation_id: a for a in answers}
    assert set(by_correlation) == {r.id for r in requests}
    for i, request in enumerate(requests):
        answer = by_correlation[request.id]
        assert answer.properties["statusCode"] == 200
        peeked = Message()
        peeked.decode(answer.body["messages"][0]["message"])
        assert peeked.id == f"c{i}"  # the answer to this request, not another's


def test_next_available_session_waits_for_the_clients_timeout(server) -> None:
    from azure.servicebus import NEXT_AVAILABLE_SESSION
    from azure.servicebus.exceptions import OperationTimeoutError

    server.call_soon(lambda: server.namespace.create_queue("sessions", requires_session=True))
    time.sleep(0.2)
    with ServiceBusClient.from_connection_string(connection_string(server.port), retry_total=0) as c:
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError):
            with c.get_queue_receiver("sessions", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=3):
                pass
        assert time.monotonic() - started >= 2.5  # not refused at once: the client said 3 s

        def later() -> None:
            time.sleep(1)
            with c.get_queue_sender("sessions") as s:
                s.send_messages(ServiceBusMessage(b"x", session_id="late"))

        import threading

        thread = threading.Thread(target=later)
        thread.start()
        with c.get_queue_receiver("sessions", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=10) as r:
            assert r.session.session_id == "late"  # a session arriving during the wait is taken
        thread.join()


def test_python_auto_lock_renewal_keeps_a_short_lock(server) -> None:
    from azure.servicebus import AutoLockRenewer

    # a 5 s lock: the renewer polls every 0.5 s, so only a stall of 5 s (not mere load) loses it
    server.call_soon(lambda: server.namespace.create_queue("renewed", lock_duration=5_000))
    time.sleep(0.2)
    failures = []
    with ServiceBusClient.from_connection_string(connection_string(server.port), retry_total=0) as c:
        with c.get_queue_sender("renewed") as s:
            s.send_messages(AmqpAnnotatedMessage(data_body=b"no id: the broker assigns one"))
        renewer = AutoLockRenewer(max_lock_renewal_duration=20, on_lock_renew_failure=lambda m, e: failures.append(e))
        with c.get_queue_receiver("renewed", max_wait_time=5, auto_lock_renewer=renewer) as r:
            (m,) = r.receive_messages(1, max_wait_time=5)
            time.sleep(10.5)  # more than two lock durations
            r.complete_message(m)  # still held: renewed meanwhile
        renewer.close()
    assert failures == []


def _request(client: RawClient, path: str, operation: str, body: dict, authorize: bool = True) -> dict:
    """One request to ``path``'s $management node; the answer's application properties."""
    if authorize:
        client.authorize(path)
    replies = client.conn.create_receiver(f"{path}/$management", credit=1)
    sender = client.conn.create_sender(f"{path}/$management")
    request = Message(body=body, properties={"operation": operation})
    request.id = uuid.uuid4()
    request.reply_to = f"{path}/$management"
    sender.send(request)
    answer = replies.receive(timeout=10)
    assert answer.correlation_id == request.id
    sender.close()
    replies.close()
    return answer.properties


def _disposition(client: RawClient, path: str, token: uuid.UUID, authorize: bool = True) -> dict:
    return _request(client, path, "com.microsoft:update-disposition",
                    {"disposition-status": "completed", "lock-tokens": Array(0, Data.UUID, token)}, authorize)


def _accept_on_link(client: RawClient, delivery) -> tuple[int, str | None]:
    """An AMQP disposition (accepted, unsettled) of a delivery on its receive link; the broker's
    outcome and the error condition it carries, if any."""
    delivery.update(Delivery.ACCEPTED)
    client.conn.wait(lambda: delivery.remote_state in (Delivery.ACCEPTED, Delivery.REJECTED), timeout=10,
                     msg="no outcome for the disposition")
    condition = delivery.remote.condition
    return delivery.remote_state, (str(condition.name) if condition is not None else None)


def test_settlement_by_lock_token_through_management_links(server, raw: RawClient) -> None:
    """SETTLE-LOCK-011: a lock belongs to the entity. Another connection authorised on the entity
    settles or renews a lock by its token through its own management link, as the holder would;
    the holder's own disposition of that delivery then fails with message-lock-lost (the lock is
    gone). A connection with no token for the entity is refused, and another entity's management
    node does not know the token: both leave the lock in place."""
    server.call_soon(lambda: server.namespace.create_queue("crosslock", lock_duration=30_000))
    time.sleep(0.2)
    for i in range(3):
        m = Message(body=b"x", inferred=True)
        m.id = f"held-{i}"
        raw.send("crosslock", m)
    raw.authorize("crosslock")
    fetcher = RawFetcher(raw.conn, 3)
    link = raw.conn.container.create_receiver(raw.conn.conn, "crosslock", handler=fetcher)
    receiver = BlockingReceiver(raw.conn, link, fetcher, credit=3)
    tokens = []
    for _ in range(3):
        receiver.receive(timeout=10)
        tokens.append(uuid.UUID(bytes_le=_raw_tag(fetcher.unsettled[-1])))  # the delivery tag is the lock token
    completed, renewed, kept = fetcher.unsettled
    other, stranger = RawClient(server.port), RawClient(server.port)
    try:
        refused = _disposition(stranger, "crosslock", tokens[2], authorize=False)
        assert refused["statusCode"] == 401, refused
        unknown = _disposition(other, "sections", tokens[2])  # a token of another entity
        assert unknown["statusCode"] == 410 and unknown["errorCondition"] == "com.microsoft:message-lock-lost", unknown
        done = _disposition(other, "crosslock", tokens[0])
        assert done["statusCode"] == 200, done
        again = _disposition(other, "crosslock", tokens[0])  # settled once: the lock is gone
        assert again["statusCode"] == 410 and again["errorCondition"] == "com.microsoft:message-lock-lost", again
        renewal = _request(other, "crosslock", "com.microsoft:renew-lock", {"lock-tokens": Array(0, Data.UUID, tokens[1])})
        assert renewal["statusCode"] == 200, renewal
    finally:
        other.close()
        stranger.close()
    assert _accept_on_link(raw, completed) == (Delivery.REJECTED, "com.microsoft:message-lock-lost")
    lost = _disposition(raw, "crosslock", tokens[0])
    assert lost["statusCode"] == 410 and lost["errorCondition"] == "com.microsoft:message-lock-lost", lost
    assert _accept_on_link(raw, renewed) == (Delivery.ACCEPTED, None)  # renewed by another: still the holder's to settle
    assert _accept_on_link(raw, kept) == (Delivery.ACCEPTED, None)  # the refused requests left it in place
    receiver.close()
    nothing_left = _request(raw, "crosslock", "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 10})
    assert nothing_left["statusCode"] == 204, nothing_left  # the other connection's complete removed held-0


def _raw_tag(delivery) -> bytes:
    from cproton import bytes2pybytes
    from cproton_ffi import lib

    return bytes2pybytes(lib.pn_delivery_tag(delivery._impl))


def test_any_mutation_of_a_message_decodes_or_is_a_wire_error() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    sent = _full_message()

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, len(sent) - 1), st.integers(0, 255)), min_size=1, max_size=4),
           st.integers(0, len(sent)))
    def check(flips, cut) -> None:
        data = bytearray(sent[:cut] if cut % 3 == 0 else sent)
        for at, value in flips:
            if at < len(data):
                data[at] = value
        try:
            m = codec.decode(bytes(data), 0)
        except values.WireError:
            return
        assert isinstance(m, codec.WireMessage)
        if plain(m):  # the server skips the trial encoding of a plain message: it must encode
            codec.encode(ModelDelivery(StoredMessage(m, 1, 0, NEVER, 0)), 0)

    check()


def test_an_empty_properties_list_goes_back_out_with_the_brokers_message_id() -> None:
    """A properties section that is an empty list8 (legal, if odd: no field set) decodes to no
    fields; it goes out again with the MessageId the broker assigned, as a missing one does."""
    sent = values.described(codec.PROPERTIES, b"\xc0\x01\x00") + values.described(codec.DATA, values.binary(b"x"))
    out, d = _through_model(sent)
    assert values.read(section_bytes(out)[codec.PROPERTIES][0], 3)[0][0] == d.message.wire.assigned_message_id


def test_an_application_property_the_amqp_spec_excludes_is_refused_at_send() -> None:
    """AMQP 1.0 part 3, 3.2.5: application-properties values are "simple types only, that is,
    excluding map, list, and array types"; keys are strings. The broker refuses such a message at
    the door rather than store what it could not hand back as an application property."""
    for bad in ({"array": Array(0, Data.INT, 1, 2)}, {"list": [1, 2]}, {"map": {"a": 1}}):
        m = Message(body=b"x", inferred=True)
        m.properties = bad
        with pytest.raises(values.WireError):
            codec.decode(m.encode(), 0)
    symbol_key = Data()  # proton will not encode it; a hostile client will
    symbol_key.put_object(Described(ulong(codec.APPLICATION_PROPERTIES), {symbol("k"): 1}))
    with pytest.raises(values.WireError):
        codec.decode(symbol_key.encode() + values.described(codec.DATA, values.binary(b"x")), 0)
    m = Message(body=b"x", inferred=True)
    m.properties = {"described": Described(symbol("com.microsoft:timespan"), 5)}  # Service Bus's own described types pass
    assert "described" in codec.decode(m.encode(), 0).application_properties


def test_the_python_sdk_assigns_a_message_id_to_every_message_it_builds() -> None:
    """The Python SDK 7.15's ServiceBusMessage constructor calls the scheduled_enqueue_time_utc
    setter even with None, and that setter gives the message a GUID MessageId when it has none:
    every message built by the SDK carries one (PART-DISC-009). Setting ``message_id = None``
    afterwards removes it (the SDK target does so to send what the scenario sends)."""
    from azure.servicebus import ServiceBusMessage

    built = ServiceBusMessage(b"x")
    assert built.message_id and uuid.UUID(built.message_id)
    built.message_id = None
    assert built.raw_amqp_message.properties.message_id is None


def test_the_sdk_target_sends_a_message_without_id_as_the_scenario_wrote_it() -> None:
    from sbreference import Message
    from sbconform.targets.sdk import SdkTarget

    target = SdkTarget.__new__(SdkTarget)  # only the message mapping is used: no connection
    assert target._sdk_message(Message(body=b"x")).message_id is None
    assert target._sdk_message(Message(body=b"x", message_id="m")).message_id == "m"


@pytest.mark.clauses("SETTLE-MOD-001")
def test_properties_to_modify_on_the_link_as_the_dotnet_client_sends_them(server, raw: RawClient) -> None:
    """SETTLE-MOD-001 on the wire: an abandon (modified outcome) carries the properties to modify
    in its message-annotations; the message comes back with them set, the others as sent. A value
    the broker could not write back is refused, and the lock stays: update-disposition by lock
    token then dead-letters it with its own properties-to-modify, and the dead-letter queue's copy
    has them all."""
    server.call_soon(lambda: server.namespace.create_queue("modq", lock_duration=30_000))
    time.sleep(0.2)
    m = Message(body=b"x", inferred=True, properties={"stage": "new", "kind": "order", "flag": 1})
    m.id = "mod-1"
    raw.send("modq", m)
    raw.authorize("modq")
    fetcher = RawFetcher(raw.conn, 5)
    link = raw.conn.container.create_receiver(raw.conn.conn, "modq", handler=fetcher)
    receiver = BlockingReceiver(raw.conn, link, fetcher, credit=5)

    def settle(state, wanted) -> None:
        dlv = fetcher.unsettled[-1]
        state(dlv)
        raw.conn.wait(lambda: dlv.remote_state == wanted, timeout=10, msg="no outcome for the disposition")

    receiver.receive(timeout=10)

    def abandon(dlv) -> None:
        dlv.local.failed = True
        dlv.local.annotations = {symbol("stage"): "retried", symbol("attempt"): ulong(2), symbol("flag"): True,
                                 symbol("at"): timestamp(1_700_000_000_000), symbol("tag"): symbol("t"), symbol("raw"): b"\x01"}
        dlv.update(Delivery.MODIFIED)

    settle(abandon, Delivery.MODIFIED)
    again, _ = receiver.receive(timeout=10)
    props = again.properties
    assert props == {"stage": "retried", "kind": "order", "attempt": 2, "flag": True, "at": 1_700_000_000_000, "tag": "t",
                     "raw": b"\x01"}, props
    # each as the client typed it (a change of type alone is a change: 1 became True)
    assert [type(props[k]) for k in ("attempt", "flag", "at", "tag")] == [ulong, bool, timestamp, symbol], props

    def unwritable(dlv) -> None:
        dlv.local.failed = True
        dlv.local.annotations = {symbol("bad"): [1, 2]}  # a list: not a simple value (AMQP 1.0 3.2.5)
        dlv.update(Delivery.MODIFIED)

    settle(unwritable, Delivery.REJECTED)
    assert str(fetcher.unsettled[-1].remote.condition.name) == "com.microsoft:argument-error"

    # the refusal settled that delivery, but the lock stayed: the dead-letter goes by lock token
    token = uuid.UUID(bytes_le=_raw_tag(fetcher.unsettled[-1]))
    for bad in ({"nested": {"a": 1}}, {"huge": "x" * 70_000}):  # not a simple value; past the header quota
        refused = _request(raw, "modq", "com.microsoft:update-disposition", {
            "disposition-status": "abandoned", "lock-tokens": Array(0, Data.UUID, token), "properties-to-modify": bad})
        assert refused["statusCode"] == 400 and refused["errorCondition"] == "com.microsoft:argument-error", refused
    answer = _request(raw, "modq", "com.microsoft:update-disposition", {
        "disposition-status": "suspended", "lock-tokens": Array(0, Data.UUID, token), "deadletter-reason": "bad",
        "deadletter-description": "why", "properties-to-modify": {"stage": "dead"}})
    assert answer["statusCode"] == 200, answer
    # a dead-letter on the link (rejected outcome): the properties ride in the error info beside the reason
    second = Message(body=b"y", inferred=True, properties={"kind": "refund"})
    second.id = "mod-2"
    raw.send("modq", second)
    receiver.receive(timeout=10)

    def dead_letter(dlv) -> None:
        dlv.local.condition = Condition("com.microsoft:dead-letter", None, {
            symbol("DeadLetterReason"): "worse", symbol("DeadLetterErrorDescription"): "because", symbol("stage"): "gone"})
        dlv.update(Delivery.REJECTED)

    settle(dead_letter, Delivery.REJECTED)
    assert fetcher.unsettled[-1].remote.condition is None
    receiver.close()
    raw.authorize("modq/$DeadLetterQueue")
    dlq_fetcher = RawFetcher(raw.conn, 2)
    dlq_link = raw.conn.container.create_receiver(raw.conn.conn, "modq/$DeadLetterQueue", handler=dlq_fetcher)
    dlq = BlockingReceiver(raw.conn, dlq_link, dlq_fetcher, credit=2)
    (dead, _), (gone, _) = dlq.receive(timeout=10), dlq.receive(timeout=10)
    assert {k: v for k, v in dead.properties.items() if k in ("stage", "kind", "attempt", "DeadLetterReason")} == {
        "stage": "dead", "kind": "order", "attempt": 2, "DeadLetterReason": "bad"}, dead.properties
    assert gone.properties == {"kind": "refund", "stage": "gone", "DeadLetterReason": "worse",
                               "DeadLetterErrorDescription": "because"}, gone.properties
