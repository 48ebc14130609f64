"""The transaction coordinator of ``sbconform serve`` against bad input (issue: transactions over
AMQP): unknown, discharged, foreign, malformed and unauthorised transactions each get their
documented error, nothing is partially applied, and the server keeps serving."""

from __future__ import annotations

import pytest
from proton import Described, ulong

from reference import ErrorCode, Message, ServiceBusError
from sbconform.targets.proton_txn import ProtonTransactionalClient
from sbconform.targets.sdk import _code_of_condition

from serve_support import KEY, KEY_NAME, Serve

pytest.importorskip("azure.servicebus")

CONFIG = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
    {"Name": "q", "Properties": {"LockDuration": "PT30S"}},
    {"Name": "other", "Properties": {}},
]}]}}


@pytest.fixture(scope="module")
def serve():
    server = Serve(CONFIG)
    yield server
    server.stop()


def client(serve: Serve, **kw) -> ProtonTransactionalClient:
    return ProtonTransactionalClient("127.0.0.1", serve.port, KEY_NAME, KEY, timeout=10, condition_code=_code_of_condition, **kw)


def fails(call, *args) -> ServiceBusError:
    with pytest.raises(ServiceBusError) as e:
        call(*args)
    return e.value


def drain(c: ProtonTransactionalClient, path: str) -> list[str]:
    return [m.message_id for m in c.receive(path, 50, max_wait=300)]


def test_garbage_and_foreign_transaction_ids_are_unknown_and_store_nothing(serve: Serve) -> None:
    c, d = client(serve), client(serve)
    try:
        assert fails(c.send, b"garbage", "q", [Message(body=b"x", message_id="g1")]).code is ErrorCode.TRANSACTION_UNKNOWN
        assert fails(c.send, (99).to_bytes(8, "big"), "q", [Message(body=b"x", message_id="g2")]).code is ErrorCode.TRANSACTION_UNKNOWN
        txn = d.declare()
        assert fails(c.send, txn, "q", [Message(body=b"x", message_id="g3")]).code is ErrorCode.TRANSACTION_UNKNOWN
        assert fails(c.discharge, txn, True).code is ErrorCode.TRANSACTION_UNKNOWN  # not c's to discharge
        d.discharge(txn, True)
        assert fails(d.discharge, txn, True).code is ErrorCode.TRANSACTION_UNKNOWN  # already discharged
        assert drain(c, "q") == []
    finally:
        c.close()
        d.close()


def test_malformed_control_messages_are_rejected_and_the_server_keeps_serving(serve: Serve) -> None:
    c = client(serve)
    try:
        assert fails(c._control, Described(ulong(0x99), []), "odd").code is ErrorCode.ARGUMENT_ERROR
        assert fails(c._control, Described(ulong(0x32), []), "discharge of nothing").code is ErrorCode.TRANSACTION_UNKNOWN
        assert fails(c._control, "not described", "plain").code is ErrorCode.ARGUMENT_ERROR
        txn = c.declare()  # the same coordinator link still works
        c.send(txn, "q", [Message(body=b"ok", message_id="ok1")])
        c.discharge(txn, True)
        assert drain(c, "q") == ["ok1"]
    finally:
        c.close()
    assert serve.alive()


def test_a_coordinator_without_a_token_is_refused(serve: Serve) -> None:
    c = client(serve)
    c._authorize = lambda path: None  # never put a token
    try:
        assert fails(c.declare).code is ErrorCode.UNAUTHORIZED
    finally:
        c.close()


def test_a_dropped_connection_takes_its_transaction_with_it(serve: Serve) -> None:
    c, other = client(serve), client(serve)
    try:
        txn = c.declare()
        c.send(txn, "other", [Message(body=b"1", message_id="t1")])
        c.send(txn, "other", [Message(body=b"2", message_id="t2")])
        # a send to a missing entity is refused when its link attaches; the transaction lives on
        assert fails(c.send, txn, "nosuch", [Message(body=b"3", message_id="t3")]).code is ErrorCode.ENTITY_NOT_FOUND
        c.drop()  # the connection goes: the transaction with it
        assert fails(c.discharge, txn, False).code is ErrorCode.TRANSACTION_UNKNOWN
        assert drain(other, "other") == []
    finally:
        c.close()
        other.close()
