"""Dead-lettering and expiry: where a message goes when it leaves a store unsettled.

    LOCKED --dead-letter--> DEAD_LETTERED (a new copy in the dead-letter subqueue, SETTLE-DLQ-*)
    ACTIVE --time to live passes--> EXPIRED, or DEAD_LETTERED when enabled (SETTLE-TTL-*)

With ForwardDeadLetteredMessagesTo set, the copy goes there instead (SETTLE-FWD-002).
Mixed into ``store.MessageStore``; it uses the store's messages, locks, lanes and counters.
"""

from __future__ import annotations

from .errors import ErrorCode, ServiceBusError
from .message import (DEAD_LETTER_ERROR_DESCRIPTION, DEAD_LETTER_REASON, TTL_EXPIRED, State, StoredMessage,
                      with_dead_letter_source)


#: System dead-letter reasons, as the dead-letter page lists them
#: (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-dead-letter-queues).
MAX_TRANSFER_HOP_COUNT_EXCEEDED = "MaxTransferHopCountExceeded"
SESSION_ID_IS_NULL = ("Session ID is null.", "Session enabled entity doesn't allow a message whose session identifier is null.")


def forward_failure(error: ServiceBusError, session_id: str | None) -> tuple[str, str]:
    """The reason and description of a message auto-forwarding could not deliver (dead-lettered in its source):
    a chain too long, a session-enabled destination for a message without a SessionId (OP-023), else the refusal."""
    if error.code is ErrorCode.QUOTA_EXCEEDED and "hop" in error.text:
        return MAX_TRANSFER_HOP_COUNT_EXCEEDED, error.text
    if error.code is ErrorCode.INVALID_OPERATION and session_id is None and "SessionId" in error.text:
        return SESSION_ID_IS_NULL
    return str(error.code), error.text

class DeadLettering:
    """The dead-letter half of a ``MessageStore``."""

    def dead_letter(
        self,
        now: int,
        holder: int,
        lock_token: int,
        reason: str | None = None,
        description: str | None = None,
        properties: dict | None = None,
    ) -> None:
        """SETTLE-DLQ-002: moved to the dead-letter subqueue with reason and description
        (SETTLE-MOD-001: and with the application properties to modify set on it)."""
        if self.is_dead_letter:
            self.locked_message(now, holder, lock_token)
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION, "A message cannot be dead-lettered from the dead-letter queue."
            )
        msg = self.locked_message(now, holder, lock_token)
        self._modify(msg, properties)
        self._unlock(msg)
        self._to_dead_letter(msg, now, reason, description)

    def _expire(self, msg: StoredMessage, now: int, whole_session: bool = True) -> None:
        """SETTLE-TTL-002/003: an expired message is dropped or dead-lettered; in a session, with every
        available message of its session (SETTLE-SESS-009)."""
        if self.dead_lettering_on_message_expiration:
            self._to_dead_letter(msg, now, TTL_EXPIRED, "The message expired and was dead lettered.", from_lane=True)
        else:
            self._remove(msg, State.EXPIRED, "expired")
        if whole_session and self.requires_session and not self.is_dead_letter:
            self._expire_session(msg.session_id, now)

    def _expire_session(self, session_id: str, now: int) -> None:
        """SETTLE-SESS-009: "if there's a single message in the session that has passed the TTL, all the
        messages in the session are expired" (https://learn.microsoft.com/azure/service-bus-messaging/message-sessions).
        Those available now expire with it; a locked or deferred one keeps its own rules (SETTLE-TTL-004, SETTLE-DEFR-004)."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        members = {m.sequence_number: m for m in (*session.fresh, *(m for _, m in session.returned)) if m.state is State.ACTIVE}
        for _, other in sorted(members.items()):
            session.available -= 1
            self._expire(other, now, whole_session=False)

    def _to_dead_letter(
        self,
        msg: StoredMessage,
        now: int,
        reason: str | None,
        description: str | None,
        from_lane: bool = False,
    ) -> None:
        dlq = self.dead_letter_queue
        if self.forward_dead_letters_to is not None and self.router is not None and self._forward_dead_letter(msg, now, reason, description):
            self._remove(msg, State.DEAD_LETTERED, "dead-lettered")
            return
        self._remove(msg, State.DEAD_LETTERED, "dead-lettered", keep_bytes=dlq is not None)
        if dlq is None:
            return
        copy = StoredMessage(
            msg.message, msg.sequence_number, msg.enqueued_time, msg.expires_at, msg.size,
            State.ACTIVE, msg.delivery_count, msg.partition,
        )
        copy.dead_letter_reason = reason
        copy.dead_letter_description = description
        dlq.enqueue(copy)

    def _forward_dead_letter(self, msg: StoredMessage, now: int, reason: str | None, description: str | None) -> bool:
        """SETTLE-FWD-002: send a message being dead-lettered to ForwardDeadLetteredMessagesTo, with
        its dead-letter reason and description as application properties. A refusal keeps it here."""
        props = dict(msg.message.application_properties)
        if reason is not None:
            props[DEAD_LETTER_REASON] = reason
        if description is not None:
            props[DEAD_LETTER_ERROR_DESCRIPTION] = description
        forwarded = with_dead_letter_source(msg.message.with_changes(application_properties=props), self.path)
        try:
            self.router(self.forward_dead_letters_to, forwarded, now)
        except ServiceBusError:
            return False
        return True
