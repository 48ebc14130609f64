"""Settlement operations by name: the one table from an operation to the call that does it.

Traces, the differential machine, the generator and the server name a settlement by its
trace operation (``complete``, ``abandon``, ``defer``, ``dead-letter``, ``renew-lock``:
sbspec/trace-format.md). The same method name does it on every layer of ours: a
``MessageStore`` (``now, holder, lock_token``), a ``Namespace`` (``conn, path,
lock_token``) and a target (``handle, message``); only dead-lettering takes a reason and
a description (SETTLE-DLQ-001); abandon, defer and dead-letter take properties to modify
(SETTLE-MOD-001).
"""

from __future__ import annotations

from typing import Any

#: Receive modes (SETTLE-RECV-001): a peek-lock receive locks what it hands over; a
#: receive-and-delete receive settles it as it goes.
PEEK_LOCK = "peek-lock"
RECEIVE_AND_DELETE = "receive-and-delete"

#: trace operation -> method name
SETTLEMENTS = {
    "complete": "complete",      # SETTLE-COMP-001
    "abandon": "abandon",        # SETTLE-ABAN-001
    "defer": "defer",            # SETTLE-DEFR-001
    "dead-letter": "dead_letter",  # SETTLE-DLQ-001
    "renew-lock": "renew_lock",  # SETTLE-LOCK-004
}


#: the settlements that take application properties to modify (SETTLE-MOD-001)
MODIFYING = frozenset(("abandon", "defer", "dead-letter"))


def settle(on: Any, op: str, *args: Any, reason: str | None = None, description: str | None = None,
           properties: dict | None = None) -> Any:
    """Call settlement ``op`` on ``on`` (a store, a namespace or a target) with ``args``;
    returns what it returns (a renewal: the new locked-until). ``properties``: application
    properties to modify, for abandon, defer and dead-letter only (SETTLE-MOD-001)."""
    method = getattr(on, SETTLEMENTS[op])
    if properties and op not in MODIFYING:
        raise ValueError(f"{op} takes no properties to modify")
    extra = {"properties": properties} if properties else {}
    if op == "dead-letter":
        return method(*args, reason, description, **extra)
    return method(*args, **extra)
