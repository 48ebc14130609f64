"""Units of the recording proxy: the upstream connection string, the CBS rewrite, and the
rewriting of host names towards Azure (which no test can reach from here)."""

from __future__ import annotations

import pytest

pytest.importorskip("proton")

from proton import Data, Described, Message, symbol, ulong  # noqa: E402

from sbconform.proxy.frames import Frame, Splitter, decode, encode_frame  # noqa: E402
from sbconform.proxy.interpret import ConnInterp, Recording, read_message  # noqa: E402
from sbconform.proxy.relay import DEFAULT_KEYS, CbsRewriter, UsageError, parse_upstream  # noqa: E402
from sbconform.amqp.sas import TokenError, check_token, make_token  # noqa: E402

AZURE = "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=AZURE-KEY"


class ListSink:
    def __init__(self):
        self.events = []
        self.n = 0

    def op(self):
        self.n += 1
        return self.n

    def now(self):
        return 0

    def write(self, client, op_id, op, phase, time_ms=None, **fields):
        self.events.append((op, phase, fields))


def frame(code: int, fields: list, payload: bytes = b"", ftype: int = 0, channel: int = 0) -> Frame:
    raw = encode_frame(Frame(b"\x00\x00\x00\x08\x02\x00\x00\x00", False, ftype, channel, 2), code, fields, payload)
    return Frame(raw, False, ftype, channel, 2)


def test_upstream_connection_strings():
    azure = parse_upstream(AZURE)
    assert (azure.host, azure.port, azure.tls, azure.authority) == ("contoso.servicebus.windows.net", 5671, True, "contoso.servicebus.windows.net")
    local = parse_upstream("Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;")
    assert (local.host, local.port, local.tls, local.authority) == ("localhost", 5672, False, "localhost:5672")
    with pytest.raises(UsageError, match="no Endpoint"):
        parse_upstream("SharedAccessKeyName=k;SharedAccessKey=v")


def test_cbs_tokens_are_reissued_for_the_upstream_audience_with_its_key():
    rewrite = CbsRewriter(parse_upstream(AZURE), dict(DEFAULT_KEYS))
    name = "sb://localhost:5673/orders"
    request = Message(properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": name},
                      body=make_token(name, "RootManageSharedAccessKey", "SAS_KEY_VALUE"), id="m1")
    out = rewrite(request)
    assert out.properties["name"] == "sb://contoso.servicebus.windows.net/orders"
    assert check_token(out.body, out.properties["name"], {"send": "AZURE-KEY"})
    assert out.id == "m1" and out.properties["operation"] == "put-token"
    # a token the proxy refuses becomes one the upstream refuses
    bad = Message(properties={"operation": "put-token", "name": name}, body=make_token(name, "RootManageSharedAccessKey", "WRONG"))
    refused = rewrite(bad)
    with pytest.raises(TokenError):
        check_token(refused.body, refused.properties["name"], {"send": "AZURE-KEY"})
    assert rewrite.refused == 1


def test_towards_azure_the_host_name_is_the_namespace_s_and_nothing_else_changes():
    rec = Recording(ListSink())
    rec.rewrite_host = "contoso.servicebus.windows.net"
    interp = ConnInterp(rec)
    sasl = frame(0x41, [symbol("ANONYMOUS"), b"", "localhost"], ftype=1)
    changed = Frame(interp.from_client(sasl), False, 1, 0, 2)
    assert decode(changed)[1] == [symbol("ANONYMOUS"), b"", "contoso.servicebus.windows.net"]
    open_ = frame(0x10, ["SBSender-1", "localhost", 1048576])
    changed = Frame(interp.from_client(open_), False, 0, 0, 2)
    assert decode(changed)[1][:3] == ["SBSender-1", "contoso.servicebus.windows.net", 1048576]
    interp.from_client(frame(0x11, [None, 0, 100, 100]))
    target = Described(ulong(0x29), ["amqps://localhost:5673/orders"])
    attach = frame(0x12, ["sender-1", 0, False, 0, 1, Described(ulong(0x28), ["sender-1"]), target])
    changed = decode(Frame(interp.from_client(attach), False, 0, 0, 2))[1]
    assert changed[6].value[0] == "amqps://contoso.servicebus.windows.net/orders"
    assert changed[:5] == decode(attach)[1][:5] and changed[5].value == ["sender-1"]
    source = Described(ulong(0x28), ["amqps://localhost:5673/orders/$management"])
    mgmt = frame(0x12, ["mgmt-1", 1, True, 0, 1, source, Described(ulong(0x29), ["mgmt-1"])])
    changed = decode(Frame(interp.from_client(mgmt), False, 0, 0, 2))[1]
    assert changed[5].value[0] == "amqps://contoso.servicebus.windows.net/orders/$management"


