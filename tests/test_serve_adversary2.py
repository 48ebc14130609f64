"""``sbconform serve`` against a hostile client (second round): one test per defect found,
each written to fail on the server as it was. Raw AMQP frames (``serve_support``) against a
server on a thread of this process (``InProcess`` of ``test_serve_security``)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from proton import Described, Message, uint, ulong  # noqa: E402

from serve_support import (  # noqa: E402
    ATTACH,
    CLOSE,
    DETACH,
    DISPOSITION,
    TRANSFER,
    RawClient,
    attach,
    begin,
    condition_of,
    encode_value,
    flow,
    frame,
    message_bytes,
    performative,
    transfer,
)
from test_serve_security import InProcess, authorized_sender, served, srv  # noqa: E402,F401 (srv: the fixture)

ACCEPTED, REJECTED = 0x24, 0x25


def outcome(c: RawClient, before: int) -> tuple[int, str | None]:
    """(descriptor, error condition) of the first disposition after the first ``before``."""
    c.read(3, until=lambda f: len(f.of(DISPOSITION)) > before)
    dispositions = c.frames.of(DISPOSITION)
    assert len(dispositions) > before, "no disposition"
    state = dispositions[before][2].value[4]
    error = None
    if int(state.descriptor) == REJECTED and state.value and state.value[0] is not None:
        error = str(list(state.value[0].value)[0])
    return int(state.descriptor), error


def locked_delivery(srv: InProcess, message_id: str) -> tuple[RawClient, int]:
    """A message sent to 'open', taken by a raw receiver under a lock: the receiver and the delivery id."""
    c = authorized_sender(srv.port, "open")
    c.send(c.transfer(5, Message(body=b"x", id=message_id).encode()))
    assert outcome(c, 1) == (ACCEPTED, None)
    r = RawClient(srv.port)
    r.open_session()
    assert r.put_token("open") == 200
    r.send(attach("recv", 5, "open", False), flow(5, 1))
    r.read(3, until=lambda f: len(f.of(TRANSFER)) > 1)
    return r, int(r.frames.of(TRANSFER)[-1][2].value[1])


def receive_all(port: int, path: str, credit: int = 10, wait: float = 1.5) -> tuple[RawClient, list[Message]]:
    """A receiver given ``credit`` for ``wait`` seconds: the client, and the messages it was sent."""
    r = RawClient(port)
    r.open_session()
    assert r.put_token(path) == 200
    before = len(r.frames.of(TRANSFER))  # (the put-token reply)
    r.send(attach("recv", 5, path, False), flow(5, credit))
    r.read(wait, until=lambda f: r.closed)
    messages = []
    for t in r.frames.of(TRANSFER)[before:]:
        m = Message()
        m.decode(t[3])
        messages.append(m)
    return r, messages


# ------------------------------------------------------------ aborted deliveries
def test_an_aborted_delivery_is_discarded_and_the_connection_goes_on(srv: InProcess) -> None:
    """AMQP 1.0 part 2, 2.7.5 (transfer, ``aborted``): "Aborted messages SHOULD be discarded
    by the recipient ... An aborted message is implicitly settled." It was read with
    ``Link.recv``, which raised (PN_ABORTED): the connection closed with amqp:internal-error."""
    c = authorized_sender(srv.port, "open")
    whole = message_bytes(b"half then aborted", "aborted")
    c.send(c.transfer(5, whole[:12], more=True))
    # the rest never comes: a continuation frame with aborted=true (the transfer's field 9)
    c.send(frame(performative(TRANSFER, uint(5), None, None, None, None, False, None, None, None, True)))
    before = len(c.frames.of(DISPOSITION))
    c.send(c.transfer(5, message_bytes(b"after", "after")))
    assert outcome(c, before) == (ACCEPTED, None)
    assert not c.closed and not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    assert srv.active("open") == 1, "the aborted delivery was stored, or the next one was not"
    _, got = receive_all(srv.port, "open")
    assert [m.id for m in got] == ["after"]


# ------------------------------------------------------------ header fields
@pytest.mark.parametrize("ttl", [100_000.5, -100_000, ulong(2**64 - 1), "60000"], ids=["double", "negative-long", "ulong", "string"])
def test_a_header_ttl_that_is_not_a_uint_is_refused_at_the_door(srv: InProcess, ttl) -> None:
    """AMQP 1.0 part 3, 3.2.1: the header's ttl is ``milliseconds`` (a uint). A double was
    stored (plain: no trial encoding) and every receiver of the queue was then closed with
    amqp:internal-error when the server wrote it ('float' has no to_bytes): the queue was
    poisoned for good."""
    c = authorized_sender(srv.port, "open")
    message = (encode_value(Described(ulong(0x70), [False, None, ttl]))
               + encode_value(Described(ulong(0x73), ["bad-ttl"])) + encode_value(Described(ulong(0x75), b"x")))
    c.send(c.transfer(5, message))
    assert outcome(c, 1) == (REJECTED, "com.microsoft:argument-error")
    assert srv.held("open") == 0, "a message with a ttl of the wrong type was stored"
    served(srv.port)
    r, got = receive_all(srv.port, "open")
    assert not r.closed and not r.frames.of(CLOSE) and not r.frames.of(DETACH), "the receiver was closed"
    assert [m.body for m in got] == [b"alive"]  # the message 'served' sent


def test_a_uint_ttl_still_goes_through_and_comes_back(srv: InProcess) -> None:
    c = authorized_sender(srv.port, "open")
    message = (encode_value(Described(ulong(0x70), [True, None, uint(60_000)]))
               + encode_value(Described(ulong(0x73), ["good-ttl"])) + encode_value(Described(ulong(0x75), b"x")))
    c.send(c.transfer(5, message))
    assert outcome(c, 1) == (ACCEPTED, None)
    _, (m,) = receive_all(srv.port, "open")
    assert m.id == "good-ttl" and m.durable and m.ttl == 60.0


# ------------------------------------------------------------ $management requests
def management(c: RawClient, path: str, operation: str, body, handle: int) -> Message | None:
    """One request to ``path``'s $management node on links ``handle`` and ``handle + 1``; the reply."""
    c.send(attach(f"mgmt-{handle}", handle, f"{path}/$management", True),
           attach(f"mgmt-reply-{handle}", handle + 1, f"{path}/$management", False), flow(handle + 1, 10))
    c.read(3, until=lambda f: sum(str(p[2].value[0]).startswith(f"mgmt-reply-{handle}") for p in f.of(ATTACH)) >= 1)
    before = len(c.frames.of(TRANSFER))
    request = Message(id=f"req-{handle}", reply_to=f"{path}/$management", properties={"operation": operation}, body=body)
    c.send(c.transfer(handle, request.encode()))
    c.read(3, until=lambda f: len(f.of(TRANSFER)) > before)
    if len(c.frames.of(TRANSFER)) <= before:
        return None
    reply = Message()
    reply.decode(c.frames.of(TRANSFER)[-1][3])
    return reply


