"""``sbconform serve`` against a hostile client (third round): one test per defect found, each
written to fail on the server as it was. Raw AMQP frames (``serve_support``) against a server on
a thread of this process (``InProcess`` of ``test_serve_security``, here with its own entities)."""

from __future__ import annotations

import queue

import pytest

pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from proton import UNDESCRIBED, Array, Data, Described, Message, symbol, uint, ulong  # noqa: E402

from serve_support import ATTACH, CLOSE, DETACH, DISPOSITION, TRANSFER, RawClient, attach, condition_of, encode_value, flow, frame, performative  # noqa: E402,F401
from test_serve_adversary2 import locked_delivery, management, outcome  # noqa: E402
from test_serve_security import served  # noqa: E402
from test_serve_security import InProcess, authorized_sender, srv  # noqa: E402,F401 (srv: the fixture)

ACCEPTED, REJECTED = 0x24, 0x25
KB = 1024

CONFIG = {"UserConfig": {"Namespaces": [{"Name": "adv3", "Queues": [
    {"Name": "small", "Properties": {"MaxSizeInMegabytes": 1}},
    {"Name": "open", "Properties": {"LockDuration": "PT5S"}},
]}]}}


class Configured(InProcess):
    """``InProcess`` with this module's entities."""

    config = CONFIG

    def entity_bytes(self, path: str) -> int:
        return self.on_loop(lambda: self.server.namespace.entities[path].bytes)


@pytest.fixture
def srv3():
    server = Configured(max_delivery_size=2 * 1024 * KB, open_timeout=2.0, idle_timeout=10.0)
    yield server
    server.stop()


def section(code: int, value) -> bytes:
    return encode_value(Described(ulong(code), value))


def stuffed(where: str, size: int, message_id: str) -> bytes:
    """A message of a one-byte body carrying ``size`` bytes elsewhere: in message annotations,
    delivery annotations, the footer, or an application property of a described type."""
    filler = "a" * size
    out = b""
    if where == "delivery-annotations":
        out += section(0x71, {symbol("x-filler"): filler})
    if where == "message-annotations":
        out += section(0x72, {symbol("x-filler"): filler})
    out += section(0x73, [message_id])
    if where == "described-property":
        out += section(0x74, {"p": Described(symbol("x:filler"), filler)})
    out += section(0x75, b"x")
    if where == "footer":
        out += section(0x78, {symbol("x-filler"): filler})
    return out


PLACES = ["message-annotations", "delivery-annotations", "footer", "described-property"]


# ------------------------------------------------------------ 1. message size as sent
@pytest.mark.parametrize("where", PLACES)
def test_a_message_stuffed_past_the_message_size_limit_is_refused(srv3: Configured, where: str) -> None:
    """[quotas] "Message size for a queue, topic, or subscription entity: 256 KB (Standard)"; the
    message size "includes the size of properties (system and user) and the size of payload". A
    message of one byte of body and 300 KB elsewhere is over it."""
    c = authorized_sender(srv3.port, "open")
    c.send(c.transfer(5, stuffed(where, 300 * KB, "big")))
    assert outcome(c, 1) == (REJECTED, "amqp:link:message-size-exceeded")
    assert srv3.held("open") == 0


@pytest.mark.parametrize("where", PLACES[:3])  # (a property over 32 KB is refused: SETTLE-SEND-009)
def test_the_entity_size_quota_counts_what_was_sent_not_only_the_body(srv3: Configured, where: str) -> None:
    """[quotas] "Queue or topic size ... Subsequent incoming messages are rejected": a queue of
    MaxSizeInMegabytes 1 takes four messages of 240 KB of annotations (or delivery annotations,
    a footer) and refuses the fifth with quota-exceeded; it counted each
    as 70 bytes (its body and message-id) and took them all, past its quota."""
    c = authorized_sender(srv3.port, "small")
    for i in range(4):
        c.send(c.transfer(5, stuffed(where, 240 * KB, f"m{i}")))
        assert outcome(c, i + 1) == (ACCEPTED, None), i
    assert srv3.entity_bytes("small") >= 4 * 240 * KB
    c.send(c.transfer(5, stuffed(where, 240 * KB, "m4")))
    assert outcome(c, 5) == (REJECTED, "amqp:resource-limit-exceeded")
    assert srv3.held("small") == 4