def test_an_emulator_upstream_sees_the_client_s_frames_unchanged():
    rec = Recording(ListSink())
    interp = ConnInterp(rec)
    for f in (frame(0x41, [symbol("ANONYMOUS"), b"", "localhost"], ftype=1), frame(0x10, ["c", "localhost"]),
              frame(0x11, [None, 0, 100, 100]),
              frame(0x12, ["s", 0, False, 0, 1, Described(ulong(0x28), ["s"]), Described(ulong(0x29), ["amqps://localhost:5673/q"])])):
        assert interp.from_client(f) is None


def test_messages_are_read_as_proton_writes_them():
    m = Message(id="id-1", group_id="S", body=b"12345", ttl=2.5, content_type="text/plain", subject="s",
                properties={"k": 1}, annotations={symbol("x-opt-sequence-number"): 7, symbol("x-opt-partition-key"): "pk"})
    m.delivery_count = 2
    got = read_message(m.encode())
    assert (got.message_id, got.session, got.partition_key, got.seq, got.delivery_count) == ("id-1", "S", "pk", 7, 3)
    assert got.args == {"body_size": 5, "ttl": 2500, "content_type": "text/plain", "subject": "s", "properties": {"k": 1}}


def test_splitter_refuses_frames_beyond_its_limit():
    from sbconform.proxy.frames import FrameError

    with pytest.raises(FrameError, match="exceeds"):
        Splitter(max_frame=1024).feed(b"AMQP\x00\x01\x00\x00" + (4096).to_bytes(4, "big") + b"\x02\x00\x00\x00")


def test_a_delivered_message_is_read_without_its_body_and_with_its_dead_letter_reason():
    """The proxy reads a delivered message without copying its body (measured from its
    encoding, large bodies included) and its application properties only for the dead-letter
    reason: the same facts as a full decode."""
    body = b"x" * 70_000  # a data section with a 4-byte size (0xB0)
    m = Message(id="id-2", body=body, properties={"DeadLetterReason": "why", "other": 1},
                annotations={symbol("x-opt-sequence-number"): 9, symbol("x-opt-enqueued-time"): 1_700_000_000_000})
    m.inferred = True  # bytes as a data section
    got = read_message(memoryview(m.encode()), sending=False)
    assert got.seq == 9 and got.message_id == "id-2"
    assert got.result == {"body_size": 70_000, "dead_letter_reason": "why", "enqueued_time_utc": 1_700_000_000_000}
    plain = Message(id="id-3", body=b"abc", properties={"k": "v"})
    plain.inferred = True
    assert read_message(plain.encode(), sending=False).result == {"body_size": 3}


def _amqp_values():
    """Random AMQP values as proton writes them, and what ``values.decode`` should read."""
    import datetime as dt
    import uuid

    from hypothesis import strategies as st
    from proton import char, int32, short, timestamp, ubyte, uint, ushort

    scalars = st.one_of(
        st.none().map(lambda v: (v, None)), st.booleans().map(lambda v: (v, v)),
        st.integers(-2**63, 2**63 - 1).map(lambda v: (v, v)), st.integers(0, 2**64 - 1).map(lambda v: (ulong(v), v)),
        st.integers(0, 2**32 - 1).map(lambda v: (uint(v), v)), st.integers(-2**31, 2**31 - 1).map(lambda v: (int32(v), v)),
        st.integers(0, 255).map(lambda v: (ubyte(v), v)), st.integers(0, 65535).map(lambda v: (ushort(v), v)),
        st.integers(-2**15, 2**15 - 1).map(lambda v: (short(v), v)),
        st.integers(0, 2**45).map(lambda v: (timestamp(v), v)),
        st.text(max_size=300).map(lambda v: (v, v)), st.binary(max_size=300).map(lambda v: (v, v)),
        st.text("abcxyz-:", max_size=20).map(lambda v: (symbol(v), v)),
        st.characters().map(lambda v: (char(v), v)),
        st.uuids().map(lambda v: (v, v)),
        st.floats(allow_nan=False).map(lambda v: (v, v)),
    )
    del dt, uuid

    def compound(inner):
        pairs = st.lists(inner, max_size=6)
        return st.one_of(
            pairs.map(lambda xs: ([a for a, _ in xs], [b for _, b in xs])),
            st.lists(st.tuples(st.text(max_size=8), inner), max_size=6, unique_by=lambda kv: kv[0]).map(
                lambda kvs: ({k: a for k, (a, _) in kvs}, {k: b for k, (_, b) in kvs})),
            st.tuples(st.integers(0, 255), inner).map(
                lambda d: (Described(ulong(d[0]), d[1][0]), values.Described(d[0], d[1][1]))),
        )

    from sbconform.amqp import values

    return st.recursive(scalars, compound, max_leaves=20)


