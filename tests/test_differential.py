"""The differential machine: the target under test against the reference model."""

from __future__ import annotations

import pytest

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from realtime import run_machine_on
from sbconform.testing.stateful import DifferentialMachine


@pytest.mark.clauses(
    "SETTLE-SEND-001", "SETTLE-RECV-001", "SETTLE-RECV-002", "SETTLE-LOCK-001", "SETTLE-LOCK-003",
    "SETTLE-LOCK-004", "SETTLE-LOCK-005", "SETTLE-LOCK-007", "SETTLE-LOCK-008", "SETTLE-LOCK-009",
    "SETTLE-LOCK-010", "SETTLE-LOCK-011", "SETTLE-COMP-001", "SETTLE-COMP-002", "SETTLE-ABAN-001",
    "SETTLE-DLQ-001", "SETTLE-DLQ-002", "SETTLE-DLQ-004", "SETTLE-DEFR-001", "SETTLE-DEFR-002",
    "SETTLE-DEFR-003", "SETTLE-PEEK-001",
)
def test_target_agrees_with_the_model(sb_session, sb_target) -> None:
    """Every outcome the target gives is one the model allows (sb_target proves it opens).

    On the reference target this would compare the model with itself and grade nothing, so
    it is skipped there (the clauses have scenarios of their own); the machine is still
    exercised on the model by ``test_the_differential_machine_runs_on_the_model``, which
    names no clause.

    A real-time target (one with a ``clock_tolerance``, like the SDK target) waits for real
    lock expiries: it runs a small profile (``SBCONFORM_REALTIME_EXAMPLES`` examples of
    ``SBCONFORM_REALTIME_STEPS`` steps; 2 x 8 by default)."""
    if sb_session.name == "reference":
        pytest.skip("the differential machine compares a target with the reference model; on the reference "
                    "itself it compares the model with itself, which is no evidence for any clause")

    def machine() -> DifferentialMachine:
        return DifferentialMachine(sb_session.new)

    run_machine_on(sb_target, machine)


def test_the_differential_machine_runs_on_the_model() -> None:
    """The machine itself (its rules, the reference target's adapter) works against the model.
    A kit test: it names no clause, since the model agreeing with itself proves nothing about one."""
    from sbconform.targets import make_target

    def new():
        target = make_target("reference")
        target.open()
        return target

    run_state_machine_as_test(lambda: DifferentialMachine(new), settings=settings(max_examples=20, deadline=None))
