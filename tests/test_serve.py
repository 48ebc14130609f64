"""``sbconform serve`` on the wire: configuration, authentication, batches, bad input, load.

Each module starts its own ``sbconform serve`` child process on a free port; the
azure-servicebus SDK and raw sockets talk to it. Skipped (with the reason) when the sdk
extra is not installed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402
from azure.servicebus.exceptions import (  # noqa: E402
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sbconform.server import ConfigError, config_json, load_config, parse_config  # noqa: E402
from sbconform.amqp.sas import make_token  # noqa: E402
from sbconform.amqp.wire import BATCH_FORMAT, FrameScanner, data_sections  # noqa: E402

from serve_support import KEY, KEY_NAME, Recorder, Serve, connection_string, raw_exchange  # noqa: E402

CONFIG = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbconform-tests",
                "Queues": [
                    {"Name": "keep", "Properties": {"LockDuration": "PT5S"}},
                    {"Name": "fuzz", "Properties": {"LockDuration": "PT5S"}},
                    {"Name": "load", "Properties": {"LockDuration": "PT5S"}},
                    {"Name": "auth", "Properties": {}},
                    {"Name": "tiny", "Properties": {"MaxMessageSizeInKilobytes": 64}},
                    {"Name": "relay", "Properties": {}},
                ],
                "Topics": [{"Name": "news", "Properties": {}, "Subscriptions": [{"Name": "all", "Properties": {}}]}],
            }
        ]
    }
}



@pytest.fixture(scope="module")
def serve():
    server = Serve(CONFIG)
    yield server
    server.stop()
    assert not any("Traceback" in line for line in server.output), "".join(server.output)


def client(serve: Serve, **kwargs) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(connection_string(serve.port, **kwargs), retry_total=0)


# ---------------------------------------------------------------- config
def test_ready_quickly(serve: Serve) -> None:
    assert serve.ready_after < 3.0, f"ready after {serve.ready_after:.2f} s (interpreter start included)"


def test_config_errors_name_the_json_path(tmp_path) -> None:
    bad = json.loads(json.dumps(CONFIG))
    bad["UserConfig"]["Namespaces"][0]["Queues"][2]["Properties"]["LockDuration"] = "one minute"
    with pytest.raises(ConfigError, match=r"UserConfig\.Namespaces\[0\]\.Queues\[2\]\.Properties\.LockDuration"):
        parse_config(bad, "Config.json")
    bad["UserConfig"]["Namespaces"][0]["Queues"][2]["Properties"] = {"LockDurations": "PT1M"}
    with pytest.raises(ConfigError, match=r"Queues\[2\]\.Properties\.LockDurations: unknown property"):
        parse_config(bad, "Config.json")
    path = tmp_path / "Config.json"
    path.write_text('{"UserConfig": {"Namespaces": [}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"Config\.json:1:\d+: not valid JSON"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"PartitionCount"):
        parse_config({"UserConfig": {"Namespaces": [{"Name": "n", "PartitionCount": 3}]}})


def test_config_round_trips_and_builds_the_namespace() -> None:
    config = parse_config(CONFIG)
    again = parse_config(config_json(config))
    assert again.queues == config.queues and again.topics == config.topics
    ns = config.build()
    assert ns.describe("keep").lock_duration == 5000
    assert ns.describe("tiny").max_message_size == 64 * 1024
    assert ns.exists("news/Subscriptions/all")


# ---------------------------------------------------------- authentication
def test_the_emulator_connection_string_works(serve: Serve) -> None:
    with client(serve) as c, c.get_queue_sender("auth") as sender:
        sender.send_messages(ServiceBusMessage("ok"))
    with client(serve) as c, c.get_queue_receiver("auth", receive_mode="receiveanddelete") as r:
        assert [str(m) for m in r.receive_messages(1, max_wait_time=5)] == ["ok"]


def test_a_wrong_key_is_refused(serve: Serve) -> None:
    for kwargs in ({"key": "not-the-key"}, {"key_name": "NoSuchKeyName"}):
        with pytest.raises((ServiceBusAuthenticationError, ServiceBusAuthorizationError)):
            with client(serve, **kwargs) as c, c.get_queue_sender("auth") as sender:
                sender.send_messages(ServiceBusMessage("nope"))


@pytest.mark.parametrize("case", ["expired", "foreign-audience"])
def test_expired_or_foreign_tokens_are_refused(serve: Serve, case: str) -> None:
    from azure.core.credentials import AzureSasCredential

    audience = f"sb://localhost:{serve.port}/auth" if case == "expired" else "sb://elsewhere.servicebus.windows.net/auth"
    expiry = int(time.time()) - 60 if case == "expired" else None
    token = make_token(audience, KEY_NAME, KEY, expiry)
    c = ServiceBusClient(f"localhost:{serve.port}", AzureSasCredential(token), retry_total=0, use_tls=False)
    with pytest.raises((ServiceBusAuthenticationError, ServiceBusAuthorizationError)):
        with c, c.get_queue_sender("auth") as sender:
            sender.send_messages(ServiceBusMessage("nope"))


def test_unknown_entity_and_oversize(serve: Serve) -> None:
    with client(serve) as c:
        with pytest.raises(MessagingEntityNotFoundError):
            with c.get_queue_sender("no-such-queue") as sender:
                sender.send_messages(ServiceBusMessage("x"))
        with c.get_queue_sender("tiny") as sender:
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"x" * 70_000))
            sender.send_messages(ServiceBusMessage(b"x" * 1000))  # the link still works


# ----------------------------------------------------------------- batches
def _proton_send(port: int, address: str, body: bytes) -> None:
    """One transfer through proton (message format 0), authenticated on $cbs first."""
    from proton import Message
    from proton.utils import BlockingConnection, SyncRequestResponse

    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=10)
    try:
        cbs = SyncRequestResponse(conn, "$cbs")
        name = f"sb://localhost:{port}/{address}"
        reply = cbs.call(Message(body=make_token(name, KEY_NAME, KEY), properties={"operation": "put-token", "type": "jwt", "name": name}))
        assert reply.properties["status-code"] == 200
        sender = conn.create_sender(address)
        message = Message(body=body)
        message.inferred = True
        sender.send(message)
    finally:
        conn.close()


def test_a_batch_is_recognised_by_its_message_format_not_its_content(serve: Serve) -> None:
    from proton import Message

    inner = []
    for i in range(3):
        m = Message(body=f"part{i}".encode(), id=f"part{i}")
        m.inferred = True
        inner.append(m.encode())
    # one data section holding what looks like an encoded message, sent as an ordinary transfer
    _proton_send(serve.port, "keep", inner[0])
    with client(serve) as c, c.get_queue_receiver("keep", receive_mode="receiveanddelete") as r:
        got = r.receive_messages(5, max_wait_time=3)
    assert len(got) == 1 and b"".join(got[0].body) == inner[0], "an ordinary transfer was taken for a batch"
    # the SDK's batches (format 0x80013700) are split into their messages
    with client(serve) as c:
        with c.get_queue_sender("keep") as sender:
            batch = sender.create_message_batch()
            for i in range(3):
                batch.add_message(ServiceBusMessage(f"b{i}", message_id=f"b{i}"))
            sender.send_messages(batch)
        with c.get_queue_receiver("keep", receive_mode="receiveanddelete") as r:
            got = []
            while len(got) < 3:
                more = r.receive_messages(5, max_wait_time=3)
                if not more:
                    break
                got += more
    assert [m.message_id for m in got] == ["b0", "b1", "b2"]


def test_the_scanner_reads_message_formats() -> None:
    # an ATTACH naming handle 0 "L", then a TRANSFER on handle 0 with tag b"t1" in the batch format
    attach = bytes.fromhex("00 53 12 c0 07 03 a1 01 4c 43 41".replace(" ", ""))
    transfer = b"\x00\x53\x14\xc0\x0d\x04\x43\x43\xa0\x02t1\x70" + BATCH_FORMAT.to_bytes(4, "big")

    def frame(body: bytes) -> bytes:
        return (8 + len(body)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body

    stream = b"AMQP\x00\x01\x00\x00" + frame(attach) + frame(transfer)
    for cut in (1, 5, 9, 17, len(stream)):  # however the bytes arrive
        scanner = FrameScanner()
        for i in range(0, len(stream), cut):
            scanner.feed(stream[i:i + cut])
        assert scanner.message_format("L", b"t1") == BATCH_FORMAT
    assert data_sections(b"\x00\x53\x75\xa0\x02hi\x00\x53\x75\xa0\x01!") == [b"hi", b"!"]


# ------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def recorded(serve: Serve) -> bytes:
    """What the SDK sends to open a connection, authenticate and send one message to 'fuzz'."""
    proxy = Recorder(serve.port)
    c = ServiceBusClient.from_connection_string(connection_string(proxy.port), retry_total=0)
    with c, c.get_queue_sender("fuzz") as sender:
        sender.send_messages(ServiceBusMessage("recorded", message_id="recorded"))
    proxy.thread.join(10)
    assert proxy.sent.startswith(b"AMQP\x03\x01\x00\x00")
    return bytes(proxy.sent)


@pytest.fixture(scope="module")
def kept(serve: Serve) -> list[str]:
    """Messages accepted before the fuzzing: none may be lost."""
    ids = [f"kept-{i}" for i in range(20)]
    with client(serve) as c, c.get_queue_sender("load") as sender:
        for mid in ids:
            sender.send_messages(ServiceBusMessage(mid, message_id=mid))
    return ids


def _still_serving(serve: Serve, kept: list[str]) -> None:
    assert serve.alive(), "the server died:\n" + "".join(serve.output)
    with client(serve) as c, c.get_queue_receiver("load") as r:
        seen = []
        start = 1
        while True:
            page = r.peek_messages(250, sequence_number=start)
            if not page:
                break
            seen += [m.message_id for m in page]
            start = page[-1].sequence_number + 1
    assert [m for m in seen if m.startswith("kept-")] == kept, f"accepted messages lost: {seen}"


def test_a_message_reaches_a_receiver_waiting_on_another_connection_at_once(serve: Serve) -> None:
    """A send on one connection serves a receiver waiting on another in the same turn of the
    loop (the receiver's connection is flushed then, not at the next once-a-second sweep)."""
    with client(serve) as receiving, client(serve) as sending, \
            receiving.get_queue_receiver("relay", prefetch_count=0) as receiver, sending.get_queue_sender("relay") as sender:
        sender.send_messages(ServiceBusMessage("warm-up"))  # both links open
        for m in receiver.receive_messages(1, max_wait_time=5):
            receiver.complete_message(m)
        latencies = []
        for i in range(5):
            got: list = []
            waiting = threading.Thread(target=lambda: got.extend(receiver.receive_messages(1, max_wait_time=10)))
            waiting.start()
            time.sleep(0.3)  # the receiver's credit is out: it waits on the server
            sent = time.monotonic()
            sender.send_messages(ServiceBusMessage(f"m{i}"))
            waiting.join(15)
            latencies.append(time.monotonic() - sent)
            assert [str(m) for m in got] == [f"m{i}"]
            receiver.complete_message(got[0])
    assert max(latencies) < 0.5, latencies


@settings(max_examples=200, deadline=None, derandomize=True)
@given(token=st.integers(1, 2**64 - 1))
def test_a_delivery_tag_is_the_lock_token_as_dotnet_guid_bytes(token: int) -> None:
    from sbconform.server.values import lock_tag, lock_uuid

    assert lock_tag(token) == lock_uuid(token).bytes_le


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FUZZ
@given(data=st.binary(min_size=1, max_size=2000))
def test_garbage_bytes(serve: Serve, kept: list[str], data: bytes) -> None:
    raw_exchange(serve.port, data, wait=0.05)
    raw_exchange(serve.port, b"AMQP\x03\x01\x00\x00" + data, wait=0.05)
    assert serve.alive(), "".join(serve.output)


@FUZZ
@given(data=st.data())
def test_truncated_and_mutated_frames(serve: Serve, kept: list[str], recorded: bytes, data) -> None:
    cut = data.draw(st.integers(8, len(recorded)), label="cut")
    stream = bytearray(recorded[:cut])
    for _ in range(data.draw(st.integers(0, 6), label="mutations")):
        where = data.draw(st.integers(0, len(stream) - 1), label="where")
        stream[where] = data.draw(st.integers(0, 255), label="byte")
    raw_exchange(serve.port, bytes(stream), wait=0.05)
    assert serve.alive(), "".join(serve.output)


def test_the_server_keeps_serving_and_loses_nothing_after_fuzzing(serve: Serve, kept: list[str], recorded: bytes) -> None:
    """Runs after the two fuzz tests above (file order)."""
    _still_serving(serve, kept)


def test_abrupt_disconnects_lose_no_accepted_message(serve: Serve, kept: list[str], recorded: bytes) -> None:
    for cut in range(8, len(recorded), max(1, len(recorded) // 40)):
        with socket.create_connection(("127.0.0.1", serve.port)) as sock:
            sock.sendall(recorded[:cut])
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    _still_serving(serve, kept)


def test_200_concurrent_connections(serve: Serve) -> None:
    """200 clients connected at once, each authenticated on $cbs with a sender link: every
    message each sends is stored, and the SDK is served meanwhile."""
    from unittest import mock

    from proton import Message, SSLUnavailable
    from proton.utils import BlockingConnection, SyncRequestResponse

    with client(serve) as c, c.get_queue_receiver("fuzz", receive_mode="receiveanddelete") as r:
        while r.receive_messages(250, max_wait_time=0.5):
            pass  # start from an empty queue
    count = 200
    name = f"sb://localhost:{serve.port}/fuzz"
    token = make_token(name, KEY_NAME, KEY)
    connections, senders = [], []
    try:
        for _ in range(count):
            # amqp:// only: each connection's own container skips building the TLS domains it would
            # never use (two OpenSSL contexts each: most of this test's time, 12 of its 17 s)
            with mock.patch("proton._reactor.SSLConfig", side_effect=SSLUnavailable):
                conn = BlockingConnection(f"amqp://127.0.0.1:{serve.port}", allowed_mechs="ANONYMOUS", timeout=20)
            connections.append(conn)
            reply = SyncRequestResponse(conn, "$cbs").call(
                Message(body=token, properties={"operation": "put-token", "type": "jwt", "name": name}))
            assert reply.properties["status-code"] == 200
            senders.append(conn.create_sender("fuzz"))
        for i, sender in enumerate(senders):  # all 200 still open
            message = Message(body=f"c{i}".encode(), id=f"c{i}")
            message.inferred = True
            sender.send(message)
        with client(serve) as c, c.get_queue_receiver("fuzz", receive_mode="receiveanddelete") as r:
            got: list[str] = []
            deadline = time.monotonic() + 20
            while len(got) < count and time.monotonic() < deadline:
                got += [m.message_id for m in r.receive_messages(250, max_wait_time=1)]
    finally:
        for conn in connections:
            conn.close()
    assert sorted(got) == sorted(f"c{i}" for i in range(count)), f"{len(got)} of {count} messages stored"


def test_a_config_may_forward_to_an_entity_listed_after_its_source() -> None:
    """Forwarding is set once every entity exists (a queue forwarding to a topic, listed first)."""
    from sbconform.server.config import parse_config

    config = parse_config({"UserConfig": {"Namespaces": [{"Name": "n",
        "Queues": [{"Name": "a", "Properties": {"ForwardTo": "t"}}, {"Name": "b", "Properties": {}}],
        "Topics": [{"Name": "t", "Properties": {}, "Subscriptions": [{"Name": "s", "Properties": {"ForwardTo": "b"}}]}]}]}})
    ns = config.build()
    assert ns.describe("a").forward_to == "t" and ns.describe("t/Subscriptions/s").forward_to == "b"


def test_a_config_forwards_dead_lettered_messages() -> None:
    """ForwardDeadLetteredMessagesTo in Config.json is applied (SETTLE-FWD-002); it used to be ignored."""
    from sbconform.server.config import parse_config

    config = parse_config({"UserConfig": {"Namespaces": [{"Name": "n",
        "Queues": [{"Name": "a", "Properties": {"ForwardDeadLetteredMessagesTo": "b"}}, {"Name": "b", "Properties": {}}],
        "Topics": [{"Name": "t", "Properties": {}, "Subscriptions": [
            {"Name": "s", "Properties": {"ForwardDeadLetteredMessagesTo": "b"}}]}]}]}})
    ns = config.build()
    assert ns.describe("a").forward_dead_lettered_messages_to == "b"
    assert ns.describe("t/Subscriptions/s").forward_dead_lettered_messages_to == "b"
