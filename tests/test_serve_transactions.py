"""The transaction coordinator of ``sbconform serve`` against bad input (issue: transactions over
AMQP): unknown, discharged, foreign, malformed and unauthorised transactions each get their
documented error, nothing is partially applied, and the server keeps serving."""

from __future__ import annotations

import pytest

pytest.importorskip("proton")  # the sdk extra; make certify installs only the test extra
pytest.importorskip("azure.servicebus")

from proton import Described, ulong  # noqa: E402

from sbreference import ErrorCode, Message, ServiceBusError  # noqa: E402
from sbconform.targets.proton_txn import ProtonTransactionalClient  # noqa: E402
from sbconform.targets.sdk import _code_of_condition  # noqa: E402

from serve_support import KEY, KEY_NAME, Serve  # noqa: E402

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


def test_a_disposition_by_lock_token_inside_a_transaction_waits_for_the_commit(serve: Serve) -> None:
    """The .NET and Java SDKs settle deferred messages by lock token on $management inside a
    transaction: a rollback must undo it (review: it used to be applied at once)."""
    c = client(serve)
    try:
        seed = c.declare()
        c.send(seed, "q", [Message(body=b"m", message_id="mgmt-1")])
        c.discharge(seed, True)
        (got,) = c.receive("q", 1, max_wait=2000)
        token = got.lock_token
        txn = c.declare()
        c.management("q", "com.microsoft:update-disposition", {"disposition-status": "completed", "lock-tokens": [token]}, txn)
        c.discharge(txn, False)  # rolled back: the completion never happened
        c.management("q", "com.microsoft:update-disposition", {"disposition-status": "completed", "lock-tokens": [token]})
        assert drain(c, "q") == []
        with pytest.raises(ServiceBusError) as refused:  # what a transaction cannot hold is refused, not applied
            c.management("q", "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 1}, c.declare())
        assert refused.value.code is ErrorCode.INVALID_OPERATION
    finally:
        c.close()


def test_a_commit_reaches_a_receiver_already_waiting(serve: Serve) -> None:
    import threading
    import time

    waiter, sender = client(serve), client(serve)
    try:
        arrived: list[float] = []

        def wait() -> None:
            got = waiter.receive("other", 1, max_wait=8000)
            arrived.append(time.monotonic() if got else float("inf"))

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.5)
        txn = sender.declare()
        sender.send(txn, "other", [Message(body=b"w", message_id="wake-1")])
        committed = time.monotonic()
        sender.discharge(txn, True)
        thread.join(15)
        assert arrived and arrived[0] - committed < 4, "the committed message reached the waiting receiver only at the end of its wait"
    finally:
        waiter.close()
        sender.close()


def test_a_txn_id_that_is_not_binary_is_unknown_and_the_connection_lives(serve: Serve) -> None:
    from proton import ulong

    c = client(serve)
    try:
        assert fails(c.send, ulong(2 ** 40), "q", [Message(body=b"x", message_id="int-id")]).code is ErrorCode.TRANSACTION_UNKNOWN
        txn = c.declare()  # the same connection still works
        c.discharge(txn, False)
    finally:
        c.close()
    assert serve.alive()


def test_send_via_needs_a_token_for_the_destination_too(serve: Serve) -> None:
    c = client(serve)
    authorized = c._authorize
    c._authorize = lambda path: authorized(path) if path == "q" else None  # a token for the via entity only
    try:
        authorized("q")
        txn = c.declare()
        assert fails(c.send, txn, "other", [Message(body=b"x", message_id="via-1")], "q").code is ErrorCode.UNAUTHORIZED
    finally:
        c.close()



def test_a_control_message_the_coordinator_fails_on_is_rejected_with_the_info_map_the_sdks_read() -> None:
    """Whatever the coordinator fails on is a rejection with a condition that carries the info
    map with the tracking id (the SDKs read the error's third field and fail on a shorter one)."""
    from types import SimpleNamespace

    from proton import Delivery, Message as AmqpMessage

    from sbconform.server import coordinator
    from sbconform.server.values import condition

    class Broken:
        def declare(self, conn):
            raise RuntimeError("boom")

    class FakeDelivery:
        def __init__(self) -> None:
            self.local = SimpleNamespace(condition=None, data=None)
            self.state = None

        def update(self, state) -> None:
            self.state = state

        def settle(self) -> None:
            pass

    dlv = FakeDelivery()
    coordinator.control(SimpleNamespace(transactions=Broken()), 1,
                        AmqpMessage(body=Described(ulong(coordinator.DECLARE), [])).encode(), dlv, condition)
    assert dlv.state == Delivery.REJECTED
    assert dlv.local.condition.name == "amqp:decode-error"
    info = dlv.local.condition.info
    assert info and "com.microsoft:tracking-id" in {str(k) for k in info}, dlv.local.condition


@pytest.mark.clauses("SETTLE-MOD-001")
def test_properties_to_modify_inside_a_transaction_are_refused_not_dropped() -> None:
    """A transactional disposition whose outcome carries properties to modify (the modified
    outcome's annotations, the rejected outcome's info beyond the reason) is refused: the
    model's transactions take none, and dropping them would lose what the client asked."""
    from proton import Described, symbol

    from sbconform.server.coordinator import MODIFIED, REJECTED, settlement_of

    assert settlement_of(Described(MODIFIED, [True, False, None])) == ("abandon", None, None)
    with pytest.raises(ServiceBusError) as refused:
        settlement_of(Described(MODIFIED, [True, False, {symbol("stage"): "retried"}]))
    assert refused.value.code is ErrorCode.ARGUMENT_ERROR
    error = Described(0x1D, [symbol("com.microsoft:dead-letter"), None, {symbol("DeadLetterReason"): "r", symbol("stage"): "x"}])
    with pytest.raises(ServiceBusError):
        settlement_of(Described(REJECTED, [error]))
    plain = Described(0x1D, [symbol("com.microsoft:dead-letter"), None, {symbol("DeadLetterReason"): "r"}])
    assert settlement_of(Described(REJECTED, [plain])) == ("dead_letter", "r", None)
