"""Deferral: a locked message set aside, receivable only by its sequence number (SETTLE-DEFR-*).

    LOCKED --defer--> DEFERRED --receive deferred--> LOCKED (abandon returns to DEFERRED)

Mixed into ``store.MessageStore``; it uses the store's messages, locks, lanes and counters.
"""

from __future__ import annotations

from typing import Iterable

from .errors import ErrorCode, ServiceBusError
from .message import Delivery, State, StoredMessage
from .operations import PEEK_LOCK


class Deferral:
    """The deferral half of a ``MessageStore``."""

    def defer(self, now: int, holder: int, lock_token: int, properties: dict | None = None) -> None:
        """SETTLE-DEFR-001: set aside; receivable only by sequence number (SETTLE-MOD-001: with
        the application properties to modify set on it)."""
        msg = self.locked_message(now, holder, lock_token)
        self._modify(msg, properties)
        self._unlock(msg)
        self._set_deferred(msg)

    def receive_deferred(
        self,
        now: int,
        holder: int,
        sequence_numbers: Iterable[int],
        mode: str,
        session_id: str | None = None,
    ) -> list[Delivery]:
        """SETTLE-DEFR-002: receive deferred messages by sequence number, all or none.

        SETTLE-DEFR-005: a deferred message is not moved when its time to live passes
        (SETTLE-DEFR-004), but once it is asked for after its expiry it expires then
        (dead-lettered with TTLExpiredException when the entity dead-letters on
        expiration, else dropped), and the request fails: it is not returned."""
        self.tick(now)
        session = self._held_session(now, holder, session_id) if self.requires_session else None
        wanted = list(sequence_numbers)
        expired = [
            msg for msg in (self.messages.get(seq) for seq in wanted)
            if msg is not None and msg.state is State.DEFERRED and msg.expires_at <= now
            and (session is None or msg.session_id == session.session_id)
        ]
        for msg in expired:
            self.deferred_count -= 1
            self._expire(msg, now)
        found = []
        for seq in wanted:
            msg = self.messages.get(seq)
            if msg is None or msg.state is not State.DEFERRED or (
                session is not None and msg.session_id != session.session_id
            ):
                raise ServiceBusError(
                    ErrorCode.MESSAGE_NOT_FOUND,
                    f"Failed to retrieve the deferred message with sequence number {seq}: "
                    "it does not exist, is not deferred, or is locked.",
                )
            found.append(msg)
        out = []
        for msg in found:
            self.deferred_count -= 1
            if mode == PEEK_LOCK:
                msg.deferred = True
                locked_until = session.locked_until if session is not None else now + self.lock_duration
                out.append(self._lock(msg, holder, locked_until, track=session is None))
            else:
                out.append(Delivery(msg, State.COMPLETED))
                self._remove(msg, State.COMPLETED, "consumed")
        return out

    def _set_deferred(self, msg: StoredMessage) -> None:
        msg.state = State.DEFERRED
        msg.deferred = False
        self.deferred_count += 1
        if self.observer is not None:
            self.observer(self.path, "deferred", msg)
