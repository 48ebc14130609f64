"""The model's send / peek-lock receive / complete cycle (benchmarks/model_cycle.py) keeps no
state per settled message, and what it skips on the way changes no answer."""

from __future__ import annotations

import pytest

from sbreference import Message, Namespace
from sbreference.errors import ServiceBusError


@pytest.mark.parametrize("partitioned", [False, True])
def test_settled_cycles_leave_no_lock_deadlines_behind(partitioned: bool) -> None:
    ns = Namespace()
    ns.create_queue("q", enable_partitioning=partitioned, lock_duration=5_000)
    conn = ns.connect()
    for i in range(500):
        ns.send(conn, "q", Message(b"x", message_id=f"m{i}"))
        (delivery,) = ns.receive(conn, "q", 1)
        ns.complete(conn, "q", delivery.lock_token)
    store = ns.entities["q"].store
    stores = store.partitions if partitioned else [store]
    assert sum(len(s.lock_deadlines) for s in stores) == 0
    # A lock still held after all that expires on time, as a failed delivery (SETTLE-LOCK-005).
    ns.send(conn, "q", Message(b"y", message_id="last"))
    (held,) = ns.receive(conn, "q", 1)
    assert ns.lock_deadlines() == [held.locked_until]
    ns.clock.advance_to(held.locked_until)
    with pytest.raises(ServiceBusError):
        ns.complete(conn, "q", held.lock_token)
    (again,) = ns.receive(conn, "q", 1)
    assert again.message_id == "last" and again.delivery_count == 2


def test_a_renewed_lock_settled_out_of_order_keeps_the_others_deadlines() -> None:
    ns = Namespace()
    ns.create_queue("q", lock_duration=5_000)
    conn = ns.connect()
    ns.send(conn, "q", [Message(b"a", message_id="a"), Message(b"b", message_id="b")])
    first, second = ns.receive(conn, "q", 2)
    ns.clock.advance(1_000)
    ns.renew_lock(conn, "q", first.lock_token)  # first's deadline is now the newest
    ns.complete(conn, "q", first.lock_token)
    assert ns.lock_deadlines() == [second.locked_until]
    ns.clock.advance_to(second.locked_until)
    (back,) = ns.receive(conn, "q", 1)
    assert back.message_id == "b" and back.delivery_count == 2


def test_a_cached_route_is_forgotten_when_the_queue_faults_changes_status_or_goes() -> None:
    ns = Namespace()
    ns.create_queue("q")
    conn = ns.connect()
    ns.send(conn, "q", Message(b"x"))
    (delivery,) = ns.receive(conn, "q", 1)
    ns.make_unavailable("q")
    with pytest.raises(ServiceBusError):
        ns.send(conn, "q", Message(b"x"))
    with pytest.raises(ServiceBusError):
        ns.complete(conn, "q", delivery.lock_token)
    ns.make_available("q")
    ns.complete(conn, "q", delivery.lock_token)
    ns.update("q", status="ReceiveDisabled")  # SETTLE-STATUS-002
    ns.send(conn, "q", Message(b"x"))
    with pytest.raises(ServiceBusError):
        ns.receive(conn, "q", 1)
    ns.update("q", status="Active")
    assert len(ns.receive(conn, "q", 1)) == 1
    ns.delete("q")
    with pytest.raises(ServiceBusError):
        ns.send(conn, "q", Message(b"x"))
    with pytest.raises(ServiceBusError):
        ns.receive(conn, "q", 1)


@pytest.mark.parametrize("partitioned", [False, True])
def test_the_one_message_checks_refuse_what_the_batch_checks_refuse(partitioned: bool) -> None:
    """check_one's short-header shortcut (a header of at most 128 bytes holds no ID over 128
    characters, SETTLE-SEND-008) leaves every refusal to ``check``: IDs of 128 characters pass,
    129 do not, whether the rest of the header is short or long."""
    ns = Namespace()
    ns.create_queue("q", enable_partitioning=partitioned)
    conn = ns.connect()
    for field in ("message_id", "partition_key"):
        for extra in ({}, {"application_properties": {"k": "v" * 500}}):
            ns.send(conn, "q", Message(b"x", **{field: "i" * 128}, **extra))
            with pytest.raises(ServiceBusError) as refused:
                ns.send(conn, "q", Message(b"x", **{field: "i" * 129}, **extra))
            assert "129 characters" in str(refused.value)
    with pytest.raises(ServiceBusError):  # a header property over its 32 KB (SETTLE-SEND-009)
        ns.send(conn, "q", Message(b"x", application_properties={"k": "v" * (33 * 1024)}))


def test_partition_lock_tokens_are_unique_across_partitioned_entities_and_tell_their_partition() -> None:
    """A partition's tokens come from the namespace's counter for its index (no Python call per
    token): still unique among every partitioned queue's locks, and a token of another queue is
    lock-lost here (SETTLE-LOCK-011), as with the shared counter."""
    from sbreference.partitioning import TOKEN_STRIDE

    ns = Namespace()
    for name in ("a", "b"):
        ns.create_queue(name, enable_partitioning=True)
    conn = ns.connect()
    tokens = {}
    for name in ("a", "b"):
        for i in range(40):
            ns.send(conn, name, Message(b"x", partition_key=f"k{i}"))
        for d in ns.receive(conn, name, 40):
            assert d.lock_token % TOKEN_STRIDE == d.partition
            tokens[d.lock_token] = name
    assert len(tokens) == 80
    token_of_a = next(t for t, name in tokens.items() if name == "a")
    with pytest.raises(ServiceBusError):
        ns.complete(conn, "b", token_of_a)
    ns.complete(conn, "a", token_of_a)