def test_a_batch_counts_each_message_as_sent(srv3: Configured) -> None:
    """The same through a batch (message format 0x80013700, one encoded message per data
    section): two messages of 120 KB of annotations a batch, four batches fill the 1 MB queue."""
    c = authorized_sender(srv3.port, "small")
    for i in range(5):
        parts = [stuffed("message-annotations", 120 * KB, f"b{i}-{j}") for j in range(2)]
        batch = b"".join(section(0x75, part) for part in parts)
        c.send(c.transfer(5, batch, message_format=0x80013700))
        expected = (ACCEPTED, None) if i < 4 else (REJECTED, "amqp:resource-limit-exceeded")
        assert outcome(c, i + 1) == expected, i
    assert srv3.held("small") == 8


# ------------------------------------------------------------ 2. lock tokens in $management
def genuine_token(srv: InProcess):
    """The lock token (a uuid, as clients see it) of the one message 'open' holds under a lock."""
    from sbconform.server.values import lock_uuid

    return srv.on_loop(lambda: lock_uuid(srv.server.namespace.peek("open", 1, 10)[0].lock_token))


LOCK_OPERATIONS = {
    "renew-lock": ("com.microsoft:renew-lock", {}),
    "complete": ("com.microsoft:update-disposition", {"disposition-status": "completed"}),
    "abandon": ("com.microsoft:update-disposition", {"disposition-status": "abandoned"}),
}


@pytest.mark.parametrize("operation, extra", list(LOCK_OPERATIONS.values()), ids=list(LOCK_OPERATIONS))
@pytest.mark.parametrize("shape", ["empty-array", "strings", "binary-16", "one-uuid-not-in-an-array", "array-of-strings"])
def test_lock_tokens_are_a_non_empty_array_of_uuid(srv: InProcess, operation: str, extra: dict, shape: str) -> None:
    """[rr] renew-lock and update-disposition: ``lock-tokens`` is a required "array of uuid". An
    empty array was answered 200 (nothing renewed or settled: the client believes it did
    something); the genuine token as a string or as its 16 bytes was read as the uuid and acted
    on. Each is a bad request (400, com.microsoft:argument-error) saying what is wrong, and the
    lock is untouched. (Microsoft's own client never sends an empty list: Microsoft.Azure.ServiceBus
    MessageReceiver.CompleteAsync refuses it, Resources.ListOfLockTokensCannotBeEmpty.)"""
    r, _ = locked_delivery(srv, f"{operation}-{shape}")
    token = genuine_token(srv)
    given = {
        "empty-array": Array(UNDESCRIBED, Data.UUID),
        "strings": [str(token)],
        "binary-16": [token.bytes],
        "one-uuid-not-in-an-array": token,
        "array-of-strings": Array(UNDESCRIBED, Data.STRING, str(token)),
    }[shape]
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    reply = management(c, "open", operation, {"lock-tokens": given, **extra}, 10)
    assert reply is not None
    assert reply.properties["statusCode"] == 400, reply.properties
    assert str(reply.properties["errorCondition"]) == "com.microsoft:argument-error"
    assert "lock-tokens" in reply.properties["statusDescription"], reply.properties
    assert srv.on_loop(lambda: [d.state.value for d in srv.server.namespace.peek("open", 1, 10)]) == ["locked"]
    renewed = management(c, "open", "com.microsoft:renew-lock", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, token)}, 20)
    assert renewed is not None and renewed.properties["statusCode"] == 200, renewed.properties


# ------------------------------------------------------------ 3. odd attach addresses
def attached(srv: InProcess, address: str | bytes, sending: bool, token_for: str = "open") -> tuple[RawClient, list, list]:
    """A client authorised on ``token_for`` attaches a link to ``address`` (bytes: the encoded
    address, put in place of 'open'): the client, the DETACH conditions and the CLOSE conditions."""
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token(token_for) == 200
    if isinstance(address, bytes):
        c.send(attach("odd", 5, "open", sending).replace(b"\xa1\x04open", address))
    else:
        c.send(attach("odd", 5, address, sending))
    c.read(3, until=lambda f: f.of(DETACH) or f.of(CLOSE) or any(p[2].value[0] == "odd" for p in f.of(ATTACH)))
    c.read(0.3, until=lambda f: f.of(DETACH) or f.of(CLOSE))  # (a refusal: ATTACH, then DETACH)
    return c, [condition_of(p[2]) for p in c.frames.of(DETACH)], [condition_of(p[2]) for p in c.frames.of(CLOSE)]


