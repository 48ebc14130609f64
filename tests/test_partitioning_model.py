"""Partitioning facts checked directly on the model and on the target's declarations."""

from __future__ import annotations

import pytest

from sbreference import Message, Namespace


@pytest.mark.clauses("PART-COST-001")
@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("partitioned", [False, True])
def test_a_send_or_a_receive_is_one_billed_operation_however_many_partitions(partitioned: bool) -> None:
    ns = Namespace()
    ns.create_queue("q", enable_partitioning=partitioned)
    conn = ns.connect()
    before = ns.billed_operations
    ns.send(conn, "q", Message(b"x", message_id="m"))
    assert ns.billed_operations - before == 1
    before = ns.billed_operations
    assert len(ns.receive(conn, "q", 1)) == 1
    assert ns.billed_operations - before == 1  # one receive, though up to 16 partitions were asked


def test_the_kit_targets_declare_an_operation_timeout_over_15_seconds(sb_target) -> None:
    """A kit test, credited to no clause: the targets' own declared timeout (a constant of the kit)
    says nothing about a broker, so checking it would grade the kit, not the target."""
    assert sb_target.operation_timeout > 15_000, f"{sb_target.name} uses a {sb_target.operation_timeout} ms operation timeout"


@pytest.mark.clauses("PART-TIMEOUT-001", "PART-NOKEY-002")
@pytest.mark.needs("partitions", "partition-outage")
def test_an_unkeyed_send_with_a_partition_down_completes_well_within_15_seconds(sb_target) -> None:
    """The broker's side of PART-TIMEOUT-001: with a partition down, Service Bus places an unkeyed
    message in another partition in time for a client whose operation timeout is over 15 seconds.
    Observed on the target's own clock: every send completes, each in under 15 seconds."""
    path = sb_target.create_queue("timeout-pq", enable_partitioning=True, lock_duration=5_000)
    try:
        sb_target.make_partition_unavailable(path, 0)
        sender = sb_target.sender(path)
        for i in range(16):
            started = sb_target.now()
            sb_target.send(sender, [Message(b"x", message_id=f"u{i}")])
            took = sb_target.now() - started
            assert took < 15_000, f"send {i} took {took} ms with a partition down"
        sb_target.make_partition_available(path, 0)
    finally:
        sb_target.delete_entity(path)