def test_the_kits_decoder_reads_what_proton_writes():
    """``sbconform.amqp.values.decode`` (the proxy's decoder) agrees with proton's encoder on
    random values: every width, compound and described value."""
    from hypothesis import given, settings

    from sbconform.amqp import values

    @settings(max_examples=300, deadline=None)
    @given(_amqp_values())
    def check(pair):
        written, expected = pair
        data = Data()
        data.put_object(written)
        encoded = data.encode()
        got, end = values.decode(encoded + b"\x40", 0)
        assert end == len(encoded)
        assert got == expected

    check()


def test_the_kits_decoder_refuses_truncated_input():
    from sbconform.amqp import values

    data = Data()
    data.put_object(["a" * 300, {"k": b"v" * 10}, Described(ulong(0x70), [True, 5])])
    encoded = data.encode()
    for cut in range(len(encoded)):
        with pytest.raises(values.WireError):
            values.decode(encoded[:cut], 0)


def test_an_entity_the_broker_does_not_describe_leaves_descriptions_on_for_the_others():
    """One attach to a missing entity must not cost every later entity its settings (replay
    would then assume 60-second locks); a failure to describe at all still turns it off."""
    from sbconform.proxy.relay import Describer, parse_upstream
    from sbreference import ErrorCode, ServiceBusError

    class Broker:
        def call(self, op, path):
            if path == "missing":
                raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, "no such entity")
            if path == "broken":
                raise ServiceBusError(ErrorCode.UNAUTHORIZED, "no rights")
            return {"lock_duration": 1000}

    said = []
    upstream = parse_upstream("Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true")
    describer = Describer(upstream, "control", said.append)
    describer.client = Broker()
    assert describer("missing") is None and not describer.off
    assert describer("short") == {"lock_duration": 1000}
    assert describer("broken") is None and describer.off
    assert describer("short") is None  # off: said once, nothing asked any more
    assert len(said) == 2 and "missing" in said[0]


def test_parquet_recordings_rotate_by_size(tmp_path):
    """Rotation measures the file on disk; Parquet rows reach it a row group at a time, so the
    recording's row groups are small enough for a rotation limit to be followed."""
    pytest.importorskip("pyarrow")
    from sbconform.proxy.sink import PARQUET_ROWS, TraceSink
    from sbconform.trace.io import read_events

    sink = TraceSink(tmp_path, "rot", fmt="parquet", rotate_bytes=20_000)
    for i in range(6 * PARQUET_ROWS):
        op = sink.op()
        sink.write("c1", op, "peek", "invoke", entity="q", args={"max_count": 1, "from_seq": i})
    sink.close()
    assert len(sink.files) >= 3, sink.files
    assert sum(len(list(read_events(p))) for p in sink.files) == 6 * PARQUET_ROWS


@pytest.mark.parametrize("code", range(0x10, 0x19))
def test_a_performative_with_a_field_of_the_wrong_type_is_said_unrecognised_not_an_interpreter_failure(code):
    """A symbol where a number belongs (as the random traffic of test_proxy_relay sometimes
    sends: it failed there once with ``int('com.microsoft:session-filter')``): the proxy
    relays the frame and says in the trace that it could not read it, from either side."""
    odd = symbol("com.microsoft:session-filter")
    for position in range(8):
        rec = Recording(ListSink())
        interp = ConnInterp(rec)
        interp.from_client(frame(0x11, [None, 0, 100, 100]))
        interp.from_broker(frame(0x11, [0, 0, 100, 100]))
        fields = [odd if i == position else 0 for i in range(8)]
        interp.from_client(frame(code, fields))  # raises nothing
        interp.from_broker(frame(code, fields))
        said = [f["result"]["unrecognised"] for op, phase, f in rec.sink.events if isinstance(f.get("result"), dict) and "unrecognised" in f["result"]]
        assert all(isinstance(why, str) and why for why in said), said  # each said why
