"""The proxy relays bytes unchanged: whatever frames (well formed or not, in any order,
cut anywhere) one side sends, the other side receives exactly those bytes, and the
recording stays a readable trace. The only frames the proxy changes are CBS put-token
requests (tested through the SDK in test_proxy.py), which these sequences never carry."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("proton")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from proton import Data, Described, symbol, ulong  # noqa: E402
from proton import Message as AmqpMessage  # noqa: E402

from sbconform.proxy.frames import Splitter  # noqa: E402
from sbconform.proxy.run import ProxyThread  # noqa: E402
from sbconform.trace.io import read_events  # noqa: E402

HEADER_SASL = b"AMQP\x03\x01\x00\x00"
HEADER_AMQP = b"AMQP\x00\x01\x00\x00"


class FakeBroker:
    """Accepts connections one at a time; for each, reads ``expect`` bytes, then sends
    ``script`` (in chunks) and keeps what it read."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.expect = 0
        self.script: list[bytes] = []
        self.received = bytearray()
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with sock:
                sock.settimeout(10)
                got = bytearray()
                try:
                    while len(got) < self.expect:
                        chunk = sock.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                    for chunk in self.script:
                        sock.sendall(chunk)
                    self.received = got
                    self.done.set()
                    sock.settimeout(2)
                    while sock.recv(65536):  # until the client goes
                        pass
                except OSError:
                    self.received = got
                    self.done.set()


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    broker = FakeBroker()
    out = tmp_path_factory.mktemp("relay-trace")
    upstream = f"Endpoint=sb://127.0.0.1:{broker.port};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    proxy = ProxyThread(upstream, out, describe="none")
    port = proxy.start()
    yield broker, port, proxy, out
    proxy.stop()
    broker.listener.close()


# ------------------------------------------------------------------ frames

addresses = st.sampled_from(["q1", "amqps://localhost:5673/q1", "q1/$management", "q2/$DeadLetterQueue", "t/Subscriptions/s", ""])
scalars = st.one_of(st.none(), st.booleans(), st.integers(0, 2**32 - 1).map(lambda n: n), st.text(max_size=12),
                    st.binary(max_size=20), st.sampled_from([symbol("x-opt-sequence-number"), symbol("com.microsoft:session-filter")]))


def terminus(draw_address):
    return st.builds(lambda a, f: Described(ulong(0x28 if f else 0x29), [a, None, None, None, None, None, None,
                                                                          {symbol("com.microsoft:session-filter"): "A"} if f else None]),
                     draw_address, st.booleans())


def outcome():
    return st.sampled_from([None, Described(ulong(0x24), []), Described(ulong(0x26), []),
                            Described(ulong(0x27), [True, False, None]), Described(ulong(0x27), [True, True, None]),
                            Described(ulong(0x25), [Described(ulong(0x1d), [symbol("com.microsoft:message-lock-lost"), "lost", None])])])


def message_bytes():
    def make(mid, seq, body):
        m = AmqpMessage(id=mid, body=body, annotations={symbol("x-opt-sequence-number"): seq} if seq is not None else None)
        return m.encode()
    return st.one_of(st.builds(make, st.one_of(st.none(), st.text(max_size=6)), st.one_of(st.none(), st.integers(0, 2**40)),
                               st.text(max_size=16)), st.binary(max_size=40))


small = st.integers(0, 3)
performatives = st.one_of(
    st.tuples(st.just(0x10), st.lists(scalars, max_size=4)),  # open
    st.tuples(st.just(0x11), st.tuples(st.one_of(st.none(), small), small, small, small)),  # begin
    st.tuples(st.just(0x12), st.tuples(st.text(max_size=4), small, st.booleans(), st.sampled_from([0, 1, None]), st.none(),
                                        terminus(addresses), terminus(addresses))),  # attach
    st.tuples(st.just(0x13), st.tuples(small, small, small, small, st.one_of(st.none(), small), small, st.integers(0, 10))),  # flow
    st.tuples(st.just(0x14), st.tuples(small, st.one_of(st.none(), small), st.binary(min_size=0, max_size=16), st.sampled_from([0, 0x80013700]),
                                        st.booleans(), st.booleans())),  # transfer
    st.tuples(st.just(0x15), st.tuples(st.booleans(), small, st.one_of(st.none(), small), st.booleans(), outcome())),  # disposition
    st.tuples(st.just(0x16), st.tuples(small, st.booleans(), st.none())),  # detach
    st.tuples(st.just(0x17), st.lists(scalars, max_size=2)),  # end
    st.tuples(st.just(0x18), st.lists(scalars, max_size=2)),  # close
    st.tuples(st.integers(0, 0x60), st.lists(scalars, max_size=5)),  # anything
)


def to_python(value):
    return [v for v in value] if isinstance(value, tuple) else value


