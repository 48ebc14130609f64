"""Stateful properties of the reference model's settlement state machine.

The machines below drive ``sbreference.Namespace`` directly and keep a ledger of their own
(where each message should be, who holds which lock until when, how many failed
deliveries each message has had). Every operation's result is predicted from that
ledger, and after every step the model's observable state (peek, dead-letter peek,
counts) must agree with it:

- every accepted message is in exactly one of active / locked / deferred / scheduled /
  dead-lettered / completed / expired;
- a locked message is never handed to another receiver;
- a live lock can be settled or renewed by any connection, by its token (the lock belongs
  to the entity: SETTLE-LOCK-011); once it is gone, every settlement with it fails;
- the delivery count is exact, and bounded by the max delivery count while active;
- sequence numbers strictly increase per entity.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule, run_state_machine_as_test

from model_machine import ModelMachine
from sbreference import (
    MAX_DELIVERY_COUNT_EXCEEDED,
    PEEK_LOCK,
    RECEIVE_AND_DELETE,
    SECOND,
    TTL_EXPIRED,
    ErrorCode,
    Message,
    Namespace,
    ServiceBusError,
)

MAIN, DLQ = "q", "q/$DeadLetterQueue"


@dataclass
class Tracked:
    seq: int
    where: str  # active, locked, deferred, dead-lettered, completed
    dlq_deferred: bool = False  # deferred inside the dead-letter queue
    failures: int = 0  # failed deliveries: abandons, lock expiries, lost connections
    deferred: bool = False  # received by sequence number: abandon returns it to deferred
    in_dlq: bool = False


@dataclass
class Lock:
    conn: int
    mid: str
    until: int
    store: str


class SettlementMachine(ModelMachine):
    """Peek-lock, receive-and-delete, settlement, deferral, lock expiry, lost connections."""

    max_seconds = 12

    @initialize(
        lock_seconds=st.integers(1, 10),
        max_delivery_count=st.integers(1, 4),
    )
    def setup(self, lock_seconds: int, max_delivery_count: int) -> None:
        self.ns = Namespace()
        self.lock_duration = lock_seconds * SECOND
        self.max_delivery_count = max_delivery_count
        self.ns.create_queue("q", lock_duration=self.lock_duration, max_delivery_count=max_delivery_count)
        self.conns = [self.ns.connect() for _ in range(3)]
        self.msgs: dict[str, Tracked] = {}
        self.locks: dict[int, Lock] = {}  # live locks
        self.issued: list[tuple[int, str]] = []  # every lock token ever handed out, with its message
        self.last_seq = 0
        self.counter = 0

    # ------------------------------------------------------------ the ledger

    def _fail_delivery(self, token: int) -> None:
        """A lock ended without settlement (abandon, expiry, lost connection)."""
        lock = self.locks.pop(token)
        m = self.msgs[lock.mid]
        m.failures += 1
        if lock.store == MAIN and m.failures >= self.max_delivery_count:
            m.where, m.in_dlq, m.deferred = "dead-lettered", True, False  # SETTLE-LOCK-007
        elif lock.store == DLQ:
            m.where = "dead-lettered"
            m.dlq_deferred = m.deferred
        elif m.deferred:
            m.where = "deferred"
        else:
            m.where = "active"

    def _expire_locks(self) -> None:
        now = self.ns.clock.now
        for token in [t for t, lock in self.locks.items() if lock.until <= now]:
            self._fail_delivery(token)

    def _available(self, store: str) -> list[str]:
        if store == MAIN:
            ids = [mid for mid, m in self.msgs.items() if m.where == "active"]
        else:
            ids = [
                mid for mid, m in self.msgs.items()
                if m.where == "dead-lettered" and not m.dlq_deferred and not self._locked(mid)
            ]
        return sorted(ids, key=lambda mid: self.msgs[mid].seq)

    def _locked(self, mid: str) -> bool:
        return any(lock.mid == mid for lock in self.locks.values())

    # ------------------------------------------------------------------ rules

    @rule(conn=st.integers(0, 2), count=st.integers(1, 3))
    def send(self, conn: int, count: int) -> None:
        batch = []
        for _ in range(count):
            self.counter += 1
            batch.append(Message(b"x", message_id=f"m{self.counter}"))
        seqs = self.ns.send(self.conns[conn], MAIN, batch)
        for message, seq in zip(batch, seqs):
            assert seq > self.last_seq, f"sequence number {seq} after {self.last_seq} (SETTLE-SEQ-001)"
            self.last_seq = seq
            self.msgs[message.message_id] = Tracked(seq, "active")

    @rule(conn=st.integers(0, 2), count=st.integers(1, 4), mode=st.sampled_from([PEEK_LOCK, RECEIVE_AND_DELETE]), store=st.sampled_from([MAIN, DLQ]))
    def receive(self, conn: int, count: int, mode: str, store: str) -> None:
        self._expire_locks()
        expected = self._available(store)[:count]
        got = self.ns.receive(self.conns[conn], store, count, mode)
        assert [d.message_id for d in got] == expected, f"received {[d.message_id for d in got]}, expected {expected}"
        now = self.ns.clock.now
        for d in got:
            m = self.msgs[d.message_id]
            assert not self._locked(d.message_id), "a locked message was handed to a receiver (SETTLE-LOCK-001)"
            assert d.delivery_count == m.failures + 1, f"{d.message_id}: delivery count {d.delivery_count}, expected {m.failures + 1}"
            if store == MAIN:
                assert d.delivery_count <= self.max_delivery_count
            if mode == PEEK_LOCK:
                assert d.locked_until == now + self.lock_duration, "lock duration (SETTLE-LOCK-002)"
                self.locks[d.lock_token] = Lock(self.conns[conn], d.message_id, d.locked_until, store)
                self.issued.append((d.lock_token, d.message_id))
                m.where = "locked" if store == MAIN else "dead-lettered"
            else:
                assert d.lock_token is None
                m.where = "completed"

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), conn=st.integers(0, 2), op=st.sampled_from(["complete", "abandon", "defer", "dead-letter", "renew"]))
    def settle(self, data: st.DataObject, conn: int, op: str) -> None:
        self._expire_locks()
        token, mid = data.draw(st.sampled_from(self.issued))
        lock = self.locks.get(token)
        live = lock is not None  # SETTLE-LOCK-011: whichever connection asks
        store = lock.store if lock is not None else (DLQ if self.msgs[mid].in_dlq else MAIN)
        c = self.conns[conn]
        try:
            if op == "complete":
                self.ns.complete(c, store, token)
            elif op == "abandon":
                self.ns.abandon(c, store, token)
            elif op == "defer":
                self.ns.defer(c, store, token)
            elif op == "dead-letter":
                self.ns.dead_letter(c, store, token, "reason", "description")
            else:
                until = self.ns.renew_lock(c, store, token)
        except ServiceBusError as error:
            if live and op == "dead-letter" and store == DLQ:
                assert error.code is ErrorCode.INVALID_OPERATION, "SETTLE-DLQ-004"
                return
            assert not live, f"{op} of a live lock by connection {conn} failed (SETTLE-LOCK-011): {error}"
            assert error.code is ErrorCode.MESSAGE_LOCK_LOST, f"{op} of a lock that is gone: {error.code} (SETTLE-LOCK-008)"
            return
        assert live, f"{op} succeeded with a lock that is gone (SETTLE-LOCK-008, SETTLE-COMP-002)"
        assert not (op == "dead-letter" and store == DLQ), "dead-lettered out of the dead-letter queue (SETTLE-DLQ-004)"
        m = self.msgs[mid]
        if op == "complete":
            del self.locks[token]
            m.where = "completed"
        elif op == "abandon":
            self._fail_delivery(token)
        elif op == "defer" and store == DLQ:
            del self.locks[token]
            m.dlq_deferred = True  # deferred, but still in the dead-letter queue
        elif op == "defer":
            del self.locks[token]
            m.where, m.deferred = "deferred", False
        elif op == "dead-letter":
            del self.locks[token]
            m.where, m.in_dlq, m.deferred = "dead-lettered", True, False
        else:
            assert until == self.ns.clock.now + self.lock_duration, "renewal (SETTLE-LOCK-004)"
            lock.until = until

    @precondition(lambda self: self.msgs)
    @rule(data=st.data(), conn=st.integers(0, 2))
    def receive_deferred(self, data: st.DataObject, conn: int) -> None:
        self._expire_locks()
        mid = data.draw(st.sampled_from(sorted(self.msgs)))
        m = self.msgs[mid]
        try:
            got = self.ns.receive_deferred(self.conns[conn], MAIN, [m.seq])
        except ServiceBusError as error:
            assert m.where != "deferred", f"a deferred message could not be received: {error}"
            assert error.code is ErrorCode.MESSAGE_NOT_FOUND, "SETTLE-DEFR-002"
            return
        assert m.where == "deferred", f"receive-deferred returned a message that is {m.where}"
        (d,) = got
        assert d.delivery_count == m.failures + 1
        self.locks[d.lock_token] = Lock(self.conns[conn], mid, d.locked_until, MAIN)
        self.issued.append((d.lock_token, mid))
        m.where, m.deferred = "locked", True

    @rule(conn=st.integers(0, 2))
    def drop_connection(self, conn: int) -> None:
        self._expire_locks()
        self.ns.drop_connection(self.conns[conn])
        for token in [t for t, lock in self.locks.items() if lock.conn == self.conns[conn]]:
            self._fail_delivery(token)  # SETTLE-LOCK-009

    # ------------------------------------------------------------- invariants

    @invariant()
    def every_message_is_in_exactly_one_place(self) -> None:
        self._expire_locks()
        main = {d.message_id: str(d.state) for d in self.ns.peek(MAIN, 1, 10_000)}
        dlq = {d.message_id for d in self.ns.peek(DLQ, 1, 10_000)}
        assert not set(main) & dlq, f"in both the queue and its dead-letter queue: {set(main) & dlq}"
        for mid, m in self.msgs.items():
            if m.where in ("active", "locked", "deferred"):
                assert main.get(mid) == m.where, f"{mid} should be {m.where}, the model shows {main.get(mid)!r}"
            elif m.where == "dead-lettered":
                assert mid in dlq, f"{mid} should be dead-lettered"
            else:
                assert mid not in main and mid not in dlq, f"{mid} was completed but is still held"
            if m.where == "active":
                assert m.failures < self.max_delivery_count, "active beyond the max delivery count"
        assert set(main) | dlq <= set(self.msgs), "the model holds messages nobody sent"
        counts = self.ns.runtime_info(MAIN)
        assert counts["active"] == sum(1 for m in self.msgs.values() if m.where in ("active", "locked"))
        assert counts["deferred"] == sum(1 for m in self.msgs.values() if m.where == "deferred")
        assert counts["dead_letter"] == len(dlq)


class ExpiryMachine(ModelMachine):
    """Time to live, dead-lettering on expiration, scheduling and duplicate detection."""

    max_seconds = 15

    WINDOW = 20 * SECOND

    @initialize(dead_letter_expired=st.booleans(), default_ttl=st.sampled_from([None, 5, 30]))
    def setup(self, dead_letter_expired: bool, default_ttl: int | None) -> None:
        self.ns = Namespace()
        props = dict(
            lock_duration=5 * SECOND,
            dead_lettering_on_message_expiration=dead_letter_expired,
            requires_duplicate_detection=True,
            duplicate_detection_history_time_window=self.WINDOW,
        )
        if default_ttl is not None:
            props["default_message_time_to_live"] = default_ttl * SECOND
        self.default_ttl = default_ttl * SECOND if default_ttl is not None else None
        self.dead_letter_expired = dead_letter_expired
        self.ns.create_queue("q", **props)
        self.conn = self.ns.connect()
        self.expires: dict[str, int | None] = {}  # message id -> expiry, for accepted messages
        self.first_sent: dict[str, int] = {}  # message id -> when duplicate detection first saw it
        self.scheduled: dict[str, tuple[int, int]] = {}  # id -> (enqueue time, number)
        self.cancelled: set[str] = set()
        self.completed: set[str] = set()
        self.last_seq = 0
        self.counter = 0

    def _ttl(self, ttl: int | None) -> int | None:
        if ttl is None:
            return self.default_ttl
        return min(ttl, self.default_ttl) if self.default_ttl is not None else ttl

    @rule(ttl=st.sampled_from([None, 1, 3, 10, 40]), reuse=st.booleans(), data=st.data())
    def send(self, ttl: int | None, reuse: bool, data: st.DataObject) -> None:
        now = self.ns.clock.now
        plain = sorted(m for m in self.first_sent if m.startswith("m"))
        if reuse and plain:
            mid = data.draw(st.sampled_from(plain))
        else:
            self.counter += 1
            mid = f"m{self.counter}"
        duplicate = mid in self.first_sent and now - self.first_sent[mid] < self.WINDOW
        ttl_ms = ttl * SECOND if ttl is not None else None
        [seq] = self.ns.send(self.conn, MAIN, Message(b"x", message_id=mid, time_to_live=ttl_ms))
        if duplicate:
            assert seq is None, f"{mid} resent within the window was accepted as new (SETTLE-DUP-002)"
            return
        assert seq is not None and seq > self.last_seq, f"{mid} outside the window was dropped (SETTLE-DUP-003)"
        self.last_seq = seq
        self.first_sent[mid] = now
        effective = self._ttl(ttl_ms)
        self.expires[f"{mid}@{seq}"] = None if effective is None else now + effective

    @rule(delay=st.integers(1, 20))
    def schedule(self, delay: int) -> None:
        self.counter += 1
        mid = f"s{self.counter}"
        now = self.ns.clock.now
        [seq] = self.ns.schedule(self.conn, MAIN, Message(b"x", message_id=mid), now + delay * SECOND)
        assert seq > self.last_seq
        self.last_seq = seq
        self.first_sent[mid] = now
        self.scheduled[mid] = (now + delay * SECOND, seq)

    @precondition(lambda self: any(m not in self.cancelled for m in self.scheduled))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        mid = data.draw(st.sampled_from(sorted(m for m in self.scheduled if m not in self.cancelled)))
        when, seq = self.scheduled[mid]
        try:
            self.ns.cancel_scheduled(self.conn, MAIN, [seq])
        except ServiceBusError as error:
            assert self.ns.clock.now >= when, f"cancelling {mid} before its time failed: {error}"
            assert error.code is ErrorCode.MESSAGE_NOT_FOUND
            return
        assert self.ns.clock.now < when, f"{mid} was cancelled after it had become active"
        self.cancelled.add(mid)

    @rule(count=st.integers(1, 3))
    def receive_and_complete(self, count: int) -> None:
        now = self.ns.clock.now
        for d in self.ns.receive(self.conn, MAIN, count, PEEK_LOCK):
            key = self._key(d.message_id, d.sequence_number)
            if d.message_id.startswith("s"):
                when, number = self.scheduled[d.message_id]
                assert d.message_id not in self.cancelled, "a cancelled message was delivered (SETTLE-SCHED-003)"
                assert now >= when, "a scheduled message was delivered early (SETTLE-SCHED-001)"
                assert d.sequence_number > number, "no new sequence number on activation (SETTLE-SCHED-002)"
            else:
                expiry = self.expires[key]
                assert expiry is None or now < expiry, f"{d.message_id} delivered after it expired (SETTLE-TTL-002)"
            self.ns.complete(self.conn, MAIN, d.lock_token)
            self.completed.add(key)

    def _key(self, mid: str, seq: int) -> str:
        if mid.startswith("s"):
            return mid
        return f"{mid}@{seq}"

    @invariant()
    def expired_messages_are_gone_or_dead_lettered(self) -> None:
        now = self.ns.clock.now
        main = {self._key(d.message_id, d.sequence_number) for d in self.ns.peek(MAIN, 1, 10_000) if str(d.state) != "scheduled"}
        scheduled = {d.message_id for d in self.ns.peek(MAIN, 1, 10_000) if str(d.state) == "scheduled"}
        dlq = {self._key(d.message_id, d.sequence_number): d for d in self.ns.peek(DLQ, 1, 10_000)}
        for key, expiry in self.expires.items():
            places = [p for p, held in (("active", main), ("dead-lettered", dlq), ("completed", self.completed)) if key in held]
            expired = expiry is not None and now >= expiry
            if key in self.completed:
                assert places == ["completed"], f"{key} completed but also {places}"
            elif expired:
                if self.dead_letter_expired:
                    assert places == ["dead-lettered"], f"{key} expired; expected only in the DLQ, found {places} (SETTLE-TTL-003)"
                    assert dlq[key].dead_letter_reason == TTL_EXPIRED
                else:
                    assert places == [], f"{key} expired but is still {places} (SETTLE-TTL-002)"
            else:
                assert places == ["active"], f"{key} should be active, found {places}"
        for mid, (when, _) in self.scheduled.items():
            if mid in self.cancelled:
                assert mid not in scheduled
            elif now < when:
                assert mid in scheduled, f"{mid} should still be scheduled (SETTLE-SCHED-001)"
            else:
                assert mid not in scheduled, f"{mid} is past its time but still scheduled (SETTLE-SCHED-002)"
        assert not any(d.dead_letter_reason == MAX_DELIVERY_COUNT_EXCEEDED for d in dlq.values())


@pytest.mark.clauses(
    "SETTLE-LOCK-001", "SETTLE-LOCK-002", "SETTLE-LOCK-004", "SETTLE-LOCK-005", "SETTLE-LOCK-007",
    "SETTLE-LOCK-009", "SETTLE-LOCK-010", "SETTLE-LOCK-011", "SETTLE-RECV-001", "SETTLE-RECV-002",
    "SETTLE-COMP-001", "SETTLE-ABAN-001", "SETTLE-DEFR-001", "SETTLE-DEFR-002", "SETTLE-DEFR-003",
    "SETTLE-DLQ-004", "SETTLE-SEQ-001",
)
@pytest.mark.needs("model-internals")
def test_settlement_state_machine() -> None:
    run_state_machine_as_test(SettlementMachine)


@pytest.mark.clauses(
    "SETTLE-TTL-001", "SETTLE-TTL-002", "SETTLE-TTL-003", "SETTLE-SCHED-001", "SETTLE-SCHED-002",
    "SETTLE-SCHED-003", "SETTLE-DUP-002", "SETTLE-DUP-003", "SETTLE-SEQ-001",
)
@pytest.mark.needs("model-internals")
def test_expiry_schedule_duplicate_state_machine() -> None:
    run_state_machine_as_test(ExpiryMachine)
