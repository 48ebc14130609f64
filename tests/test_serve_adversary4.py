"""``sbconform serve`` against a hostile or careless client (fourth round): one test per defect
found, each written to fail on the server as it was. The management REST API through raw HTTP
and the AMQP port through raw frames, both against one server on a thread of this process
(``test_admin_http``'s ``broker`` fixture, module-scoped here)."""

from __future__ import annotations

import socket
import threading
import time
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from sbconform.server import admin_http  # noqa: E402
from sbconform.server.atom import parse_description  # noqa: E402
from test_admin_http import admin, broker, raw  # noqa: E402,F401 (fixtures)
from test_serve_security import authorized_sender  # noqa: E402

ENTRY = (b'<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
         b'<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">%s'
         b"</QueueDescription></content></entry>")


def exists(http, path: str) -> bool:
    """Whether GET /path answers an entry (Service Bus answers an empty feed for none)."""
    status, body = raw(http, "GET", f"/{path}?api-version=2021-05")
    assert status == 200
    return ET.fromstring(body).tag.endswith("entry")


# ------------------------------------------------------------- REST: XML
def test_a_body_declaring_a_dtd_is_refused_and_its_entities_never_expanded(broker) -> None:
    """A 100 KB body whose internal entity is referenced 60 times (under expat's amplification
    limit) made a 6 MB UserMetadata, kept and written back on every read. Service Bus reads
    request bodies with .NET's XmlReader, which prohibits DTDs (DtdProcessing.Prohibit, its
    default): a body declaring one is a 400, and nothing is created."""
    _, http = broker
    declared = (b'<?xml version="1.0"?><!DOCTYPE entry [<!ENTITY a "' + b"x" * 100_000 + b'">]>'
                + ENTRY % (b"<UserMetadata>" + b"&a;" * 60 + b"</UserMetadata>"))
    status, answer = raw(http, "PUT", "/expanded?api-version=2021-05", body=declared)
    assert status == 400, answer[:300]
    assert "DTD" in ET.fromstring(answer).find("Detail").text
    assert not exists(http, "expanded")
    external = (b'<?xml version="1.0"?><!DOCTYPE entry [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
                + ENTRY % b"<UserMetadata>&e;</UserMetadata>")
    status, _ = raw(http, "PUT", "/external?api-version=2021-05", body=external)
    assert status == 400 and not exists(http, "external")
    rule = (b'<!DOCTYPE entry [<!ENTITY s "1=1">]><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
            b'<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
            b'<Filter xmlns:i="http://www.w3.org/2001/XMLSchema-instance" i:type="SqlFilter"><SqlExpression>&s;</SqlExpression>'
            b"</Filter></RuleDescription></content></entry>")
    status, _ = raw(http, "PUT", "/topic.1/Subscriptions/subscription.1/Rules/dtd?api-version=2021-05", body=rule)
    assert status == 400


def test_user_metadata_is_at_most_1024_characters(broker) -> None:
    """QueueProperties.UserMetadata: "Cannot be null. Max length is 1024 chars."
    (https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.queueproperties.usermetadata).
    The JavaScript SDK sends any length unchecked; serve kept 200 KB of it."""
    _, http = broker
    status, answer = raw(http, "PUT", "/meta-long?api-version=2021-05", body=ENTRY % (b"<UserMetadata>" + b"m" * 1025 + b"</UserMetadata>"))
    assert status == 400, answer[:300]
    assert "UserMetadata" in ET.fromstring(answer).find("Detail").text
    assert not exists(http, "meta-long")
    status, _ = raw(http, "PUT", "/meta-1024?api-version=2021-05", body=ENTRY % (b"<UserMetadata>" + b"m" * 1024 + b"</UserMetadata>"))
    assert status == 201
    raw(http, "DELETE", "/meta-1024?api-version=2021-05")


