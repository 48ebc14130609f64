"""``sbconform serve`` against a hostile client (second round): one test per defect found,
each written to fail on the server as it was. Raw AMQP frames (``serve_support``) against a
server on a thread of this process (``InProcess`` of ``test_serve_security``)."""

from __future__ import annotations

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
    condition_of,
    encode_value,
    flow,
    frame,
    message_bytes,
    performative,
)
from test_serve_security import InProcess, authorized_sender, served  # noqa: E402

ACCEPTED, REJECTED = 0x24, 0x25


@pytest.fixture
def srv():
    server = InProcess(link_credit=20, max_delivery_size=256 * 1024, max_output_buffer=512 * 1024,
                       open_timeout=1.0, idle_timeout=10.0, max_connections=50)
    yield server
    server.stop()


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
