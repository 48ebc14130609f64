"""Partitioning facts checked directly on the model and on the target's declarations."""

from __future__ import annotations

import pytest

from reference import Message, Namespace


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


@pytest.mark.clauses("PART-TIMEOUT-001")
def test_the_target_uses_an_operation_timeout_over_15_seconds(sb_target) -> None:
    assert sb_target.operation_timeout > 15_000, f"{sb_target.name} uses a {sb_target.operation_timeout} ms operation timeout"