def test_elements_service_bus_does_not_know_are_not_kept() -> None:
    """An element the description never writes back (``<Foo>``, 200 KB of it) was kept with the
    entity for as long as it lived; Service Bus's data contract ignores unknown elements. What it
    writes (UserMetadata, EnableExpress, ...) is still kept as sent."""
    body = ENTRY % (b"<Foo>" + b"y" * 200_000 + b"</Foo><UserMetadata>kept</UserMetadata><EnableExpress>false</EnableExpress>")
    _, extras = parse_description(body, "queue", lambda text: text)
    assert extras == {"UserMetadata": "kept", "EnableExpress": "false"}


# ------------------------------------------------------ REST: slow clients
def _dribble(port: int, at_once: bytes, head: bytes, stop: threading.Event) -> socket.socket:
    """A client that sends ``at_once``, then ``head`` one byte every 0.2 s, never finishing (each
    byte well within the per-read timeout)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(at_once)

    def run() -> None:
        for i in range(len(head)):
            if stop.is_set():
                return
            try:
                sock.sendall(head[i:i + 1])
            except OSError:
                return
            time.sleep(0.2)

    threading.Thread(target=run, daemon=True).start()
    return sock


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_request_sent_byte_by_byte_is_dropped_after_the_request_deadline(broker, monkeypatch, part: str) -> None:
    """A client dribbling its request (a byte every 0.2 s, each within the 30 s read timeout) held
    its thread as long as it cared to: 64 of them (MAX_CLIENTS) shut the REST API to everyone. A
    request now has REQUEST_DEADLINE seconds in all to arrive (here 0.5 s)."""
    _, http = broker
    monkeypatch.setattr(admin_http, "REQUEST_DEADLINE", 0.5, raising=False)
    if part == "headers":
        at_once, slow = b"GET /$namespaceinfo HTTP/1.1\r\nHost: localhost\r\n", b"X-Slow: " + b"a" * 200
    else:
        at_once, slow = b"PUT /slow?api-version=2021-05 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000\r\n\r\n", b"b" * 200
    stop = threading.Event()
    started = time.monotonic()
    sock = _dribble(http.port, at_once, slow, stop)
    try:
        sock.settimeout(6)
        try:
            while sock.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
        took = time.monotonic() - started
    finally:
        stop.set()
        sock.close()
    assert took < 3, f"the dribbling client was served {took:.1f} s"



# ------------------------------------------------- REST: what XML cannot carry
def test_a_path_holding_a_control_character_is_refused(broker, admin) -> None:
    """A rule named 'a\\x00b' (``%00`` in the URL) was created, and from then on the subscription's
    rule list was not XML (a NUL cannot be written in XML 1.0): every client's listRules failed
    ("XML is invalid"). A URL path holding a control character is a 400 (as http.sys, in front of
    Service Bus, refuses one), and nothing is created."""
    _, http = broker
    rule = (b'<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
            b'<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
            b'<Filter xmlns:i="http://www.w3.org/2001/XMLSchema-instance" i:type="SqlFilter"><SqlExpression>1=1</SqlExpression>'
            b"</Filter></RuleDescription></content></entry>")
    admin.create_topic("ctl-t")
    admin.create_subscription("ctl-t", "s")
    rules = "/ctl-t/Subscriptions/s/Rules"
    for name in ("a%00b", "a%0Ab", "a%1Fb"):
        status, _ = raw(http, "PUT", f"{rules}/{name}?api-version=2021-05", body=rule)
        assert status == 400, name
    status, listed = raw(http, "GET", f"{rules}?api-version=2021-05")
    assert status == 200
    assert [e.text for e in ET.fromstring(listed).iter("{http://www.w3.org/2005/Atom}title")][1:] == ["$Default"]
    admin.delete_topic("ctl-t")


def test_what_xml_cannot_carry_is_never_written() -> None:
    """A rule made over AMQP may hold any AMQP string (a correlation filter's value with a NUL, a
    rule name with a control character); written as it was, it made the subscription's whole rule
    list unreadable to every client. Characters XML 1.0 cannot carry are written as U+FFFD."""
    from sbreference import CorrelationFilter, Rule

    from sbconform.server.atom_rules import rule_feed_xml

    rule = Rule("r\x01", CorrelationFilter(correlation_id="c\x00d", properties={"k": "v\x1b"}), None)
    feed = ET.fromstring(rule_feed_xml([{"path": "t/Subscriptions/s/Rules/r\x01", "rule": rule, "created": 0, "updated": 0}],
                                       "localhost", "t/Subscriptions/s/Rules", 0, 100, False))
    texts = [e.text for e in feed.iter() if e.text]
    assert "c\ufffdd" in texts and "r\ufffd" in texts and "v\ufffd" in texts


# ------------------------------------------------------------ REST: updates
@pytest.mark.parametrize("field", ["forward_to", "forward_dead_lettered_messages_to"])
def test_an_update_without_forwarding_stops_forwarding(admin, field: str) -> None:
    """An update replaces the description: the SDKs stop auto-forwarding by updating with
    ``forward_to=None`` (no ForwardTo element; .NET: "set ForwardTo to null", SETTLE-FWD-001/002).
    serve kept forwarding (the model's ForwardTo, which the entry shows), and the JavaScript client
    read the old ForwardTo back."""
    dest, src = f"fwd-dest-{len(field)}", f"fwd-src-{len(field)}"
    admin.create_queue(dest)
    admin.create_queue(src, **{field: dest})
    got = admin.get_queue(src)
    assert getattr(got, field).endswith(f"/{dest}")
    setattr(got, field, None)
    got.max_delivery_count = 7
    admin.update_queue(got)
    again = admin.get_queue(src)
    assert getattr(again, field) is None and again.max_delivery_count == 7
    admin.delete_queue(src)
    admin.delete_queue(dest)


# ------------------------------------------------------- AMQP: session waits
def test_credit_given_while_waiting_for_a_session_is_served_once_one_is_accepted(broker, admin) -> None:
    """A session receiver (next available) that gave its credit with its ATTACH, before the answer
    (AMQP 1.0 allows a FLOW right after the ATTACH; proton-based clients pipeline them): once a
    session arrived and was accepted, its link opened but the credit it already had was never
    served, and the message sat there until the client flowed again."""
    from proton import Described, Message, symbol, ubyte, uint, ulong

    from serve_support import ATTACH, TRANSFER, RawClient, flow, frame, performative

    admin.create_queue("pending-sessions", requires_session=True)
    r, sender = RawClient(broker[0].port), None
    try:
        r.open_session()
        assert r.put_token("pending-sessions") == 200
        source = Described(ulong(0x28), ["pending-sessions", None, None, None, None, None, None,
                                         {symbol("com.microsoft:session-filter"): None}])
        target = Described(ulong(0x29), [None])
        attach = frame(performative(ATTACH, "waits", uint(5), True, ubyte(0), ubyte(0), source, target,
                                    None, None, None, None, None, None, {symbol("com.microsoft:timeout"): uint(20_000)}))
        r.send(attach, flow(5, 5))
        r.read(0.3)  # (waiting: no session yet)
        sender = authorized_sender(broker[0].port, "pending-sessions")
        sender.send(sender.transfer(5, Message(body=b"for a waiting receiver", group_id="s1").encode()))

        def served(f) -> bool:  # a TRANSFER on the handle the server gave the link (its ATTACH's)
            mine = [int(a[2].value[1]) for a in f.of(ATTACH) if a[2].value[0] == "waits"]
            return bool(mine) and any(int(t[2].value[0]) == mine[0] for t in f.of(TRANSFER))

        r.read(3, until=served)
        assert [a for a in r.frames.of(ATTACH) if a[2].value[0] == "waits"], "the attach was never answered"
        assert served(r.frames), "the credit given while waiting was never served"
    finally:
        r.close()
        if sender is not None:
            sender.close()
        admin.delete_queue("pending-sessions")


# --------------------------------------------------------- REST: values
@pytest.mark.parametrize("element,text", [("LockDuration", "P" + "9" * 400 + "D"), ("DefaultMessageTimeToLive", "PT" + "9" * 400 + "S"),
                                          ("AutoDeleteOnIdle", "PT" + "9" * 309 + ".5S")])
def test_a_duration_too_large_for_any_number_is_a_400_not_a_500(broker, element: str, text: str, caplog) -> None:
    """A duration of 400 digits overflowed to infinity and failed rounding (OverflowError, not a
    ValueError): 500 'the broker failed to handle the request', an error logged. .NET's
    XmlConvert.ToTimeSpan throws OverflowException on it, a bad request."""
    _, http = broker
    body = ENTRY % f"<{element}>{text}</{element}>".encode()
    status, answer = raw(http, "PUT", "/huge-duration?api-version=2021-05", body=body)
    assert status == 400, answer[:300]
    assert element in ET.fromstring(answer).find("Detail").text or "duration" in ET.fromstring(answer).find("Detail").text
    assert not exists(http, "huge-duration")
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# ------------------------------------------------------ REST: authorization
def test_a_token_for_one_entity_cannot_reach_another_through_the_host_header(broker, admin) -> None:
    """The audience a request must be covered by was built from its Host header and path: a token
    for 'q1' alone (an entity-scoped SAS, what the SDKs put on $cbs) with ``Host: localhost:port/q1``
    covered 'localhost:port/q1/other', and the request acted on 'other': read, deleted or created
    any entity. A Host header is a host and a port, nothing else."""
    from sbconform.amqp.sas import make_token

    from serve_support import KEY, KEY_NAME

    _, http = broker
    admin.create_queue("scoped")
    admin.create_queue("victim")
    host = f"localhost:{http.port}"
    token = make_token(f"sb://{host}/scoped", KEY_NAME, KEY)
    status, _ = raw(http, "GET", "/scoped?api-version=2021-05", token=token)
    assert status == 200  # the token is good for its own entity
    for method, path, body in (("DELETE", "/victim", b""), ("GET", "/victim", b""), ("PUT", "/planted", ENTRY % b"")):
        status, _ = raw(http, method, f"{path}?api-version=2021-05", body=body, token=token, headers={"Host": f"{host}/scoped"})
        assert status in (400, 401), (method, path, status)
    for path in ("/scoped/../victim", "/scoped%2F..%2Fvictim", "/scoped/%2e%2e/victim"):  # (and no dot segments)
        status, _ = raw(http, "DELETE", f"{path}?api-version=2021-05", token=token)
        assert status in (400, 401, 404), (path, status)
    assert exists(http, "victim") and not exists(http, "planted")
    for name in ("sb_emulator", "[::1]", "example.com."):  # a container's name, an IPv6 address, a full stop: hosts all
        other = f"{name}:{http.port}"
        status, _ = raw(http, "GET", "/victim?api-version=2021-05", token=make_token(f"sb://{other}/victim", KEY_NAME, KEY),
                        headers={"Host": other})
        assert status == 200, other
    admin.delete_queue("victim")
    admin.delete_queue("scoped")


def test_forwarding_into_an_entity_needs_a_token_for_it(broker, admin) -> None:
    """A token for 'fsrc' alone created 'fsrc' forwarding to 'fvictim' (or its dead letters there): its
    holder then sent into an entity it had no token for. Both SDKs send a token for the destination in
    ``ServiceBusSupplementaryAuthorization`` (``ServiceBusDlqSupplementaryAuthorization``): "forward_to
    requires providing a bearer token in headers for the referenced entity" (azure-servicebus
    ``_create_forward_to_header_tokens``). The destination must be covered by it or by the request's own."""
    from sbconform.amqp.sas import make_token

    from serve_support import KEY, KEY_NAME

    _, http = broker
    admin.create_queue("fvictim")
    host = f"localhost:{http.port}"
    token = make_token(f"sb://{host}/fsrc", KEY_NAME, KEY)
    for element, header in (("ForwardTo", "ServiceBusSupplementaryAuthorization"),
                            ("ForwardDeadLetteredMessagesTo", "ServiceBusDlqSupplementaryAuthorization")):
        body = ENTRY % f"<{element}>sb://{host}/fvictim</{element}>".encode()
        status, _ = raw(http, "PUT", "/fsrc?api-version=2021-05", body=body, token=token)
        assert status == 401, element
        assert not exists(http, "fsrc")
        wrong = make_token(f"sb://{host}/elsewhere", KEY_NAME, KEY)
        status, _ = raw(http, "PUT", "/fsrc?api-version=2021-05", body=body, token=token, headers={header: wrong})
        assert status == 401 and not exists(http, "fsrc"), element
        supplementary = make_token(f"sb://{host}/fvictim", KEY_NAME, KEY)
        status, _ = raw(http, "PUT", "/fsrc?api-version=2021-05", body=body, token=token, headers={header: supplementary})
        assert status == 201, element
        admin.delete_queue("fsrc")
    admin.delete_queue("fvictim")