@pytest.mark.parametrize("sending", [True, False], ids=["sender", "receiver"])
@pytest.mark.parametrize("address", ["//open", "open//", "amqps://localhost//open", "sb://localhost//open"])
def test_an_address_with_an_empty_segment_names_no_entity(srv: InProcess, address: str, sending: bool) -> None:
    """An entity path "cannot start or end with a slash" (QueueProperties.Name; sbspec/wire.md
    4, [naming]), and Service Bus answers an address with a doubled slash "The messaging entity
    'sb://<ns>.servicebus.windows.net//8093563_async' could not be found"
    (https://github.com/helsenorge/Helsenorge.Messaging/pull/252). Every slash was stripped
    and the link attached to 'open'."""
    c, detached, closed = attached(srv, address, sending)
    assert detached == ["amqp:not-found"] and closed == [], (detached, closed)


@pytest.mark.parametrize("sending", [True, False], ids=["sender", "receiver"])
@pytest.mark.parametrize("address", ["open", "/open", "amqps://localhost/open", "OPEN", "open/$DeadLetterQueue"])
def test_the_addresses_clients_send_still_attach(srv: InProcess, address: str, sending: bool) -> None:
    """The plain path (the JavaScript SDK), one leading slash or the URL (.NET, Python), any case."""
    if sending and address.endswith("Queue"):
        pytest.skip("a dead-letter queue takes no sender")
    c, detached, closed = attached(srv, address, sending)
    assert detached == [] and closed == [], (detached, closed)


@pytest.mark.parametrize("sending", [True, False], ids=["sender", "receiver"])
def test_an_address_that_is_not_utf8_refuses_the_link_and_keeps_the_connection(srv: InProcess, sending: bool) -> None:
    """AMQP 1.0 part 1, 1.6.20: a string is UTF-8. Reading the address raised UnicodeDecodeError
    inside the ATTACH and closed the connection with amqp:internal-error; the link is refused
    (amqp:not-found: it names nothing) and the connection goes on."""
    c, detached, closed = attached(srv, b"\xa1\x04op\xff\xfe", sending)
    assert detached == ["amqp:not-found"] and closed == [], (detached, closed)
    assert c.put_token("open", 10) == 200, "the connection no longer answers"


# ------------------------------------------------------------ 4. per-entity records
def test_receivers_attached_and_detached_on_10000_entities_leave_no_record(srv: InProcess) -> None:
    """``Server.waiting`` (entity key -> receivers waiting with credit) kept a key, with an empty
    set, for every entity a receiver with credit ever waited on: attaching and detaching on
    10,000 entities (made and deleted through management, as the REST API or $sbconform do)
    left 10,000 keys for the life of the server."""
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("") == 200  # the namespace: every entity
    for start in range(0, 10_000, 500):  # (a namespace holds at most 10,000 entities: 500 at a time)
        names = range(start, start + 500)
        srv.on_loop(lambda: [srv.server.namespace.create_queue(f"w{i}") for i in names])
        c.send(*[attach(f"r{i}", 5 + i, f"w{i}", False) + flow(5 + i, 1)
                 + frame(performative(DETACH, uint(5 + i), True)) for i in names])
        c.read(5, until=lambda f: len(f.of(DETACH)) >= start + 500)
        srv.on_loop(lambda: [srv.server.namespace.delete(f"w{i}") for i in names])
    assert len(c.frames.of(DETACH)) == 10_000 and not c.frames.of(CLOSE)
    assert srv.on_loop(lambda: len(srv.server.waiting)) < 10


