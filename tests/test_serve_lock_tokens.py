"""Lock tokens cannot be guessed (review finding: they were a global counter, ...0006, ...0007).

Service Bus lock tokens are GUIDs no client can predict, and a lock token is all it takes to
settle or renew a message through ``$management`` from any receiver of the entity
(SETTLE-LOCK-011). ``sbconform serve`` counted them up, so a client authorized on an entity
could settle another client's messages by adding one to its own token. Each token on the
wire now carries a keyed MAC of the model's token: one forged from another names no lock.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from proton import Array, Data, Message, UNDESCRIBED  # noqa: E402
from proton.utils import BlockingConnection, SyncRequestResponse  # noqa: E402

from sbconform.amqp.sas import make_token  # noqa: E402
from sbconform.server.values import lock_tag, lock_uuid, model_token  # noqa: E402
from serve_support import KEY, KEY_NAME  # noqa: E402
from test_serve_security import InProcess  # noqa: E402


def test_a_wire_token_reads_back_as_its_lock_and_a_forged_one_as_none() -> None:
    for token in (1, 2, 3, 2**40 + 7, 2**64 - 1):
        assert model_token(lock_uuid(token)) == token
        assert lock_tag(token) == lock_uuid(token).bytes_le
    one, two = lock_uuid(1).int, lock_uuid(2).int
    assert one >> 64 == 1 and two >> 64 == 2
    assert (one ^ two) & (2**64 - 1), "the low halves of two tokens must not follow from each other"
    forged = uuid.UUID(int=(2 << 64) | (one & (2**64 - 1)))  # the next count, with the first one's MAC
    assert model_token(forged) == 0
    assert model_token(uuid.UUID(int=2)) == 0  # the counter alone, as the tokens used to be


def _management(conn: BlockingConnection, port: int, path: str) -> SyncRequestResponse:
    name = f"sb://localhost:{port}/{path}"
    reply = SyncRequestResponse(conn, "$cbs").call(
        Message(body=make_token(name, KEY_NAME, KEY), properties={"operation": "put-token", "type": "jwt", "name": name}))
    assert reply.properties["status-code"] == 200
    return SyncRequestResponse(conn, f"{path}/$management")


def _renew(mgmt: SyncRequestResponse, token: uuid.UUID) -> int:
    reply = mgmt.call(Message(body={"lock-tokens": Array(UNDESCRIBED, Data.UUID, token)},
                              properties={"operation": "com.microsoft:renew-lock"}))
    return reply.properties["statusCode"]


def test_a_lock_token_guessed_from_another_renews_nothing() -> None:
    srv = InProcess()
    try:
        owner = BlockingConnection(f"amqp://127.0.0.1:{srv.port}", allowed_mechs="ANONYMOUS", timeout=10)
        other = BlockingConnection(f"amqp://127.0.0.1:{srv.port}", allowed_mechs="ANONYMOUS", timeout=10)
        try:
            _management(owner, srv.port, "open")
            sender = owner.create_sender("open")
            for i in range(2):
                sender.send(Message(body=f"m{i}", id=f"m{i}"))
            receiver = owner.create_receiver("open", credit=2)
            receiver.receive(timeout=5)
            receiver.receive(timeout=5)
            mgmt = _management(other, srv.port, "open")
            first = srv.on_loop(lambda: min(d.lock_token for d in srv.server.namespace.peek("open", 1, 10)))  # the model's
            genuine = lock_uuid(first)
            assert _renew(mgmt, genuine) == 200  # SETTLE-LOCK-011: any receiver of the entity may renew by token
            guessed = uuid.UUID(int=((first + 1) << 64) | (genuine.int & (2**64 - 1)))
            assert _renew(mgmt, guessed) == 410  # MessageLockLost: no such lock
            assert _renew(mgmt, uuid.UUID(int=first + 1)) == 410  # the token as a counter
        finally:
            owner.close()
            other.close()
    finally:
        srv.stop()


MALFORMED = [
    {"lock-tokens": "not-a-list"},
    {"lock-tokens": 7},
    {"lock-tokens": None},
    {"lock-tokens": ["0b8e6c2a-0000-0000-0000-000000000000"]},  # strings, not uuids
    {"lock-tokens": [b"\x00" * 16]},
    {"lock-tokens": Array(UNDESCRIBED, Data.LONG, 1, 2)},
    {"lock-tokens": [{"a": 1}]},
    {"lock-token": Array(UNDESCRIBED, Data.UUID, uuid.uuid4())},  # a misspelt key
    {},
    "a string body",
    None,
]


@pytest.mark.parametrize("operation", ["com.microsoft:renew-lock", "com.microsoft:update-disposition"])
def test_malformed_lock_tokens_in_management_get_a_client_error_and_harm_nothing(operation: str) -> None:
    """A hostile or careless client's lock tokens of the wrong type or shape: each answer is
    400 (bad request) or 410 (no such lock), never 500, and the genuine lock still renews."""
    srv = InProcess()
    try:
        conn = BlockingConnection(f"amqp://127.0.0.1:{srv.port}", allowed_mechs="ANONYMOUS", timeout=10)
        try:
            mgmt = _management(conn, srv.port, "open")
            conn.create_sender("open").send(Message(body="m", id="m"))
            conn.create_receiver("open", credit=1).receive(timeout=5)
            token = lock_uuid(srv.on_loop(lambda: min(d.lock_token for d in srv.server.namespace.peek("open", 1, 10))))
            for body in MALFORMED:
                if isinstance(body, dict) and operation.endswith("update-disposition"):
                    body = {**body, "disposition-status": "completed"}
                reply = mgmt.call(Message(body=body, properties={"operation": operation}))
                assert reply.properties["statusCode"] in (400, 410), (body, reply.properties)
            # an empty array is a bad request too (test_serve_adversary3: lock-tokens is a non-empty array of uuid)
            reply = mgmt.call(Message(body={"lock-tokens": Array(UNDESCRIBED, Data.UUID), "disposition-status": "completed"},
                                      properties={"operation": operation}))
            assert reply.properties["statusCode"] == 400
            assert _renew(mgmt, token) == 200
        finally:
            conn.close()
    finally:
        srv.stop()