@st.composite
def frames(draw):
    code, fields = draw(performatives)
    data = Data()
    data.put_object(Described(ulong(code), to_python(fields)))
    body = data.encode()
    if code == 0x14:
        body += draw(message_bytes())
    channel = draw(small)
    ftype = draw(st.sampled_from([0, 0, 0, 1]))
    ext = draw(st.sampled_from([b"", b"\x00\x00\x00\x00"]))
    doff = 2 + len(ext) // 4
    return struct.pack(">IBBH", 8 + len(ext) + len(body), doff, ftype, channel) + ext + body


@st.composite
def client_stream(draw):
    parts = [HEADER_SASL] if draw(st.booleans()) else []
    parts += [HEADER_AMQP] + draw(st.lists(frames(), max_size=25))
    if draw(st.booleans()):
        parts.append(b"\x00\x00\x00\x01" + draw(st.binary(max_size=40)))  # not framing: relayed raw from here
    return b"".join(parts)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(client=client_stream(), broker=st.one_of(client_stream(), st.binary(max_size=200)),
       client_cuts=st.lists(st.integers(0, 10_000), max_size=6), broker_cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_random_frames_pass_through_unchanged(relay, client, broker, client_cuts, broker_cuts):
    fake, port, proxy, out = relay
    fake.expect = len(client)
    fake.script = chunked(broker, broker_cuts)
    fake.done.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for chunk in chunked(client, client_cuts):
            sock.sendall(chunk)
            time.sleep(0.001)
        sock.shutdown(socket.SHUT_WR)  # the end of the client's stream: nothing may stay held
        got = bytearray()
        deadline = time.monotonic() + 10
        sock.settimeout(0.5)
        while len(got) < len(broker) and time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            got += chunk
        assert fake.done.wait(10)
    assert bytes(fake.received) == client
    assert bytes(got) == broker


def test_the_recording_of_random_traffic_is_a_readable_trace_and_the_proxy_still_serves(relay):
    fake, port, proxy, out = relay
    # bytes that are not AMQP framing: relayed raw, and said in the trace
    garbage = HEADER_AMQP + b"\x00\x00\x00\x01 not a frame"
    fake.expect = len(garbage)
    fake.script = [HEADER_AMQP]
    fake.done.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(garbage)
        sock.settimeout(5)
        assert sock.recv(8) == HEADER_AMQP
    assert fake.done.wait(10) and bytes(fake.received) == garbage
    # a well-formed exchange after it (and after whatever random traffic ran before) still passes
    fake.expect = len(HEADER_AMQP)
    fake.script = [HEADER_AMQP]
    fake.done.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(HEADER_AMQP)
        sock.settimeout(5)
        assert sock.recv(8) == HEADER_AMQP
    assert fake.done.wait(10)
    deadline = time.monotonic() + 10
    while True:  # JSON Lines are flushed event by event: the trace is readable while it grows
        events = list(read_events(out))  # every event checked against the format
        if any("not AMQP framing" in (e["result"] or "") for e in events) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [e["pos"] for e in events] == list(range(len(events)))
    assert any(e["phase"] == "info" and "not AMQP framing" in (e["result"] or "") for e in events)
    # the interpreter followed every sequence without failing itself
    assert proxy.proxy.stats.interpreter_errors == 0, proxy.proxy.stats.errors


def test_splitter_keeps_every_byte_and_cuts_only_at_frame_boundaries():
    data = HEADER_AMQP + struct.pack(">IBBH", 12, 2, 0, 0) + b"abcd" + struct.pack(">IBBH", 8, 2, 0, 1)
    s = Splitter()
    units = []
    for i in range(len(data)):
        units += s.feed(data[i:i + 1])
    assert b"".join(u.raw for u in units) == data
    assert [len(u.raw) for u in units] == [8, 12, 8]



def test_a_slow_client_pauses_the_broker_side_and_loses_no_byte(relay):
    """Flow control: while the client does not read, the proxy stops reading from the broker
    (its buffer toward the client stays bounded); once the client reads, every byte comes,
    in order."""
    fake, port, proxy, _ = relay
    rng = random.Random(7)
    garbage = bytes(rng.getrandbits(8) for _ in range(1 << 16)) * 512  # 32 MiB, not AMQP framing: relayed raw
    fake.expect = len(HEADER_AMQP)
    fake.script = [HEADER_AMQP] + [garbage[i:i + (1 << 20)] for i in range(0, len(garbage), 1 << 20)]
    fake.done.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(HEADER_AMQP)
        deadline = time.monotonic() + 10
        paused = False
        while not paused and time.monotonic() < deadline:  # the client reads nothing meanwhile
            paused = any("full" in pair.paused[False] for pair in list(proxy.proxy.pairs))
            time.sleep(0.05)
        assert paused, "the proxy kept reading from the broker while the client read nothing"
        got = bytearray()
        sock.settimeout(10)
        while len(got) < len(HEADER_AMQP) + len(garbage):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += chunk
    assert bytes(got) == HEADER_AMQP + garbage
