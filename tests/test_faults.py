"""Fault injection on the reference model: an unavailable entity answers with the chosen
error and keeps what it holds."""

from __future__ import annotations

import pytest

from sbreference import ErrorCode, Message, Namespace, ServiceBusError


@pytest.mark.needs("model-internals")
def test_an_unavailable_entity_fails_every_operation_and_keeps_its_messages() -> None:
    ns = Namespace()
    ns.create_queue("q")
    conn = ns.connect()
    ns.send(conn, "q", Message(b"a", message_id="m1"))
    ns.make_unavailable("q", ErrorCode.TIMEOUT, transient=False)
    for operation in (lambda: ns.send(conn, "q", Message(b"b")), lambda: ns.receive(conn, "q"), lambda: ns.peek("q/$DeadLetterQueue")):
        with pytest.raises(ServiceBusError) as info:
            operation()
        assert info.value.code is ErrorCode.TIMEOUT and info.value.transient is False
    ns.make_available("q")
    assert [d.message_id for d in ns.receive(conn, "q")] == ["m1"]
