"""Sessions of a store: the exclusive session lock and the session state (SETTLE-SESS-*).

A receiver accepts a session by name, or the next available one (the broker may pick
any: SETTLE-SESS-004); it holds the session lock until it releases it or the lock
expires, and every message of the session is locked with it (SETTLE-SESS-003). The
session state outlives the lock (SETTLE-SESS-005). Mixed into ``store.MessageStore``; it uses the store's messages, locks, lanes and counters.
"""

from __future__ import annotations

from .errors import ErrorCode, ServiceBusError
from .lanes import Session


class SessionLocks:
    """The session half of a ``MessageStore``."""

    def _held_session(self, now: int, holder: int, session_id: str | None) -> Session:
        if session_id is None:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                "It is not possible for an entity that requires sessions to create a non-sessionful message receiver.",
            )
        session = self.sessions.get(session_id)
        if session is None or session.holder != holder or not session.is_locked(now):
            raise ServiceBusError(
                ErrorCode.SESSION_LOCK_LOST,
                f"The session lock on session '{session_id}' is not held by this receiver or has expired.",
            )
        return session

    def accept_session(self, now: int, holder: int, session_id: str) -> Session:
        """SETTLE-SESS-002: take the exclusive lock on a named session."""
        self.tick(now)
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = Session(session_id)
        if session.is_locked(now):
            raise ServiceBusError(
                ErrorCode.SESSION_CANNOT_BE_LOCKED,
                f"The requested session '{session_id}' cannot be accepted. It may be locked by another receiver.",
            )
        session.holder = holder
        session.locked_until = now + self.lock_duration
        self._add_deadline(self.session_deadlines, session.locked_until, session_id)
        return session

    def available_sessions(self, now: int) -> list[str]:
        """Sessions a next-available accept may lock: unlocked, with a message ready.

        Which one the broker picks is not documented; every member is allowed
        (SETTLE-SESS-004). Listed oldest head message first.
        """
        self.tick(now)
        ready = []
        for sid, session in self.sessions.items():
            if session.available and not session.is_locked(now):
                head = session.head()
                if head is not None:
                    ready.append((head.sequence_number, sid))
        return [sid for _, sid in sorted(ready)]

    def renew_session_lock(self, now: int, holder: int, session_id: str) -> int:
        """SETTLE-SESS-006."""
        session = self._held_session_after_tick(now, holder, session_id)
        session.locked_until = now + self.lock_duration
        self._add_deadline(self.session_deadlines, session.locked_until, session_id)
        for msg in self.locks.values():
            if msg.session_id == session_id:
                msg.locked_until = session.locked_until
        return session.locked_until

    def release_session(self, now: int, holder: int, session_id: str) -> None:
        """Closing a session receiver: unsettled messages return without counting a delivery."""
        session = self._held_session_after_tick(now, holder, session_id)
        self._drop_session_lock(session, now, failed=False)

    def get_session_state(self, now: int, holder: int, session_id: str) -> bytes | None:
        return self._held_session_after_tick(now, holder, session_id).state

    def set_session_state(self, now: int, holder: int, session_id: str, state: bytes | None, limit: int | None = None) -> None:
        """SETTLE-SESS-005: the state outlives the session lock, until set to empty. SETTLE-SESS-008: it
        holds at most ``limit`` bytes, the size of one message (``Namespace.session_state_limit``)."""
        session = self._held_session_after_tick(now, holder, session_id)
        if state and limit is not None and len(state) > limit:
            raise ServiceBusError(
                ErrorCode.MESSAGE_SIZE_EXCEEDED,
                f"The session state of {len(state)} bytes exceeds the {limit} bytes a session state may hold (one message).",
                transient=False,
            )
        session.state = state or None

    def state_count(self) -> int:
        """The sessions of this store that hold a state (SETTLE-SESS-011)."""
        return sum(1 for session in self.sessions.values() if session.state)

    def state_bytes(self) -> int:
        """The bytes this store's session states take from its entity's size (SETTLE-SESS-010)."""
        return sum(len(session.state) for session in self.sessions.values() if session.state)

    def _held_session_after_tick(self, now: int, holder: int, session_id: str) -> Session:
        self.tick(now)
        return self._held_session(now, holder, session_id)

    def _drop_session_lock(self, session: Session, now: int, failed: bool) -> None:
        session.holder = None
        for msg in [m for m in self.locks.values() if m.session_id == session.session_id]:
            self._release(msg, now, failed=failed)
        self._forget_idle_session(session.session_id, 0)

    def _forget_idle_session(self, session_id: str, change: int) -> None:
        """Keep a session's record only while it has messages, a lock or a state."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        session.members += change
        if session.members <= 0 and session.holder is None and session.state is None:
            del self.sessions[session_id]
