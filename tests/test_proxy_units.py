"""Units of the recording proxy: the upstream connection string, the CBS rewrite, and the
rewriting of host names towards Azure (which no test can reach from here)."""

from __future__ import annotations

import pytest

pytest.importorskip("proton")

from proton import Data, Described, Message, symbol, ulong  # noqa: E402

from sbconform.proxy.frames import Frame, Splitter, decode, encode_frame  # noqa: E402
from sbconform.proxy.interpret import ConnInterp, Recording, read_message  # noqa: E402
from sbconform.proxy.relay import DEFAULT_KEYS, CbsRewriter, UsageError, parse_upstream  # noqa: E402
from sbconform.server.sas import TokenError, check_token, make_token  # noqa: E402

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