def test_the_model_is_handed_one_spelling_of_each_path(srv: InProcess) -> None:
    """Entity names are case-insensitive, and the model keeps what it resolved by the path as
    given (its route caches, emptied only when entities change): a client attaching to 1,000
    spellings of 'open/$DeadLetterQueue' and sending to 1,000 of 'OPEN' grew them by 2,000
    entries, and any number more (a path of n letters has 2**n spellings). The server hands
    the model each path as its entity spells it."""
    import random

    ns = srv.server.namespace
    handed: set[str] = set()

    def spy(name: str) -> None:
        real = getattr(ns, name)

        def recorded(*args, **kwargs):
            handed.add(next(a for a in args if isinstance(a, str)))
            return real(*args, **kwargs)

        setattr(ns, name, recorded)

    srv.on_loop(lambda: [spy(name) for name in ("taking_store", "sending_entity", "send", "peek")])
    rng = random.Random(7)

    def spelling(path: str) -> str:
        return "".join(ch.upper() if rng.random() < 0.5 else ch.lower() for ch in path)

    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("") == 200
    for start in range(0, 1000, 250):
        c.send(*[attach(f"r{i}", 5 + i, spelling("open/$DeadLetterQueue") + "/" * (i % 2), False)
                 + frame(performative(DETACH, uint(5 + i), True)) for i in range(start, start + 250)])
        c.read(5, until=lambda f: len(f.of(DETACH)) >= start + 250)
    sender = authorized_sender(srv.port, spelling("OPEN"), handle=5)
    for i in range(20):
        sender.send(sender.transfer(5, encode_value(Described(ulong(0x75), b"x"))))
    sender.read(5, until=lambda f: any(p[2].value[2] == 20 for p in f.of(DISPOSITION)))  # (settled in ranges: first, last)
    for i in range(20):
        assert management(c, spelling("open"), "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 1},
                          2000 + 2 * i).properties["statusCode"] == 200
    assert handed <= {"open", "open/$DeadLetterQueue"}, sorted(handed)[:10]
    assert srv.held("open") == 20


# ------------------------------------------------------------ the broker's annotations
def test_every_delivery_carries_the_enqueue_sequence_number(srv: InProcess) -> None:
    """Service Bus writes ``x-opt-enqueue-sequence-number`` on the messages it delivers: "Messages
    sent w/o a single custom header arrive with one custom header x-opt-enqueue-sequence-number with
    a numeric value" (https://github.com/Azure/azure-service-bus-dotnet/issues/484); .NET reads it as
    EnqueuedSequenceNumber, "the original sequence number of the message" (for one not auto-forwarded,
    its sequence number: our reading). serve stripped a sender's and wrote none: the SDKs read None/0.
    A sender's own value is replaced, never doubled."""
    from test_serve_adversary2 import receive_all

    c = authorized_sender(srv.port, "open")
    m = Message(body=b"x", id="enq")
    m.annotations = {symbol("x-opt-enqueue-sequence-number"): 999}
    c.send(c.transfer(5, m.encode()))
    assert outcome(c, 1) == (ACCEPTED, None)
    r, (got,) = receive_all(srv.port, "open", credit=1)
    ann = got.annotations
    assert ann[symbol("x-opt-enqueue-sequence-number")] == ann[symbol("x-opt-sequence-number")] >= 1
    assert type(ann[symbol("x-opt-enqueue-sequence-number")]) is int  # a long, as the sequence number


NULL_REFUSED = ["x-opt-scheduled-enqueue-time", "x-opt-message-state", "x-opt-enqueue-sequence-number"]
NULL_IGNORED = ["x-opt-locked-until", "x-opt-sequence-number", "x-opt-enqueued-time", "x-opt-partition-key"]
GO_LIVE_TEST = "https://github.com/Azure/azure-sdk-for-go/blob/main/sdk/messaging/azservicebus/receiver_test.go"


@pytest.mark.parametrize("key", NULL_REFUSED + NULL_IGNORED)
def test_a_null_broker_annotation_from_a_sender_is_taken_as_service_bus_takes_it(srv: InProcess, key: str) -> None:
    """The Go SDK's live test TestNilPartitionKey (GO_LIVE_TEST) against Service Bus: a sender's
    null x-opt-scheduled-enqueue-time, x-opt-message-state or x-opt-enqueue-sequence-number
    "results in the service rejecting the message"; a null x-opt-locked-until, x-opt-sequence-number
    or x-opt-enqueued-time is "accepted but ignored" (the broker fills them), a null
    x-opt-partition-key accepted and passed on. serve accepted all of them."""
    c = authorized_sender(srv.port, "open")
    m = Message(body=b"x", id=f"null-{key}")
    m.annotations = {symbol(key): None}
    c.send(c.transfer(5, m.encode()))
    state, condition = outcome(c, 1)
    if key in NULL_REFUSED:
        assert (state, condition) == (REJECTED, "com.microsoft:argument-error")
        assert srv.held("open") == 0
    else:
        assert (state, condition) == (ACCEPTED, None)
        assert srv.held("open") == 1


