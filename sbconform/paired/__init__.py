"""Paired namespaces, driven against two targets: the imperative shell of ``sbreference.paired``.

``PairedFactory`` is one MessagingFactory paired with a secondary namespace
(``PairNamespaceAsync``). It holds the pure machines of ``sbreference.paired`` and carries
out what they decide against two ``Target``s, a primary and a secondary namespace. It has
no logic of its own beyond that loop, so the same client logic drives the reference model
here and can drive two real namespaces.

Time: the factory acts when it is given control (``send``, ``work``, ``run``). ``run``
lets time pass on the targets and wakes up at every instant the machines name (a failover
timer, a ping, the end of a syphon poll, a lock coming back, the 5-second close/fault
rule). On virtual-time targets that is exact. A long poll is observed with receives that do
not wait (a sequential driver cannot hold ten 15-minute receives open at once); the receive
calls the syphon is billed for are the ones its machine counts (``Syphon.receive_calls``).

``MeteredTarget`` wraps a target and records every send and receive through it, for the
cost clauses (PAIR-COST-001, PAIR-PING-006) and for what a scenario wants to see of what the
client sent (PAIR-PING-001).

The package: ``metering`` (``MeteredTarget``, ``Meter``), ``factory`` (``PairedFactory``
and the clients it makes), ``application`` (``PairedNamespaceSender`` for applications).
Every name is importable from ``sbconform.paired``, as before.
"""

from __future__ import annotations

from .application import (
    PairedNamespaceSender,
    SendAvailabilityPairedNamespaceOptions,
    from_sdk_message,
    set_entity_available,
)
from .factory import (
    SENDER_FIELDS,
    SYPHON_BATCH,
    SYPHON_POLL,
    PairedClient,
    PairedFactory,
    PingRecord,
    SendRecord,
    message_of,
    operations_per_moved_message,
    run_together,
)
from .metering import Meter, MeteredTarget, Operation, sdk_retries_off, unwrap, without_sdk_retries

__all__ = [
    "SENDER_FIELDS",
    "SYPHON_BATCH",
    "SYPHON_POLL",
    "sdk_retries_off",
    "without_sdk_retries",
    "PairedNamespaceSender",
    "SendAvailabilityPairedNamespaceOptions",
    "from_sdk_message",
    "set_entity_available",
    "Meter",
    "MeteredTarget",
    "Operation",
    "PairedClient",
    "PairedFactory",
    "PingRecord",
    "SendRecord",
    "message_of",
    "operations_per_moved_message",
    "run_together",
    "unwrap",
]
