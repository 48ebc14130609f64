"""Helpers for the recording proxy's tests and benchmark: an in-process ``sbconform serve``
(optionally over a deliberately broken namespace), the proxy on a thread, SDK flows."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from sbconform.server import parse_config
from sbconform.server.server import Server

UPSTREAM_KEY_NAME, UPSTREAM_KEY = "upstream", "UPSTREAM-ONLY-SECRET"
CLIENT_KEY_NAME, CLIENT_KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"  # the proxy's default keys


def config(lock: str = "PT30S") -> dict:
    return {"UserConfig": {"Namespaces": [{
        "Name": "proxy-tests",
        "SharedAccessKeys": [{"KeyName": UPSTREAM_KEY_NAME, "Key": UPSTREAM_KEY}],
        "Queues": [
            {"Name": "work", "Properties": {"LockDuration": lock, "MaxDeliveryCount": 5}},
            {"Name": "short", "Properties": {"LockDuration": "PT1S"}},
            {"Name": "sess", "Properties": {"LockDuration": lock, "RequiresSession": True}},
            {"Name": "bench", "Properties": {"LockDuration": "PT60S"}},
        ],
    }]}}


def connection_string(port: int, key_name: str = CLIENT_KEY_NAME, key: str = CLIENT_KEY) -> str:
    return f"Endpoint=sb://localhost:{port};SharedAccessKeyName={key_name};SharedAccessKey={key};UseDevelopmentEmulator=true;"


@contextmanager
def served(namespace_class: type | None = None, lock: str = "PT30S") -> Iterator[Server]:
    """``sbconform serve`` on a thread; ``namespace_class`` (a subclass of the model's
    Namespace) swaps in a broken behaviour."""
    cfg = parse_config(config(lock))
    ns = cfg.build()
    if namespace_class is not None:
        ns.__class__ = namespace_class
    server = Server(cfg, "127.0.0.1", 0, namespace=ns)
    server.start()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(10)


def receive_n(receiver, n: int, wait: float = 10.0) -> list:
    """Exactly ``n`` messages (the SDK may return fewer per call), deadline-based."""
    got: list = []
    deadline = time.monotonic() + wait
    while len(got) < n and time.monotonic() < deadline:
        got += receiver.receive_messages(max_message_count=n - len(got), max_wait_time=max(0.5, min(2.0, deadline - time.monotonic())))
    return got


def python_flows(cs: str) -> dict:
    """The Python SDK's everyday operations, each once at least; returns what it saw."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue

    seen: dict = {}
    with ServiceBusClient.from_connection_string(cs) as client:
        with client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage("one", message_id="w1", application_properties={"k": 1}))
            sender.send_messages([ServiceBusMessage(f"b{i}", message_id=f"w{i}") for i in (2, 3, 4)])
            batch = sender.create_message_batch()
            for i in (5, 6):
                batch.add_message(ServiceBusMessage(f"b{i}", message_id=f"w{i}"))
            sender.send_messages(batch)
        with client.get_queue_receiver("work") as receiver:
            got = receive_n(receiver, 6)
            seen["first"] = [m.message_id for m in got]
            by_id = {m.message_id: m for m in got}
            receiver.complete_message(by_id["w1"])
            receiver.renew_message_lock(by_id["w2"])
            receiver.complete_message(by_id["w2"])
            receiver.abandon_message(by_id["w3"])
            receiver.defer_message(by_id["w4"])
            receiver.dead_letter_message(by_id["w5"], reason="bad", error_description="flows")
            receiver.complete_message(by_id["w6"])
            again = receive_n(receiver, 1)
            seen["abandoned_again"] = [(m.message_id, m.delivery_count) for m in again]
            for m in again:
                receiver.complete_message(m)
            deferred = receiver.receive_deferred_messages([by_id["w4"].sequence_number])
            receiver.complete_message(deferred[0])
            seen["peek"] = [m.message_id for m in receiver.peek_messages(max_message_count=5)]
        with client.get_queue_receiver("work", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = receive_n(dlq, 1)
            seen["dead"] = [(m.message_id, m.dead_letter_reason) for m in dead]
            for m in dead:
                dlq.complete_message(m)
        with client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage("rad", message_id="w7"))
        with client.get_queue_receiver("work", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as rad:
            seen["rad"] = [m.message_id for m in receive_n(rad, 1)]
        with client.get_queue_sender("sess") as sender:
            sender.send_messages([ServiceBusMessage(f"s{i}", message_id=f"s{i}", session_id="A") for i in (1, 2)])
        with client.get_queue_receiver("sess", session_id="A") as sr:
            sr.session.set_state(b"state-1")
            seen["state"] = sr.session.get_state()
            sr.session.renew_lock()
            got = receive_n(sr, 2)
            seen["session"] = [m.message_id for m in got]
            for m in got:
                sr.complete_message(m)
    return seen