def deferred_message(srv: InProcess, path: str) -> int:
    """A message deferred in ``path`` (through the model on the loop thread); its sequence number."""
    from sbreference import PEEK_LOCK
    from sbreference import Message as ModelMessage

    def defer() -> int:
        ns = srv.server.namespace
        conn = ns.connect()
        ns.send(conn, path, [ModelMessage(body=b"deferred", message_id="deferred")])
        (d,) = ns.receive(conn, path, 1, PEEK_LOCK)
        ns.defer(conn, path, d.lock_token)
        return d.sequence_number

    return srv.on_loop(defer)


BAD_REQUESTS = {
    # a number out of every integer's range: int() raised OverflowError, which closed the connection (amqp:internal-error)
    "peek-from-infinity": ("com.microsoft:peek-message", {"from-sequence-number": float("inf"), "message-count": 1}),
    "receive-infinity": ("com.microsoft:receive-by-sequence-number", {"sequence-numbers": [float("inf")], "receiver-settle-mode": uint(1)}),
    "enumerate-rules-infinity": ("com.microsoft:enumerate-rules", {"top": float("inf"), "skip": 0}),
    # a body that is not a map: read as an empty map, the defaults answered (204)
    "peek-list-body": ("com.microsoft:peek-message", ["from-sequence-number", 1]),
    "peek-no-body": ("com.microsoft:peek-message", None),
    # a required array given as null: scheduled nothing, 200
    "schedule-null-messages": ("com.microsoft:schedule-message", {"messages": None}),
    # an unknown disposition-status: 200 when no lock token came with it
    "unknown-disposition": ("com.microsoft:update-disposition", {"disposition-status": "bogus", "lock-tokens": []}),
}


