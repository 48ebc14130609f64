"""The reference model against Service Bus's documentation, continued (tests/test_fidelity_model.py
is at its size limit): one test per row of sbspec/fidelity.md where the model was found to
differ, each written failing first.

Model-level tests (``@needs:model-internals``): they grade the model, not a target.
"""

from __future__ import annotations

import pytest

from sbreference import SECOND, ErrorCode, Message, Namespace, ServiceBusError, VirtualClock

pytestmark = pytest.mark.needs("model-internals")


def fails(code: ErrorCode, call, *args, **kwargs) -> ServiceBusError:
    with pytest.raises(ServiceBusError) as caught:
        call(*args, **kwargs)
    assert caught.value.code is code, caught.value
    return caught.value


# ------------------------------------------------------------ auto-forwarding


@pytest.mark.clauses("SETTLE-FWD-001")
def test_a_session_enabled_queue_or_subscription_cannot_auto_forward() -> None:
    """Audit row ENT-027: a queue or subscription that requires sessions cannot have ForwardTo,
    on creation or by an update (Service Bus answers 400 Bad Request); the destination may
    require sessions, and dead-letter forwarding stays allowed."""
    ns = Namespace(clock=VirtualClock())
    ns.create_queue("dst", requires_session=True)  # a session destination is fine
    fails(ErrorCode.ARGUMENT_ERROR, ns.create_queue, "src", requires_session=True, forward_to="dst")
    assert not ns.exists("src")
    ns.create_queue("sessions", requires_session=True)
    fails(ErrorCode.ARGUMENT_ERROR, ns.update, "sessions", forward_to="dst")
    assert ns.describe("sessions").forward_to is None
    ns.create_topic("t")
    fails(ErrorCode.ARGUMENT_ERROR, ns.create_subscription, "t", "s", requires_session=True, forward_to="dst")
    ns.create_subscription("t", "plain", forward_to="dst")  # not session-enabled: allowed
    ns.create_queue("dlq-sink")
    ns.create_queue("dead", requires_session=True, forward_dead_lettered_messages_to="dlq-sink")