def attach_with_properties(name: str, handle: int, address: str, sending: bool, properties: dict) -> bytes:
    """An ATTACH carrying ``properties`` (AMQP 1.0 part 2, 2.7.3, field 13); a receiver's asks for
    the next available session (a com.microsoft:session-filter of null)."""
    from proton import ubyte

    from serve_support import SOURCE, TARGET

    source = Described(ulong(SOURCE), [None] if sending else
                       [address, uint(0), None, uint(0), False, None, None, {symbol("com.microsoft:session-filter"): None}])
    target = Described(ulong(TARGET), [address if sending else None])
    return frame(performative(0x12, name, uint(handle), not sending, ubyte(0), ubyte(0), source, target,
                              None, None, None, None, None, None, properties))


@pytest.mark.parametrize("sending", [True, False], ids=["sender", "session-receiver"])
def test_attach_properties_that_are_not_utf8_refuse_the_link_and_keep_the_connection(srv: InProcess, sending: bool) -> None:
    """An ATTACH whose properties hold a string that is not UTF-8 (AMQP 1.0 part 1, 1.6.20): reading
    them (the send-via destination, a session receiver's timeout) raised UnicodeDecodeError inside
    the ATTACH and closed the connection with amqp:internal-error. The link is refused
    (com.microsoft:argument-error), the connection goes on."""
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    props = {symbol("com.microsoft:transfer-destination-address" if sending else "x-any"): "BADX"}
    c.send(attach_with_properties("odd", 5, "open", sending, props).replace(b"\xa1\x04BADX", b"\xa1\x04B\xff\xfeX"))
    c.read(3, until=lambda f: f.of(DETACH) or f.of(CLOSE))
    assert [condition_of(p[2]) for p in c.frames.of(CLOSE)] == []
    assert [condition_of(p[2]) for p in c.frames.of(DETACH)] == ["com.microsoft:argument-error"]
    assert c.put_token("open", 10) == 200, "the connection no longer answers"


NOT_UTF8_OUTCOMES = {
    "rejected-description": (0x25, lambda: [Described(ulong(0x1D), [symbol("com.microsoft:dead-letter"), "BADX", None])]),
    "rejected-info": (0x25, lambda: [Described(ulong(0x1D), [symbol("com.microsoft:dead-letter"), "dl", {symbol("DeadLetterReason"): "BADX"}])]),
    "modified-annotations": (0x27, lambda: [True, False, {symbol("p"): "BADX"}]),
    # transactional-state (AMQP 1.0 part 4, 4.5.5): its outcome, or its txn-id, holding such a string
    "txn-rejected": (0x34, lambda: [b"\x00" * 7 + b"\x01", Described(ulong(0x25), [
        Described(ulong(0x1D), [symbol("com.microsoft:dead-letter"), "BADX", None])])]),
    "txn-modified": (0x34, lambda: [b"\x00" * 7 + b"\x01", Described(ulong(0x27), [True, False, {symbol("p"): "BADX"}])]),
    "txn-id": (0x34, lambda: ["BADX", Described(ulong(0x24), [])]),
}


@pytest.mark.parametrize("kind", list(NOT_UTF8_OUTCOMES))
def test_a_disposition_holding_a_string_that_is_not_utf8_is_refused_and_the_connection_goes_on(srv: InProcess, kind: str) -> None:
    """A receiver's rejected outcome (its error's description or info) or modified outcome (its
    message-annotations: the properties to modify) holding a string that is not UTF-8 raised
    UnicodeDecodeError while the server read it and closed the connection with amqp:internal-error.
    It is refused as the disposition's argument error (as an info that is no map is), and the
    message stays where it was (not dead-lettered, not abandoned)."""
    from serve_support import DISPOSITION

    r, delivery_id = locked_delivery(srv, kind)
    code, fields = NOT_UTF8_OUTCOMES[kind]
    before = len(r.frames.of(DISPOSITION))
    state = Described(ulong(code), fields())
    r.send(frame(performative(DISPOSITION, True, uint(delivery_id), uint(delivery_id), False, state))
           .replace(b"\xa1\x04BADX", b"\xa1\x04B\xff\xfeX"))
    r.read(3, until=lambda f: len(f.of(DISPOSITION)) > before or f.of(CLOSE))
    assert [condition_of(p[2]) for p in r.frames.of(CLOSE)] == []
    answer = r.frames.of(DISPOSITION)[before][2].value[4]
    assert int(answer.descriptor) == REJECTED
    assert str(list(answer.value[0].value)[0]) == "com.microsoft:argument-error"
    info = srv.on_loop(lambda: srv.server.namespace.runtime_info("open"))
    assert info["dead_letter"] == 0 and info["active"] == 1
    served(srv.port)