@pytest.mark.parametrize("path", ["/$Resources/Queues", "/$Resources/Topics", "/adv4-t/Subscriptions", "/adv4-t/Subscriptions/s/Rules"])
def test_a_page_of_none_links_to_no_next_page(broker, admin, path: str) -> None:
    """``$top=0`` answered an empty page whose ``next`` link was the same request ($skip+0): a client
    following next links (both SDKs page while a feed has one) asked for it forever."""
    _, http = broker
    if not exists(http, "adv4-t"):
        admin.create_topic("adv4-t")
        admin.create_subscription("adv4-t", "s")
    status, body = raw(http, "GET", f"{path}?$top=0&api-version=2021-05")
    assert status == 200
    links = [e.attrib.get("rel") for e in ET.fromstring(body).iter("{http://www.w3.org/2005/Atom}link")]
    assert "next" not in links


def test_an_answer_is_not_held_back_by_nagle(broker) -> None:
    """An answer is written as headers, then body: with Nagle's algorithm on, the body waited for the
    client's delayed ACK of the headers (40 ms on Linux), and every request of the SDKs took 50 ms
    (5 with TCP_NODELAY). Ten requests on one kept-alive connection, as the SDKs send them."""
    from http.client import HTTPConnection

    from sbconform.amqp.sas import make_token

    from serve_support import KEY, KEY_NAME

    _, http = broker
    conn = HTTPConnection("127.0.0.1", http.port, timeout=10)
    headers = {"Authorization": make_token(f"http://localhost:{http.port}", KEY_NAME, KEY), "Host": f"localhost:{http.port}"}
    try:
        conn.request("GET", "/$namespaceinfo", headers=headers)
        conn.getresponse().read()
        started = time.monotonic()
        for _ in range(10):
            conn.request("GET", "/$namespaceinfo", headers=headers)
            assert conn.getresponse().read()
        took = time.monotonic() - started
    finally:
        conn.close()
    assert took < 0.3, f"10 requests took {took * 1000:.0f} ms"


def test_the_transfer_dead_letter_count_is_the_models(broker, admin) -> None:
    """A message sent via 'tdl-via' to a destination disabled before the commit goes to the via entity's
    transfer dead-letter queue (TXN-VIA-002, service-bus-dead-letter-queues). The model counts it; the
    REST API wrote TransferDeadLetterMessageCount as 0 and left it out of MessageCount."""
    from serve_support import strand_via

    admin.create_queue("tdl-via")
    admin.create_queue("tdl-dest")
    strand_via(broker[0].port, admin, "tdl-via", "tdl-dest")
    via = admin.get_queue_runtime_properties("tdl-via")
    assert (via.transfer_dead_letter_message_count, via.active_message_count, via.total_message_count) == (1, 0, 1)
    admin.delete_queue("tdl-via")
    admin.delete_queue("tdl-dest")