@pytest.mark.parametrize("operation, body", list(BAD_REQUESTS.values()), ids=list(BAD_REQUESTS))
def test_a_wrongly_shaped_management_request_is_a_bad_request(srv: InProcess, operation: str, body) -> None:
    """[rr]: each request's body is an AMQP value holding a map, with the entries each
    operation lists; a request without them is answered 400 (com.microsoft:argument-error), the
    connection goes on."""
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    reply = management(c, "open", operation, body, 10)
    assert reply is not None, f"no answer; closed with {[condition_of(p[2]) for p in c.frames.of(CLOSE)]}"
    assert reply.properties["statusCode"] == 400, reply.properties
    assert str(reply.properties["errorCondition"]) == "com.microsoft:argument-error"
    assert management(c, "open", "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 1}, 20) is not None
    assert not c.frames.of(CLOSE)


def test_an_unknown_receiver_settle_mode_does_not_delete_a_deferred_message(srv: InProcess) -> None:
    """receive-by-sequence-number's receiver-settle-mode is AMQP's: 1 (second) peek-lock, 0
    (first) receive-and-delete ([rr]; [py] ServiceBusToAMQPReceiveModeMap). Any other value was
    taken as receive-and-delete: the deferred message was handed over and deleted."""
    number = deferred_message(srv, "open")
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    reply = management(c, "open", "com.microsoft:receive-by-sequence-number",
                       {"sequence-numbers": [number], "receiver-settle-mode": uint(7)}, 10)
    assert reply is not None and reply.properties["statusCode"] == 400, None if reply is None else reply.properties
    assert srv.on_loop(lambda: srv.server.namespace.runtime_info("open")["deferred"]) == 1, "the deferred message was deleted"
    reply = management(c, "open", "com.microsoft:receive-by-sequence-number",
                       {"sequence-numbers": [number], "receiver-settle-mode": uint(1)}, 20)
    assert reply.properties["statusCode"] == 200 and len(reply.body["messages"]) == 1


# ------------------------------------------------------------ the dead-letter properties
def test_a_sent_dead_letter_reason_of_another_type_comes_back_as_sent(srv: InProcess) -> None:
    """A sender's own application properties DeadLetterReason / DeadLetterErrorDescription are
    application properties like any other ([amqp] 3.2.5: passed through as sent). The server
    wrote them again as strings (the model reads them as the message's dead-letter reason), and a
    value that is no string (a long, a boolean: plain, no trial encoding) made every receive and
    peek of the queue fail ('int' has no encode: amqp:internal-error), for good."""
    c = authorized_sender(srv.port, "open")
    sent = Message(body=b"x", id="dlr", properties={"DeadLetterReason": 5, "DeadLetterErrorDescription": True, "other": "o"})
    c.send(c.transfer(5, sent.encode()))
    assert outcome(c, 1) == (ACCEPTED, None)
    p = RawClient(srv.port)
    p.open_session()
    assert p.put_token("open") == 200
    reply = management(p, "open", "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 1}, 10)
    assert reply is not None and reply.properties["statusCode"] == 200, [condition_of(f[2]) for f in p.frames.of(CLOSE)]
    r, got = receive_all(srv.port, "open")
    assert not r.closed and not r.frames.of(CLOSE), [condition_of(f[2]) for f in r.frames.of(CLOSE)]
    assert [m.id for m in got] == ["dlr"]
    props = got[0].properties
    assert props == {"DeadLetterReason": 5, "DeadLetterErrorDescription": True, "other": "o"}
    assert type(props["DeadLetterReason"]) is int and type(props["DeadLetterErrorDescription"]) is bool


def test_a_dead_letter_reason_of_another_type_in_a_rejected_outcome_is_a_string(srv: InProcess) -> None:
    """The rejected outcome's DeadLetterReason (the SDKs send a string) was stored as the client
    typed it; a long made every receiver of the dead-letter queue fail (amqp:internal-error). It
    is read as a string, as update-disposition's deadletter-reason and a transactional
    rejection already were."""
    from proton import symbol

    r, delivery_id = locked_delivery(srv, "to-dlq")
    error = Described(ulong(0x1D), [symbol("com.microsoft:dead-letter"), "dl",
                                    {symbol("DeadLetterReason"): 5, symbol("DeadLetterErrorDescription"): 6.5}])
    before = len(r.frames.of(DISPOSITION))
    r.send(frame(performative(DISPOSITION, True, uint(delivery_id), uint(delivery_id), False, Described(ulong(REJECTED), [error]))))
    r.read(3, until=lambda f: len(f.of(DISPOSITION)) > before)
    assert srv.on_loop(lambda: srv.server.namespace.runtime_info("open")["dead_letter"]) == 1
    d, got = receive_all(srv.port, "open/$DeadLetterQueue")
    assert not d.closed and not d.frames.of(CLOSE), [condition_of(f[2]) for f in d.frames.of(CLOSE)]
    assert [(m.id, m.properties["DeadLetterReason"], m.properties["DeadLetterErrorDescription"]) for m in got] == [("to-dlq", "5", "6.5")]


# ------------------------------------------------------------ schedule-message
def test_schedule_message_refuses_what_the_server_could_not_deliver(srv: InProcess) -> None:
    """A message scheduled through $management passes the door a sent message passes
    (SECURITY.md: refused at send, never stored to fail later). It did not: a scheduled time past
    what a timestamp holds was stored, and every peek of the queue then failed ('int too large
    to convert': amqp:internal-error)."""
    from proton import symbol, timestamp

    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    inner = (encode_value(Described(ulong(0x72), {symbol("x-opt-scheduled-enqueue-time"): ulong(2**63 + 5)}))
             + encode_value(Described(ulong(0x73), ["far"])) + encode_value(Described(ulong(0x75), b"x")))
    reply = management(c, "open", "com.microsoft:schedule-message", {"messages": [{"message": inner, "message-id": "far"}]}, 10)
    assert reply is not None and reply.properties["statusCode"] == 400, None if reply is None else reply.properties
    assert str(reply.properties["errorCondition"]) == "com.microsoft:argument-error"
    assert srv.held("open") == 0
    reply = management(c, "open", "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 5}, 12)
    assert reply is not None and reply.properties["statusCode"] == 204
    fine = Message(body=b"x", id="fine")
    fine.annotations = {symbol("x-opt-scheduled-enqueue-time"): timestamp(int(time.time() * 1000) + 3_600_000)}
    reply = management(c, "open", "com.microsoft:schedule-message", {"messages": [{"message": fine.encode(), "message-id": "fine"}]}, 14)
    assert reply.properties["statusCode"] == 200
    reply = management(c, "open", "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 5}, 16)
    assert reply.properties["statusCode"] == 200 and len(reply.body["messages"]) == 1


# ------------------------------------------------------------ what the frame scanner keeps
def scanner_sizes(srv: InProcess) -> tuple[int, int]:
    """(link names, transfer formats) the frame scanners of all connections hold."""
    def sizes() -> tuple[int, int]:
        conns = list(srv.server.conns.values())
        return sum(len(s.scanner.names) for s in conns), sum(len(s.scanner.formats) for s in conns)

    return srv.on_loop(sizes)


def test_transfers_dropped_on_a_detached_link_leave_nothing_in_the_frame_scanner(srv: InProcess) -> None:
    """The scanner records each transfer's message format until the server reads the transfer;
    a transfer the server dropped (a link it detached, a delivery aborted) left its record, up
    to 100,000 per connection (with tags of 200 bytes, tens of MB per connection, and a
    connection past the cap no longer had its batches recognised)."""
    c = authorized_sender(srv.port, "open")
    c.send(*[c.transfer(5, message_bytes(f"m{i}".encode()), settled=True) for i in range(21)])  # credit 20: detached
    c.read(2, until=lambda f: f.of(DETACH))
    assert any(condition_of(p[2]) == "amqp:link:transfer-limit-exceeded" for p in c.frames.of(DETACH))
    for round_ in range(5):  # the client goes on regardless, each tag new
        c.send(*[c.transfer(5, b"", settled=True) for _ in range(200)])
        c.read(0.05)
    c.read(0.5)
    assert not c.closed
    _, formats = scanner_sizes(srv)
    assert formats <= 1, f"{formats} formats of dropped transfers kept"


def test_links_of_an_ended_session_leave_nothing_in_the_frame_scanner(srv: InProcess) -> None:
    """END ends a session's links without a DETACH each (AMQP 1.0 part 2, 2.5.5); the scanner
    forgot a link's name at DETACH only, so BEGIN / ATTACH / END in a loop grew it (up to
    100,000 names a connection, a link name can be long)."""
    c = authorized_sender(srv.port, "open")
    names_before, _ = scanner_sizes(srv)
    for cycle in range(40):
        c.send(begin(1), *[attach(f"{'n' * 150}-{cycle}-{h}", h, "open", True, channel=1) for h in range(cycle * 10, cycle * 10 + 10)],
               frame(performative(0x17), 1))
        c.read(0.02)
    c.read(0.5)
    assert not c.closed and not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    names, _ = scanner_sizes(srv)
    assert names <= names_before, f"{names - names_before} names of ended sessions' links kept"


# ------------------------------------------------------------ the size of a message
@pytest.fixture
def roomy():
    """A server taking deliveries up to the default 4 MiB (the entity's limit is what is tested)."""
    server = InProcess(link_credit=20, open_timeout=1.0, idle_timeout=10.0, max_connections=50)
    yield server
    server.stop()


def with_footer(message_id: str, footer: int) -> bytes:
    """A message of one byte of body and a footer of ``footer`` bytes (sections the model does not measure)."""
    from proton import symbol

    return (encode_value(Described(ulong(0x73), [message_id])) + encode_value(Described(ulong(0x75), b"x"))
            + encode_value(Described(ulong(0x78), {symbol("x-pad"): b"f" * footer})))


def batch_of(*messages: bytes) -> bytes:
    """A batch envelope (each message one data section), as the SDKs send one (message format 0x80013700)."""
    return b"".join(encode_value(Described(ulong(0x75), m)) for m in messages)


def test_a_message_larger_than_the_entity_allows_is_refused_however_its_bytes_are_spent(roomy: InProcess) -> None:
    """[quotas]: "The message size includes the size of properties (system and user) and the size
    of payload", 256 KB on Standard (the link's max-message-size says so). The model measures what
    it reads of a message (body, properties, application properties); bytes elsewhere (a footer,
    annotations) went unmeasured: a 300 KB message with one byte of body was stored on a 256 KB
    queue, counted 66 bytes against the entity's quota."""
    c = authorized_sender(roomy.port, "open")
    c.send(c.transfer(5, with_footer("too-big", 300 * 1024)))
    assert outcome(c, 1) == (REJECTED, "amqp:link:message-size-exceeded")
    c.send(c.transfer(5, with_footer("fits", 200 * 1024)))
    assert outcome(c, 2) == (ACCEPTED, None)
    before = len(c.frames.of(DISPOSITION))
    c.send(transfer(5, c.delivery_id, b"batch", batch_of(with_footer("b1", 150 * 1024), with_footer("b2", 150 * 1024)),
                    message_format=0x80013700))
    c.delivery_id += 1
    assert outcome(c, before) == (REJECTED, "amqp:link:message-size-exceeded")
    assert not c.closed
    assert roomy.on_loop(lambda: roomy.server.namespace.runtime_info("open")["active"]) == 1


def test_schedule_message_measures_each_message_as_sent(roomy: InProcess) -> None:
    c = RawClient(roomy.port)
    c.open_session()
    assert c.put_token("open") == 200
    reply = management(c, "open", "com.microsoft:schedule-message",
                       {"messages": [{"message": with_footer("too-big", 300 * 1024), "message-id": "too-big"}]}, 10)
    assert reply is not None and reply.properties["statusCode"] == 400, None if reply is None else reply.properties
    assert str(reply.properties["errorCondition"]) == "amqp:link:message-size-exceeded"
    assert roomy.held("open") == 0


# ------------------------------------------------------------ long paths
def test_a_link_to_an_address_of_many_segments_is_refused_at_once(srv: InProcess) -> None:
    """An ATTACH, no token needed, to 'a/a/a/...' (100 KB, within one frame): the server checked
    a token for each of the path's 50,000 parents, each joined anew (quadratic: 16 s of the
    server's one thread for this one frame, half an hour for a frame of 1 MiB), serving no one
    meanwhile. No entity path Service Bus could name is that long ([naming]); it is refused at once."""
    c = RawClient(srv.port)
    c.open_session()
    started = time.monotonic()
    c.send(attach("long", 3, "a/" * 50_000, True))
    c.read(3, until=lambda f: f.of(DETACH))
    assert c.frames.of(DETACH), "no answer to the ATTACH within 3 s"
    assert time.monotonic() - started < 3
    assert condition_of(c.frames.of(DETACH)[0][2]) in ("amqp:not-found", "amqp:unauthorized-access")
    served(srv.port)


def test_a_token_for_a_name_no_entity_could_have_is_refused_and_not_kept(roomy: InProcess) -> None:
    """A put-token whose name is a long path under the namespace (its token, for the namespace,
    covers it) was kept as one of the connection's --max-tokens audiences: 10,000 names of 4 MB
    each on one connection."""
    from proton import Message as AmqpMessage

    from sbconform.amqp.sas import make_token
    from serve_support import KEY_NAME, KEY

    c = RawClient(roomy.port)
    c.open_session()
    assert c.put_token("open") == 200
    namespace = f"sb://localhost:{roomy.port}"
    name = f"{namespace}/{'x' * 500_000}"
    request = AmqpMessage(id="long", body=make_token(namespace, KEY_NAME, KEY),
                          properties={"operation": "put-token", "type": "jwt", "name": name})
    before = len(c.frames.of(TRANSFER))
    c.send(c.transfer(0, request.encode()))
    c.read(3, until=lambda f: len(f.of(TRANSFER)) > before)
    reply = AmqpMessage()
    reply.decode(c.frames.of(TRANSFER)[-1][3])
    assert reply.correlation_id == "long" and reply.properties["status-code"] == 401, reply.properties
    kept = roomy.on_loop(lambda: max(sum(map(len, s.audiences)) for s in roomy.server.conns.values()))
    assert kept < 1000, f"{kept} characters of audiences kept"


# ------------------------------------------------------------ receivers waiting for a session
SESSION_CONFIG = {"UserConfig": {"Namespaces": [{"Name": "s", "Queues": [
    {"Name": "open", "Properties": {}}, {"Name": "sess", "Properties": {"RequiresSession": True}}]}]}}


class SessionServer(InProcess):
    """``InProcess`` with a session queue ('sess') beside 'open'."""

    config = SESSION_CONFIG


def next_session_attach(name: str, handle: int, address: str, timeout_ms: int) -> bytes:
    """A receiver's ATTACH for the next available session (session filter null), waiting ``timeout_ms``."""
    from proton import symbol, ubyte

    source = Described(ulong(0x28), [address, None, None, None, None, None, None, {symbol("com.microsoft:session-filter"): None}])
    return frame(performative(ATTACH, name, uint(handle), True, ubyte(0), ubyte(1), source, Described(ulong(0x29), [None]),
                              None, None, None, None, None, None, {symbol("com.microsoft:timeout"): uint(timeout_ms)}))


def test_receivers_waiting_for_a_session_do_not_tax_everyone_elses_work() -> None:
    """A receiver waiting for the next available session was retried on every turn of the loop,
    whatever the turn was for: 2,700 of them (three connections within --max-links) made every
    other client's send take 35 ms instead of 0.7 ms. They are tried again when their entity
    changes, once a second, and at their deadline."""
    srv = SessionServer(link_credit=100, max_connections=50)
    try:
        calls = []
        accept = srv.server.namespace.accept_session

        def counted(*args, **kwargs):
            calls.append(args)
            return accept(*args, **kwargs)

        srv.server.namespace.accept_session = counted
        waiter = RawClient(srv.port)
        waiter.open_session()
        assert waiter.put_token("sess") == 200
        waiter.send(*[next_session_attach(f"wait-{i}", 10 + i, "sess", 60_000) for i in range(200)])
        waiter.read(1)
        assert srv.on_loop(lambda: sum(len(s.pending_sessions) for s in srv.server.conns.values())) == 200
        c = authorized_sender(srv.port, "open")
        before = len(calls)
        started = time.monotonic()
        for i in range(100):  # another client's work on another queue: 100 round trips
            n = len(c.frames.of(DISPOSITION))
            c.send(c.transfer(5, message_bytes(b"x")))
            c.read(5, until=lambda f: len(f.of(DISPOSITION)) > n)
        seconds = time.monotonic() - started
        tried = len(calls) - before
        assert tried <= 20 * (seconds + 1), f"{tried} session accepts tried in {seconds:.1f} s of someone else's sends"
        # a session arriving is still handed to one waiting receiver at once
        s = authorized_sender(srv.port, "sess", handle=6)
        attaches = len(waiter.frames.of(ATTACH))
        s.send(s.transfer(6, Message(body=b"x", id="s1", group_id="s1").encode()))
        waiter.read(2, until=lambda f: len(f.of(ATTACH)) > attaches)
        answered = waiter.frames.of(ATTACH)[attaches:]
        assert len(answered) == 1 and answered[0][2].value[5] is not None, "no waiting receiver was given the session"
    finally:
        srv.stop()


def test_receivers_waiting_for_a_session_cost_other_clients_little_time() -> None:
    """The same, timed: 2,970 waits (three connections) and another client's send round trips.
    After the first fix every turn still walked every wait (which entity, which deadline) and
    the loop's timer every deadline: 3.7 ms a send instead of 0.7."""
    srv = SessionServer(link_credit=100, max_connections=50)
    try:
        def round_trips(c: RawClient, n: int = 200) -> float:
            started = time.monotonic()
            for _ in range(n):
                before = len(c.frames.of(DISPOSITION))
                c.send(c.transfer(5, message_bytes(b"x")))
                c.read(5, until=lambda f: len(f.of(DISPOSITION)) > before)
            return (time.monotonic() - started) / n

        c = authorized_sender(srv.port, "open")
        round_trips(c, 50)  # warm up
        alone = min(round_trips(c) for _ in range(3))
        waiters = []
        for _ in range(3):
            w = RawClient(srv.port)
            w.open_session()
            assert w.put_token("sess") == 200
            for start in range(0, 990, 110):
                w.send(*[next_session_attach(f"wait-{i}", 10 + i, "sess", 600_000) for i in range(start, start + 110)])
                w.read(0.05)
            waiters.append(w)
        waiters[-1].read(1)
        assert srv.on_loop(lambda: sum(len(s.pending_sessions) for s in srv.server.conns.values())) == 2970
        beside = min(round_trips(c) for _ in range(3))  # (best of three: this machine is shared)
        assert beside < 3 * alone + 0.001, f"{beside * 1000:.2f} ms a send beside 2,970 waits, {alone * 1000:.2f} ms alone"
    finally:
        srv.stop()


# ------------------------------------------------------------ deliveries in progress
def test_deliveries_in_progress_on_one_connection_are_bounded_together(srv: InProcess) -> None:
    """--max-delivery-size bounded each delivery, but not the deliveries a connection has in
    progress at once: one partial delivery on each of many links (links to $cbs: no token
    needed) was held whole by the server, 3.6 MB a link (60 links: 210 MB; 999: 3.6 GB per
    connection). Together they are bounded by --max-delivery-size too (256 kB here); past it the
    connection is closed (amqp:resource-limit-exceeded), and others are served."""
    c = RawClient(srv.port)
    c.open_session()
    c.send(*[attach(f"cbs-{h}", h, "$cbs", True) for h in range(10)])
    c.read(1, until=lambda f: len(f.of(ATTACH)) >= 10)
    chunk = b"\x00" * 40_000
    for h in range(10):  # 10 x 80 kB in progress: 800 kB, each delivery well under the limit
        c.send(c.transfer(h, chunk, more=True), transfer(h, 0, b"", chunk, more=True, continuation=True))
        c.read(0.02)
        if c.closed:
            break
    c.read(2, until=lambda f: f.of(CLOSE))
    assert [condition_of(p[2]) for p in c.frames.of(CLOSE)] == ["amqp:resource-limit-exceeded"]
    served(srv.port)


def test_deliveries_completed_one_after_the_other_do_not_add_up(srv: InProcess) -> None:
    c = authorized_sender(srv.port, "open")
    for i in range(6):  # 6 x 200 kB, each in five frames: each done before the next
        whole = message_bytes(b"y" * 200_000, f"big-{i}")
        parts = [whole[k:k + 45_000] for k in range(0, len(whole), 45_000)]
        before = len(c.frames.of(DISPOSITION))
        c.send(c.transfer(5, parts[0], more=True),
               *[transfer(5, 0, b"", part, more=k < len(parts) - 1, continuation=True) for k, part in enumerate(parts[1:], 1)])
        assert outcome(c, before) == (ACCEPTED, None)
    assert not c.closed and srv.active("open") == 6


# ------------------------------------------------------------ replies nobody takes
def test_replies_to_a_reply_link_without_credit_are_bounded_by_the_output_cap(srv: InProcess) -> None:
    """A management reply link given no credit: every reply waited in the server for credit that
    never came, and the output cap did not see them (it looked at output only while some was
    framed): 200 peek requests (30 kB of input) grew the server by 800 MB. Past the cap a request
    is refused (rejected, com.microsoft:server-busy) without being run."""
    from sbreference import Message as ModelMessage

    def fill() -> None:
        conn = srv.server.namespace.connect()
        for i in range(20):
            srv.server.namespace.send(conn, "big", [ModelMessage(body=b"y" * 32_000, message_id=f"b{i}")])

    srv.on_loop(fill)
    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("big") == 200
    c.send(attach("m", 10, "big/$management", True), attach("mr", 11, "big/$management", False))  # and never a FLOW
    c.read(1, until=lambda f: len(f.of(ATTACH)) >= 4)
    request = Message(id="r", reply_to="big/$management", properties={"operation": "com.microsoft:peek-message"},
                      body={"from-sequence-number": 1, "message-count": 20}).encode()
    for _ in range(10):
        c.send(*[c.transfer(10, request) for _ in range(10)])
        c.read(0.05)
    c.read(1)
    held = srv.on_loop(lambda: max(s.buffered() for s in srv.server.conns.values()))
    assert held <= 512 * 1024 + 256 * 1024 + 64 * 1024, f"{held} bytes of replies held for a link without credit"
    refused = [p for p in c.frames.of(DISPOSITION) if int(p[2].value[4].descriptor) == REJECTED]
    assert refused and str(list(refused[-1][2].value[4].value[0].value)[0]) == "com.microsoft:server-busy"
    served(srv.port)


# ------------------------------------------------------------ a DETACH that does not close
def test_a_receiver_detached_without_closing_is_no_longer_served(srv: InProcess) -> None:
    """A DETACH with closed=false (AMQP 1.0 part 2, 2.6.5: the link is suspended) was not acted
    on (proton reports it as its own event, not the close the server listened for): the server
    never answered it, kept the receiver among those waiting with credit, and locked every
    message sent to the queue afterwards for a link that takes nothing: no other receiver got
    them until their locks expired, each expiry a delivery counted, until dead-lettered. The
    link is detached on the server's side too and no longer served."""
    r = RawClient(srv.port)
    r.open_session()
    assert r.put_token("open") == 200
    r.send(attach("recv", 5, "open", False), flow(5, 1000))
    r.read(0.5)
    r.send(frame(performative(DETACH, uint(5), False)))  # detach, closed=false
    r.read(2, until=lambda f: f.of(DETACH))
    assert r.frames.of(DETACH), "the server did not answer the DETACH"
    s = authorized_sender(srv.port, "open", handle=6)
    for i in range(3):
        s.send(s.transfer(6, message_bytes(b"m", f"m{i}")))
    s.read(1, until=lambda f: len(f.of(DISPOSITION)) >= 4)
    _, got = receive_all(srv.port, "open")
    assert sorted(m.id for m in got) == ["m0", "m1", "m2"], "the messages were locked for the detached receiver"
    assert srv.on_loop(lambda: sum(len(w) for w in srv.server.waiting.values())) <= 1  # (the receiver just used)


def test_links_detached_without_closing_in_a_loop_are_not_kept() -> None:
    """ATTACH and DETACH (closed=false) in a loop, new names each time: a link the client
    detached still counted against --max-links (so the loop closed the connection), and proton
    kept each one for the whole session."""
    server = InProcess(max_links=10)
    try:
        c = authorized_sender(server.port, "open")
        for cycle in range(100):
            c.send(*[attach(f"d{cycle}-{h}", h, "open", True) + frame(performative(DETACH, uint(h), False)) for h in range(10, 30)])
            c.read(0.01)
        c.read(1)
        assert not c.closed and not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]

        def proton_links() -> int:
            total = 0
            for s in server.server.conns.values():
                link = s.connection.link_head(0)
                while link is not None:
                    total += 1
                    link = link.next(0)
            return total

        assert server.on_loop(proton_links) < 50, "links detached without closing are kept"
        served(server.port)
    finally:
        server.stop()


# ------------------------------------------------------------ ending sessions beside many links
def test_ending_a_session_costs_its_own_links_not_the_connections() -> None:
    """END walked every link of the connection (and every receiver, every reply link) to find
    the session's: beside 990 links to $cbs (no token needed) each END cost 10 ms, so 8 kB of
    BEGIN/END pairs stalled the server for 2 s and a 64 kB read for 17 s, no one served."""
    srv = InProcess(open_timeout=1.0, idle_timeout=30.0, max_connections=50)
    try:
        c = RawClient(srv.port)
        c.open_session()
        for start in range(0, 990, 110):
            c.send(*[attach(f"cbs-{h}", h, "$cbs", True) for h in range(start, start + 110)])
            c.read(0.05)
        c.read(0.5)
        started = time.monotonic()
        c.send(*[begin(1) + frame(performative(0x17), 1) for _ in range(400)])
        c.read(0.1)
        other = RawClient(srv.port, timeout=30)
        other.send(b"")
        other.open_session()
        waited = time.monotonic() - started
        assert waited < 1.5, f"another client waited {waited:.1f} s for its BEGIN"
        assert not c.closed
    finally:
        srv.stop()


def test_a_session_ended_with_its_links_forgets_them_all(srv: InProcess) -> None:
    """What END frees (test_serve_security has the link limit): a receiver, a reply link and a
    sender of the ended session leave no record behind, and the reply link's address answers
    no more."""
    c = authorized_sender(srv.port, "open")
    c.send(begin(1), attach("r1", 0, "open", False, channel=1), flow(0, 5, channel=1),
           attach("reply1", 1, "open/$management", False, channel=1), attach("s1", 2, "open", True, channel=1))
    c.read(1, until=lambda f: len([p for p in f.of(ATTACH) if p[1] == 1]) >= 3)

    def records() -> tuple[int, int, int, int]:
        (s,) = [s for s in srv.server.conns.values() if s.receivers or s.reply_links]
        return len(s.receivers), len(s.reply_links), len(s.link_info), len(s.open_links)

    receivers, replies, infos, links = srv.on_loop(records)
    assert receivers == 1 and replies >= 2
    c.send(frame(performative(0x17), 1))
    c.read(1)
    assert srv.on_loop(records) == (0, replies - 1, infos - 2, links - 3)
    assert srv.on_loop(lambda: sum(len(w) for w in srv.server.waiting.values())) == 0


# ------------------------------------------------------------ transfers the wrong way
@pytest.mark.parametrize("authenticated", [False, True])
def test_a_transfer_on_the_clients_own_receiving_link_is_no_server_failure(srv: InProcess, authenticated: bool) -> None:
    """A TRANSFER on a link the client attached as a receiver (the server sends on it), with no
    delivery tag: proton makes it a delivery of the server's sending link without a tag, which the
    server took for the client's disposition of a delivery it had sent, and reading its tag
    (NULL) failed: amqp:internal-error (found by the hostile sequences of test_serve_security)."""
    c = RawClient(srv.port)
    c.open_session()
    if authenticated:
        assert c.put_token("open") == 200
    c.send(attach("l0", 5, "open", False), flow(5, 0),
           frame(performative(TRANSFER, uint(5), None, None, None, None, False, None, None, None, True)))
    c.read(1, until=lambda f: f.of(CLOSE))
    assert "amqp:internal-error" not in [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    served(srv.port)


# ------------------------------------------------------------ batches
@pytest.mark.parametrize("body", [
    encode_value(Described(ulong(0x77), "not a batch")),  # an amqp-value body
    encode_value(Described(ulong(0x73), ["envelope only"])),  # no body section at all
    encode_value(Described(ulong(0x75), message_bytes(b"one", "one"))) + encode_value(Described(ulong(0x76), [1, 2])),
], ids=["amqp-value", "no-data-section", "data-then-sequence"])
def test_a_batch_whose_body_is_not_data_sections_is_refused(srv: InProcess, body: bytes) -> None:
    """A batch (message format 0x80013700) carries its messages as the envelope's data sections,
    one encoded message each ([notes] "Sending"). Any other body section was skipped: an
    amqp-value batch was accepted and nothing stored ('accepted means stored', SECURITY.md), and
    a data section beside an amqp-sequence stored the one and dropped the other."""
    c = authorized_sender(srv.port, "open")
    c.send(transfer(5, c.delivery_id, b"batch", body, message_format=0x80013700))
    c.delivery_id += 1
    assert outcome(c, 1) == (REJECTED, "com.microsoft:argument-error")
    assert srv.held("open") == 0
    batch = encode_value(Described(ulong(0x75), message_bytes(b"a", "a"))) + encode_value(Described(ulong(0x75), message_bytes(b"b", "b")))
    c.send(transfer(5, c.delivery_id, b"batch2", encode_value(Described(ulong(0x73), ["a"])) + batch, message_format=0x80013700))
    assert outcome(c, 2) == (ACCEPTED, None)
    assert srv.held("open") == 2


@pytest.mark.parametrize("timeout", ["abc", float("inf"), float("nan"), [1]], ids=["string", "infinity", "nan", "list"])
def test_a_session_wait_of_no_number_refuses_the_link_not_the_connection(timeout) -> None:
    """A next-available-session ATTACH whose com.microsoft:timeout is no number of milliseconds
    (the SDKs send a uint): int() of it raised inside the attach, and the connection was closed
    with amqp:internal-error. The link is refused (argument-error), the connection goes on."""
    from proton import symbol, ubyte

    srv = SessionServer(max_connections=50)
    try:
        c = RawClient(srv.port)
        c.open_session()
        assert c.put_token("sess") == 200
        source = Described(ulong(0x28), ["sess", None, None, None, None, None, None, {symbol("com.microsoft:session-filter"): None}])
        c.send(frame(performative(ATTACH, "s", uint(5), True, ubyte(0), ubyte(1), source, Described(ulong(0x29), [None]),
                                  None, None, None, None, None, None, {symbol("com.microsoft:timeout"): timeout})))
        c.read(2, until=lambda f: f.of(CLOSE) or any(p[2].value[0] == 5 for p in f.of(DETACH)))
        assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
        assert [condition_of(p[2]) for p in c.frames.of(DETACH)] == ["com.microsoft:argument-error"]
        assert c.put_token("sess", handle=10) == 200  # the connection goes on
    finally:
        srv.stop()


@pytest.mark.parametrize("info", [[1, 2], "text", 5], ids=["list", "string", "number"])
def test_a_rejected_outcome_whose_error_info_is_no_map_is_refused_not_a_server_failure(srv: InProcess, info) -> None:
    """An AMQP error's info is a map (AMQP 1.0 part 2, 2.8.14 'error': info, fields). A dead-letter
    disposition whose info was a list made dict() raise inside the server: the connection closed
    with amqp:internal-error. It is refused as the disposition's argument error; the lock stays."""
    from proton import symbol

    r, delivery_id = locked_delivery(srv, "kept")
    before = len(r.frames.of(DISPOSITION))
    error = Described(ulong(0x1D), [symbol("com.microsoft:dead-letter"), "dl", info])
    r.send(frame(performative(DISPOSITION, True, uint(delivery_id), uint(delivery_id), False, Described(ulong(REJECTED), [error]))))
    r.read(3, until=lambda f: len(f.of(DISPOSITION)) > before or f.of(CLOSE))
    assert not r.frames.of(CLOSE), [condition_of(p[2]) for p in r.frames.of(CLOSE)]
    answer = r.frames.of(DISPOSITION)[before][2].value[4]
    assert int(answer.descriptor) == REJECTED and str(list(answer.value[0].value)[0]) == "com.microsoft:argument-error"
    assert srv.on_loop(lambda: srv.server.namespace.runtime_info("open")["dead_letter"]) == 0


@pytest.mark.parametrize("txn_outcome", [Described(ulong(REJECTED), 5), Described(ulong(REJECTED), [Described(ulong(0x1D), 7)]),
                                         Described(ulong(0x27), 5)], ids=["rejected-not-a-list", "error-not-a-list", "modified-not-a-list"])
def test_a_malformed_transactional_outcome_is_refused_not_a_server_failure(srv: InProcess, txn_outcome) -> None:
    """A disposition in a transaction (transactional-state: txn-id, outcome) whose outcome is not a
    list of fields (AMQP 1.0 part 3, 3.4: outcomes are described lists): list() or len() of it
    raised inside the server and closed the connection with amqp:internal-error (found by a
    fuzz of dispositions)."""
    r, delivery_id = locked_delivery(srv, "kept")
    before = len(r.frames.of(DISPOSITION))
    state = Described(ulong(0x34), [b"\x00" * 7 + b"\x01", txn_outcome])
    r.send(frame(performative(DISPOSITION, True, uint(delivery_id), uint(delivery_id), False, state)))
    r.read(3, until=lambda f: len(f.of(DISPOSITION)) > before or f.of(CLOSE))
    assert not r.frames.of(CLOSE), [condition_of(p[2]) for p in r.frames.of(CLOSE)]
    assert int(r.frames.of(DISPOSITION)[before][2].value[4].descriptor) == REJECTED


def test_a_token_whose_name_is_no_url_is_refused_not_a_server_failure(srv: InProcess) -> None:
    """A put-token (signed with the key) whose name is not a URL ('sb://[abc/q': an IPv6 host
    never closed): urlparse raised inside the server and the connection closed with
    amqp:internal-error. It is answered 401."""
    from proton import Message as AmqpMessage

    from sbconform.amqp.sas import make_token
    from serve_support import KEY, KEY_NAME

    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    name = "sb://[abc/q"
    request = AmqpMessage(id="bad-url", body=make_token(name, KEY_NAME, KEY),
                          properties={"operation": "put-token", "type": "jwt", "name": name})
    before = len(c.frames.of(TRANSFER))
    c.send(c.transfer(0, request.encode()))
    c.read(3, until=lambda f: len(f.of(TRANSFER)) > before or f.of(CLOSE))
    assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    reply = AmqpMessage()
    reply.decode(c.frames.of(TRANSFER)[-1][3])
    assert reply.correlation_id == "bad-url" and reply.properties["status-code"] == 401


@pytest.mark.parametrize("sending", [True, False], ids=["sender", "receiver"])
@pytest.mark.parametrize("address", ["amqps://[abc/q", "amqps://[abc/$cbs"])
def test_an_address_that_is_no_url_is_no_server_failure(srv: InProcess, sending: bool, address: str) -> None:
    """An ATTACH (no token needed) whose address has a scheme but is no URL ('amqps://[abc/q'):
    urlparse raised inside the attach and the connection closed with amqp:internal-error. The
    address's path is read as any address's is (its host is not looked at)."""
    c = RawClient(srv.port)
    c.open_session()
    c.send(attach("x", 3, address, sending))
    c.read(2, until=lambda f: f.of(CLOSE) or f.of(ATTACH))
    assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    assert c.frames.of(ATTACH)
    served(srv.port)


@pytest.mark.parametrize("sending", [True, False], ids=["sender", "receiver"])
@pytest.mark.parametrize("properties", ["text", 5, [1, 2]], ids=["string", "number", "list"])
def test_attach_properties_that_are_no_map_are_no_server_failure(srv: InProcess, sending: bool, properties) -> None:
    """An ATTACH's properties are a map (fields, AMQP 1.0 part 2, 2.7.3); read with .get, a
    string, a number or a list raised inside the attach (a sender's send-via destination, a
    session receiver's timeout) and the connection closed with amqp:internal-error (found by a
    fuzz of ATTACH frames). They are read as no properties."""
    from proton import symbol, ubyte

    c = RawClient(srv.port)
    c.open_session()
    assert c.put_token("open") == 200
    source = Described(ulong(0x28), [None if sending else "open", None, None, None, None, None, None,
                                     None if sending else {symbol("com.microsoft:session-filter"): None}])
    target = Described(ulong(0x29), ["open" if sending else None])
    c.send(frame(performative(ATTACH, "p", uint(5), not sending, ubyte(0), ubyte(0), source, target,
                              None, None, None, None, None, None, properties)))
    c.read(1.5, until=lambda f: f.of(CLOSE) or any(p[2].value[0] == "p" for p in f.of(ATTACH)))
    assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    assert any(p[2].value[0] == "p" for p in c.frames.of(ATTACH))


def test_a_control_request_whose_properties_are_no_map_is_a_bad_request(srv: InProcess) -> None:
    """The $sbconform node read a request's 'properties' with .items(): a string (or any value
    but a map) raised AttributeError inside the server and the connection closed with
    amqp:internal-error (found by a fuzz of control requests). It is answered 400."""
    from sbconform.amqp.sas import make_token
    from serve_support import KEY, KEY_NAME

    c = RawClient(srv.port)
    c.open_session()
    c.send(attach("m", 10, "$sbconform", True), attach("mr", 11, "$sbconform", False), flow(11, 10))
    c.read(1, until=lambda f: len(f.of(ATTACH)) >= 2)
    request = Message(id="ctl", reply_to="$sbconform", body={"name": "q9", "properties": "not a map"},
                      properties={"operation": "create-queue", "authorization": make_token("sb://sbconform/$sbconform", KEY_NAME, KEY)})
    c.send(c.transfer(10, request.encode()))
    c.read(3, until=lambda f: f.of(TRANSFER) or f.of(CLOSE))
    assert not c.frames.of(CLOSE), [condition_of(p[2]) for p in c.frames.of(CLOSE)]
    reply = Message()
    reply.decode(c.frames.of(TRANSFER)[-1][3])
    assert reply.properties["statusCode"] == 400


def test_a_transfer_of_no_bytes_is_rejected_with_a_reason_a_client_can_read(srv: InProcess) -> None:
    """A bare message has a body section (AMQP 1.0 part 3, 3.2); a TRANSFER carrying no bytes at
    all is rejected, and its reason says so: it read "'NoneType' has no len()"."""
    c = authorized_sender(srv.port, "open")
    before = len(c.frames.of(DISPOSITION))
    c.send(c.transfer(5, b""))
    state, condition = outcome(c, before)
    assert (state, condition) == (REJECTED, "com.microsoft:argument-error")
    description = str(list(c.frames.of(DISPOSITION)[before][2].value[4].value[0].value)[1])
    assert "NoneType" not in description and "no bytes" in description, description
    assert not c.closed and srv.active("open") == 0