def test_a_transfer_whose_transactional_state_is_not_utf8_is_refused_and_the_connection_goes_on(srv: InProcess) -> None:
    """The same for a sent message's transactional-state: it closed the connection with amqp:internal-error."""
    c = authorized_sender(srv.port, "open")
    state = Described(ulong(0x34), ["BADX"])
    payload = Message(body=b"x", id="txn-send").encode()
    c.delivery_id += 1  # the session's next delivery id, as c.transfer takes it
    # the transfer's state is field 7 (after message-format, settled, more, rcv-settle-mode)
    body = performative(TRANSFER, uint(5), uint(c.delivery_id - 1), b"d-txn", uint(0), False, False, None, state)
    c.send(frame(body.replace(b"\xa1\x04BADX", b"\xa1\x04B\xff\xfeX") + payload))
    state_, _ = outcome(c, 1)
    assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    assert state_ == REJECTED
    assert srv.held("open") == 0


def test_an_open_whose_hostname_is_not_utf8_gets_401_at_put_token_and_the_connection_goes_on(srv: InProcess) -> None:
    """OPEN's hostname (the namespace a token's audience must name, test_serve_audience) not UTF-8:
    reading it at put-token raised UnicodeDecodeError and closed the connection with
    amqp:internal-error (the put-token never answered). It names no namespace: 401."""
    from serve_support import BEGIN, OPEN, SASL_INIT, begin

    c = RawClient(srv.port)
    c.send(b"AMQP\x03\x01\x00\x00" + frame(performative(SASL_INIT, symbol("ANONYMOUS"), b"", "localhost"), kind=1)
           + b"AMQP\x00\x01\x00\x00"
           + frame(performative(OPEN, "raw-client", "BADX", uint(1024 * 1024))).replace(b"\xa1\x04BADX", b"\xa1\x04B\xff\xfeX")
           + begin())
    c.read(5, until=lambda f: f.of(BEGIN))
    assert c.put_token("open") == 401
    assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]


@pytest.mark.parametrize("node", ["open/$management", "$sbconform"])
def test_a_request_that_is_no_message_is_rejected_as_cbs_rejects_one(srv: InProcess, node: str) -> None:
    """A transfer to a management node holding a string that is not UTF-8 (proton cannot decode
    it) was accepted and never answered: the client waited out its timeout. As on $cbs, it is
    rejected with amqp:decode-error, and the connection goes on."""
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    c.send(attach("req", 10, node, True), attach("rep", 11, node, False), flow(11, 5))
    c.read(3, until=lambda f: sum(p[2].value[0] in ("req", "rep") for p in f.of(ATTACH)) >= 2)
    before = len(c.frames.of(DISPOSITION))
    bad = Message(id="q", reply_to=node, properties={"operation": "BADX"}, body={"x": 1}).encode()
    c.send(c.transfer(10, bad.replace(b"\xa1\x04BADX", b"\xa1\x04B\xff\xfeX")))
    assert outcome(c, before) == (REJECTED, "amqp:decode-error")
    assert c.put_token("open", 20) == 200


BINARY_FIELDS = {
    "schedule-message": ("com.microsoft:schedule-message", lambda n: {"messages": [{"message": n, "message-id": "m"}]}, "message"),
    "set-session-state": ("com.microsoft:set-session-state", lambda n: {"session-id": "s1", "session-state": n}, "session-state"),
}


@pytest.mark.parametrize("size", [10**7, 2**40], ids=["10MB", "1TB"])
@pytest.mark.parametrize("operation", list(BINARY_FIELDS))
def test_a_binary_field_given_as_a_number_is_a_bad_request_not_an_allocation(srv: InProcess, operation: str, size: int) -> None:
    """[rr]: schedule-message's ``message`` and set-session-state's ``session-state`` are binary.
    A number there was handed to ``bytes()``, which allocates that many zero bytes: 1 TB raised
    MemoryError inside the server (the connection closed with amqp:internal-error), 10 MB was
    allocated per request (and kept, as a session state). A bad request (400) naming the field."""
    name, body, field = BINARY_FIELDS[operation]
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    reply = management(c, "open", name, body(size), 10)
    assert reply is not None, [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    assert reply.properties["statusCode"] == 400, reply.properties
    assert f"{field} is not binary" in reply.properties["statusDescription"], reply.properties
    assert not c.frames.of(CLOSE)
