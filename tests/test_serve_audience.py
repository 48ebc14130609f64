"""A token names the namespace it is for (review finding: a token for another namespace was
accepted and granted this server's entity of the same name).

Service Bus checks a SAS token's audience against the namespace the connection reached: a
token signed with the right key for ``sb://othernamespace.servicebus.windows.net/q`` does not
authorize ``q`` of this namespace. ``sbconform serve`` is one namespace known by whatever name
the client opened its connection to (the AMQP open's hostname, as the SDKs send the namespace's
host); a loopback client may name it by any loopback name (localhost, 127.0.0.1, ::1).
"""

from __future__ import annotations

import pytest

pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection, SyncRequestResponse  # noqa: E402

from sbconform.amqp.sas import make_token, names_this_namespace  # noqa: E402
from serve_support import KEY, KEY_NAME  # noqa: E402
from test_serve_security import InProcess  # noqa: E402


@pytest.fixture(scope="module")
def srv():
    server = InProcess()
    yield server
    server.stop()


def put_token(port: int, name: str, virtual_host: str | None = None) -> int:
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=10, virtual_host=virtual_host)
    try:
        reply = SyncRequestResponse(conn, "$cbs").call(
            Message(body=make_token(name, KEY_NAME, KEY), properties={"operation": "put-token", "type": "jwt", "name": name}))
        return reply.properties["status-code"]
    finally:
        conn.close()


def test_a_token_for_another_namespace_is_refused(srv: InProcess) -> None:
    assert put_token(srv.port, "sb://othernamespace.servicebus.windows.net/open") == 401
    assert put_token(srv.port, "sb:///open") == 401  # no namespace at all


def test_a_token_for_the_namespace_the_connection_opened_to_is_granted(srv: InProcess) -> None:
    assert put_token(srv.port, f"sb://localhost:{srv.port}/open") == 200  # the SDKs' audience for UseDevelopmentEmulator
    assert put_token(srv.port, "sb://127.0.0.1/open") == 200
    host = "mynamespace.servicebus.windows.net"
    assert put_token(srv.port, f"sb://{host}/open", virtual_host=host) == 200
    assert put_token(srv.port, "sb://localhost/open", virtual_host=host) == 401  # it opened to another name


@pytest.mark.parametrize(
    ("audience_host", "opened_to", "same"),
    [
        ("localhost", "localhost", True),
        ("LocalHost", "localhost", True),
        ("127.0.0.1", "localhost", True),
        ("localhost", None, True),
        ("ns.servicebus.windows.net", "NS.servicebus.windows.net", True),
        ("other.servicebus.windows.net", "ns.servicebus.windows.net", False),
        ("other.servicebus.windows.net", "localhost", False),
        ("other.servicebus.windows.net", None, False),
        ("localhost", "ns.servicebus.windows.net", False),
        (None, "localhost", True),  # a name without a host ("q"): the entity of this namespace
        ("", "localhost", False),  # sb:///q: an empty host names no namespace
        ("::1", "[::1]:5672", True),
        ("localhost", "localhost:5672", True),
    ],
)
def test_names_this_namespace(audience_host, opened_to, same) -> None:
    assert names_this_namespace(audience_host, opened_to) is same
