"""What the trace checker says: the row layout it reads, the violations it names (each
with the clause it breaks) and the pieces it cannot judge."""

from __future__ import annotations

from .schema import FIELD_NAMES

# Row layout: a tuple in FIELD_NAMES order.
(TRACE, POS, TIME, CLIENT, CONN, OP_ID, OP, PHASE, ENTITY, PARTITION, MESSAGE_ID, SEQ, LOCK,
 DELIVERY_COUNT, SESSION, PARTITION_KEY, ARGS, RESULT, ERROR) = range(len(FIELD_NAMES))

#: The clause each kind of violation breaks.
CLAUSES = {
    "lost-message": "SETTLE-SEND-001",
    "out-of-order": "SETTLE-RECV-002",
    "out-of-order-session": "SETTLE-SESS-003",
    "out-of-order-key": "PART-KEY-007",
    "not-a-partition-head": "PART-RECV-001",
    "double-delivery": "SETTLE-LOCK-001",
    "settled-after-lock-expiry": "SETTLE-LOCK-008",
    "unknown-lock": "SETTLE-LOCK-011",
    "settled-after-connection-drop": "SETTLE-LOCK-009",
    "settled-twice": "SETTLE-COMP-002",
    "max-delivery-count-exceeded": "SETTLE-LOCK-007",
    "wrong-delivery-count": "SETTLE-LOCK-010",
    "wrong-partition": "PART-KEY-006",
    "wrong-session-partition": "PART-KEY-001",
    "ping-delivered": "PAIR-PING-002",
    "delivered-after-complete": "SETTLE-COMP-001",
    "delivered-after-receive-and-delete": "SETTLE-RECV-001",
    "delivered-after-expiry": "SETTLE-TTL-002",
    "delivered-after-dead-letter": "SETTLE-DLQ-002",
    "deferred-delivered": "SETTLE-DEFR-001",
    "deferred-not-found": "SETTLE-DEFR-002",
    "unknown-message": "SETTLE-SEQ-001",
    "session-lock": "SETTLE-SESS-002",
    "session-not-available": "SETTLE-SESS-004",
    "renewed-lock": "SETTLE-LOCK-004",
}


class Violation(Exception):
    def __init__(self, kind: str, row: tuple, expected: str, observed: str, seq: int | None = None,
                 message_id: str | None = None, watch: int | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.row = row
        self.expected = expected
        self.observed = observed
        self.seq = seq if seq is not None else row[SEQ]
        self.message_id = message_id if message_id is not None else row[MESSAGE_ID]
        self.watch = watch  # a head the model expected: lost, or delivered out of order?


class Undecidable(Exception):
    """The checker cannot judge this piece (an operation it does not model, bad pairing)."""
