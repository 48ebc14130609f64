"""Stateful properties of sessions in the reference model.

The machine keeps its own ledger of sessions (who holds each lock until when, the
state stored) and of messages (per session, in sending order, how many failed
deliveries), predicts every answer from it and checks the model against it:

- a session is locked by one receiver at a time; accepting a held session fails;
- "next available" picks one of the sessions the ledger says are free and have messages;
- a session's messages are delivered in order, a message handed back coming first again;
- an expired session lock counts a failed delivery for its messages, a close does not;
- session state outlives the lock until it is cleared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule, run_state_machine_as_test

from model_machine import ModelMachine
from sbreference import PEEK_LOCK, SECOND, ErrorCode, Message, Namespace, ServiceBusError

SESSIONS = ["s1", "s2", "s3"]


@dataclass
class Ledger:
    holder: int | None = None
    until: int = 0
    state: bytes | None = None
    queue: list[str] = field(default_factory=list)  # available messages, in delivery order
    locked: dict[str, int] = field(default_factory=dict)  # message -> lock token


class SessionMachine(ModelMachine):
    max_seconds = 10

    @initialize(lock_seconds=st.integers(2, 8), max_delivery_count=st.integers(2, 5))
    def setup(self, lock_seconds: int, max_delivery_count: int) -> None:
        self.ns = Namespace()
        self.lock = lock_seconds * SECOND
        self.max_delivery_count = max_delivery_count
        self.ns.create_queue("sq", requires_session=True, lock_duration=self.lock, max_delivery_count=max_delivery_count)
        self.conns = [self.ns.connect() for _ in range(3)]
        self.sessions = {sid: Ledger() for sid in SESSIONS}
        self.failures: dict[str, int] = {}
        self.sent_at: dict[str, int] = {}
        self.dead: set[str] = set()
        self.counter = 0

    def _now(self) -> int:
        return self.ns.clock.now

    def _held(self, ledger: Ledger) -> bool:
        return ledger.holder is not None and self._now() < ledger.until

    def _end_lock(self, ledger: Ledger, failed: bool) -> None:
        """The session lock is gone: its unsettled messages go back in front, in order."""
        back = sorted(ledger.locked, key=lambda mid: self.sent_at[mid])
        ledger.locked.clear()
        ledger.holder = None
        keep = []
        for mid in back:
            if failed:
                self.failures[mid] += 1
                if self.failures[mid] >= self.max_delivery_count:
                    self.dead.add(mid)
                    continue
            keep.append(mid)
        ledger.queue.extend(keep)
        ledger.queue.sort(key=self.sent_at.__getitem__)  # back in front: a session is FIFO

    def _expire(self) -> None:
        for ledger in self.sessions.values():
            if ledger.holder is not None and self._now() >= ledger.until:
                self._end_lock(ledger, failed=True)  # SETTLE-SESS-007

    def _actor(self, data: st.DataObject) -> tuple[int, str]:
        """Mostly a session's holder acting on it; sometimes anyone, on any session."""
        held = [sid for sid, ledger in self.sessions.items() if self._held(ledger)]
        if held and data.draw(st.integers(0, 4), label="holder?") > 0:
            sid = data.draw(st.sampled_from(held), label="session")
            return self.sessions[sid].holder, sid
        return self.conns[data.draw(st.integers(0, 2), label="conn")], data.draw(st.sampled_from(SESSIONS), label="session")

    # ------------------------------------------------------------------ rules

    @rule(sid=st.sampled_from(SESSIONS), count=st.integers(1, 3))
    def send(self, sid: str, count: int) -> None:
        for _ in range(count):
            self.counter += 1
            mid = f"m{self.counter}"
            self.ns.send(self.conns[0], "sq", Message(b"x", message_id=mid, session_id=sid))
            self.sessions[sid].queue.append(mid)
            self.failures[mid] = 0
            self.sent_at[mid] = self.counter

    @rule(conn=st.integers(0, 2), sid=st.sampled_from([None, *SESSIONS]))
    def accept(self, conn: int, sid: str | None) -> None:
        self._expire()
        c = self.conns[conn]
        free = [s for s, ledger in self.sessions.items() if not self._held(ledger) and ledger.queue]
        try:
            got, until = self.ns.accept_session(c, "sq", sid)
        except ServiceBusError as error:
            if sid is None:
                assert not free and error.code is ErrorCode.TIMEOUT, f"next-available failed with {free} free: {error}"
            else:
                assert self._held(self.sessions[sid]), f"accepting free session {sid} failed: {error}"
                assert error.code is ErrorCode.SESSION_CANNOT_BE_LOCKED, "SETTLE-SESS-002"
            return
        if sid is None:
            assert got in free, f"next-available chose {got}, not one of {free} (SETTLE-SESS-004)"
        else:
            assert not self._held(self.sessions[sid]), f"{sid} was accepted while held (SETTLE-SESS-002)"
        ledger = self.sessions[got]
        ledger.holder, ledger.until = c, until
        assert until == self._now() + self.lock

    @rule(data=st.data(), count=st.integers(1, 3))
    def receive(self, data: st.DataObject, count: int) -> None:
        self._expire()
        c, sid = self._actor(data)
        ledger = self.sessions[sid]
        try:
            got = self.ns.receive(c, "sq", count, PEEK_LOCK, session_id=sid)
        except ServiceBusError as error:
            assert not (self._held(ledger) and ledger.holder == c), f"the holder could not receive: {error}"
            assert error.code is ErrorCode.SESSION_LOCK_LOST
            return
        assert self._held(ledger) and ledger.holder == c, "received from a session it does not hold"
        expected = ledger.queue[:count]
        assert [d.message_id for d in got] == expected, f"{sid}: got {[d.message_id for d in got]}, expected {expected} (SETTLE-SESS-003)"
        for d in got:
            assert d.delivery_count == self.failures[d.message_id] + 1
            ledger.locked[d.message_id] = d.lock_token
        del ledger.queue[: len(got)]

    @precondition(lambda self: any(ledger.locked for ledger in self.sessions.values()))
    @rule(data=st.data(), op=st.sampled_from(["complete", "abandon"]))
    def settle(self, data: st.DataObject, op: str) -> None:
        self._expire()
        sid = data.draw(st.sampled_from([s for s, ledger in self.sessions.items() if ledger.locked]))
        ledger = self.sessions[sid]
        mid = data.draw(st.sampled_from(sorted(ledger.locked)))
        holder = ledger.holder if ledger.holder is not None else self.conns[0]
        c = holder if data.draw(st.integers(0, 4)) > 0 else self.conns[data.draw(st.integers(0, 2))]
        ok = ledger.holder == c
        try:
            getattr(self.ns, op)(c, "sq", ledger.locked[mid])
        except ServiceBusError as error:
            assert not ok, f"the holder's {op} failed: {error}"
            assert error.code is ErrorCode.SESSION_LOCK_LOST
            return
        assert ok, f"{op} by a receiver that does not hold the session"
        del ledger.locked[mid]
        if op == "abandon":
            self.failures[mid] += 1
            if self.failures[mid] >= self.max_delivery_count:
                self.dead.add(mid)
            else:  # SETTLE-SESS-003: served again by the next receive (it is the oldest)
                ledger.queue.append(mid)
                ledger.queue.sort(key=self.sent_at.__getitem__)

    @rule(data=st.data(), op=st.sampled_from(["renew", "close", "set-state"]), value=st.binary(max_size=3))
    def session_operation(self, data: st.DataObject, op: str, value: bytes) -> None:
        self._expire()
        c, sid = self._actor(data)
        ledger = self.sessions[sid]
        ok = self._held(ledger) and ledger.holder == c
        try:
            if op == "renew":
                until = self.ns.renew_session_lock(c, "sq", sid)
            elif op == "close":
                self.ns.release_session(c, "sq", sid)
            else:
                self.ns.set_session_state(c, "sq", sid, value)
        except ServiceBusError as error:
            assert not ok, f"the holder's {op} failed: {error}"
            assert error.code is ErrorCode.SESSION_LOCK_LOST, "SETTLE-SESS-006"
            return
        assert ok, f"{op} succeeded without holding {sid}"
        if op == "renew":
            assert until == self._now() + self.lock, "SETTLE-SESS-006"
            ledger.until = until
        elif op == "close":
            self._end_lock(ledger, failed=False)  # SETTLE-SESS-007: no delivery counted
        else:
            ledger.state = value or None

    @invariant()
    def agrees_with_the_ledger(self) -> None:
        self._expire()
        held = {d.message_id for d in self.ns.peek("sq", 1, 10_000)}
        expected = {m for ledger in self.sessions.values() for m in (*ledger.queue, *ledger.locked)}
        assert held == expected, f"the model holds {sorted(held)}, the ledger {sorted(expected)}"
        assert {d.message_id for d in self.ns.peek("sq/$DeadLetterQueue", 1, 10_000)} == self.dead
        for sid, ledger in self.sessions.items():
            if ledger.state is not None and not self._held(ledger):
                c = self.ns.connect()
                self.ns.accept_session(c, "sq", sid)
                assert self.ns.get_session_state(c, "sq", sid) == ledger.state, "SETTLE-SESS-005"
                self.ns.release_session(c, "sq", sid)


@pytest.mark.clauses(
    "SETTLE-SESS-002", "SETTLE-SESS-003", "SETTLE-SESS-004", "SETTLE-SESS-005", "SETTLE-SESS-006", "SETTLE-SESS-007",
)
@pytest.mark.needs("model-internals")
def test_sessions_state_machine() -> None:
    run_state_machine_as_test(SessionMachine)
