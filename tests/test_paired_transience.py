"""The paired client's own transience rules (sbreference/paired/transience.py): decided from the
broker's AMQP condition and description, never from an SDK's retry flag."""

from __future__ import annotations

import pytest

from sbreference import ErrorCode, ServiceBusError
from sbreference.paired import transience
from sbreference.paired.transience import RULES, WIRE_CONDITIONS, classify, rule_for, starts_failover_timer


def error(code: ErrorCode, text: str = "x", transient: bool | None = None, condition: str | None = None) -> ServiceBusError:
    e = ServiceBusError(code, text, transient=transient)
    if condition is not None:
        e.condition = condition  # what the SDK target keeps of the broker's error
    return e


@pytest.mark.clauses("PAIR-FAIL-002")
def test_entity_disabled_starts_the_timer_even_when_an_sdk_calls_it_retryable() -> None:
    # azure-servicebus 7.x marks com.microsoft:entity-disabled retryable; .NET's
    # MessagingEntityDisabledException is not transient, and the seed's rule is .NET's.
    e = error(ErrorCode.ENTITY_UNAVAILABLE, "The messaging entity is disabled.", transient=True, condition="com.microsoft:entity-disabled")
    assert starts_failover_timer(e)
    assert classify(e).exception == "MessagingEntityDisabledException"


@pytest.mark.clauses("PAIR-FAIL-002", "PAIR-FAIL-003")
@pytest.mark.parametrize(
    ("condition", "counts"),
    [
        ("com.microsoft:timeout", True),  # TimeoutException, not a MessagingException, counts
        ("amqp:not-found", True), ("com.microsoft:entity-disabled", True), ("amqp:resource-limit-exceeded", True),
        ("amqp:link:message-size-exceeded", True),
        ("com.microsoft:server-busy", False),  # "wait 10 seconds, then send again"
        ("amqp:unauthorized-access", False), ("amqp:not-allowed", False), ("com.microsoft:argument-error", False),
        ("amqp:internal-error", False), ("amqp:connection:forced", False), ("amqp:link:detach-forced", False),
    ],
)
def test_each_condition_is_decided_by_its_row(condition: str, counts: bool) -> None:
    # the flag says the opposite of the row each time: it is never read
    e = error(ErrorCode.INVALID_OPERATION, "x", transient=counts, condition=condition)
    assert starts_failover_timer(e) is counts


def test_not_found_on_the_connection_is_a_communication_problem() -> None:
    assert rule_for("amqp:not-found", "The messaging entity 'ns/q' could not be found.").starts_failover_timer
    assert not rule_for("amqp:not-found", "The host name could not be resolved.").starts_failover_timer


def test_every_row_names_its_exception_source_and_clause() -> None:
    for condition, rule in RULES.items():
        assert rule.condition == condition and rule.exception and rule.source.startswith("https://")
        assert rule.clause in ("PAIR-FAIL-002", "PAIR-FAIL-003")
        assert rule.starts_failover_timer == (rule.clause == "PAIR-FAIL-002"), condition


def test_wire_conditions_agree_with_what_sbconform_serve_sends() -> None:
    from sbconform.server.server import CONDITIONS

    assert {code: str(c) for code, c in CONDITIONS.items()} == WIRE_CONDITIONS
    assert set(WIRE_CONDITIONS) == set(ErrorCode)


def test_model_errors_without_a_condition_use_the_wire_condition_of_their_code() -> None:
    assert transience.condition_of(error(ErrorCode.SERVER_BUSY)) == "com.microsoft:server-busy"
    assert not starts_failover_timer(error(ErrorCode.SERVER_BUSY, transient=False))
    assert starts_failover_timer(error(ErrorCode.QUOTA_EXCEEDED, transient=True))
