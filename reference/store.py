"""The settlement state machine of one message store.

A store is a queue, a subscription, or the dead-letter subqueue of either. It holds
message copies and moves each through the states of ``State``::

    ACTIVE --receive(peek-lock)--> LOCKED --complete--> COMPLETED
      ^                              | abandon / lock expiry / connection drop
      +------------------------------+   (failed delivery: delivery count + 1;
                                          past max delivery count -> DEAD_LETTERED)
    LOCKED --defer--> DEFERRED --receive deferred--> LOCKED (abandon returns to DEFERRED)
    LOCKED --dead-letter--> DEAD_LETTERED (a new copy in the dead-letter subqueue)
    ACTIVE --receive(receive-and-delete)--> COMPLETED
    ACTIVE --time to live passes--> EXPIRED, or DEAD_LETTERED when enabled

Time is processed lazily: every operation first calls ``tick(now)``, which settles
everything that came due (lock expiries, session lock expiries, expiries) in time order.

The delivery count kept here is the service's own counter of failed deliveries (the
AMQP header ``delivery-count``); receivers are shown it plus one, as .NET reports it,
so the first delivery shows 1 (SETTLE-LOCK-010).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from typing import Callable, Iterable

from .clock import NEVER
from .errors import ErrorCode, ServiceBusError
from .message import (
    DEAD_LETTER_ERROR_DESCRIPTION,
    DEAD_LETTER_REASON,
    MAX_DELIVERY_COUNT_EXCEEDED,
    Message,
    TTL_EXPIRED,
    Delivery,
    State,
    StoredMessage,
)

PEEK_LOCK = "peek-lock"
RECEIVE_AND_DELETE = "receive-and-delete"

#: Observer signature: (store path, event, message record). Events are the names of the
#: transitions: "enqueued", "locked", "released", "completed", "deferred",
#: "dead-lettered", "expired", "consumed".
Observer = Callable[[str, str, StoredMessage], None]

_LOCKED = State.LOCKED  # a module constant: read on every receive


class Lane:
    """The available messages of one FIFO, in sequence-number order.

    New messages arrive with increasing sequence numbers and go to the back of
    ``fresh``; a message released back (abandon, lock expiry) goes into ``returned``, a
    heap, and so comes before every newer message (SETTLE-LOCK-006). Entries may be
    stale (a message expired from the middle): ``head`` skips them.
    """

    __slots__ = ("fresh", "returned", "available")

    def __init__(self) -> None:
        self.fresh: deque[int] = deque()
        self.returned: list[int] = []
        self.available = 0

    def _copy_into(self, other: "Lane") -> "Lane":
        other.fresh = deque(self.fresh)
        other.returned = list(self.returned)
        other.available = self.available
        return other

    def clone(self) -> "Lane":
        return self._copy_into(Lane())

    def push(self, seq: int) -> None:
        fresh = self.fresh
        if not fresh or seq > fresh[-1]:
            fresh.append(seq)
        else:
            heapq.heappush(self.returned, seq)
        self.available += 1

    def head(self, messages: dict[int, StoredMessage]) -> StoredMessage | None:
        """The oldest available message, dropping stale entries on the way."""
        fresh, returned = self.fresh, self.returned
        while True:
            if returned and (not fresh or returned[0] < fresh[0]):
                seq = returned[0]
                source = returned
            elif fresh:
                seq = fresh[0]
                source = fresh
            else:
                return None
            msg = messages.get(seq)
            if msg is not None and msg.state is State.ACTIVE:
                return msg
            if source is fresh:
                fresh.popleft()
            else:
                heapq.heappop(returned)

    def pop_head(self, messages: dict[int, StoredMessage]) -> StoredMessage | None:
        """Take the oldest available message out of the lane."""
        fresh, returned = self.fresh, self.returned
        while True:
            if returned and (not fresh or returned[0] < fresh[0]):
                seq = heapq.heappop(returned)
            elif fresh:
                seq = fresh.popleft()
            else:
                return None
            msg = messages.get(seq)
            if msg is not None and msg.state is State.ACTIVE:
                self.available -= 1
                return msg


class Session(Lane):
    """A session: its own FIFO, its session lock and its session state (SETTLE-SESS-*)."""

    __slots__ = ("session_id", "holder", "locked_until", "state", "members")

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id
        self.holder: int | None = None
        self.locked_until = 0
        self.state: bytes | None = None
        self.members = 0  # live messages of this session in the store

    def is_locked(self, now: int) -> bool:
        return self.holder is not None and now < self.locked_until

    def clone(self) -> "Session":
        other = self._copy_into(Session(self.session_id))
        other.holder, other.locked_until, other.state, other.members = self.holder, self.locked_until, self.state, self.members
        return other


class MessageStore:
    """One queue or subscription (or its dead-letter subqueue) and its settlement rules."""

    def __init__(
        self,
        path: str,
        lock_duration: int,
        max_delivery_count: int,
        dead_lettering_on_message_expiration: bool = False,
        requires_session: bool = False,
        dead_letter: "MessageStore | None" = None,
        on_remove: Callable[[StoredMessage], None] | None = None,
        is_dead_letter: bool = False,
        next_lock_token: Callable[[], int] | None = None,
    ) -> None:
        self.path = path
        self.lock_duration = lock_duration
        self.max_delivery_count = max_delivery_count
        self.dead_lettering_on_message_expiration = dead_lettering_on_message_expiration
        self.requires_session = requires_session
        self.dead_letter_queue = dead_letter
        self.is_dead_letter = is_dead_letter
        self.parent: MessageStore | None = None  # for a dead-letter queue, the store it belongs to
        if dead_letter is not None:
            dead_letter.parent = self
        self.on_remove = on_remove
        self.next_lock_token = next_lock_token or itertools.count(1).__next__
        self.observer: Observer | None = None
        #: SETTLE-FWD-002: where dead-lettered messages go instead of the dead-letter subqueue,
        #: and how (set by the namespace: its auto-forwarding router).
        self.forward_dead_letters_to: str | None = None
        self.router: Callable[[str, "Message", int], None] | None = None
        self.messages: dict[int, StoredMessage] = {}  # live copies by sequence number
        self.locks: dict[int, StoredMessage] = {}  # lock token -> locked message
        self.lane = Lane()
        self.sessions: dict[str, Session] = {}
        # Lock deadlines in the order they were set. Every lock lasts lock_duration from
        # "now" and now never goes back, so appending keeps the deque sorted.
        self.lock_deadlines: deque[tuple[int, int]] = deque()
        self.session_deadlines: deque[tuple[int, str]] = deque()
        self.expiries: list[tuple[int, int]] = []  # heap of (expires_at, seq)
        self.deferred_count = 0
        self.bytes = 0
        self._due = 0  # earliest instant anything above may come due (a hint, never late)

    # ----------------------------------------------------------------- copies

    def clone(self) -> "MessageStore":
        """An independent copy of this store's state, its dead-letter subqueue's too.

        For checkers that try several orders of concurrent operations from one state
        (``sbconform.trace.checker``): each order runs on its own copy. Messages
        (immutable) are shared; records, locks, lanes, sessions and deadlines are copied.
        Lock tokens keep coming from the same counter, so they stay unique across copies.
        """
        other = MessageStore.__new__(MessageStore)
        other.__dict__.update(self.__dict__)
        messages = {seq: msg.copy() for seq, msg in self.messages.items()}
        other.messages = messages
        other.locks = {token: messages[msg.sequence_number] for token, msg in self.locks.items()}
        other.lane = self.lane.clone()
        other.sessions = {sid: session.clone() for sid, session in self.sessions.items()}
        other.lock_deadlines = deque(self.lock_deadlines)
        other.session_deadlines = deque(self.session_deadlines)
        other.expiries = list(self.expiries)
        if self.dead_letter_queue is not None:
            other.dead_letter_queue = self.dead_letter_queue.clone()
            other.dead_letter_queue.parent = other
        return other

    # ------------------------------------------------------------------ time

    def tick(self, now: int) -> None:
        """Process, in time order, everything that came due up to ``now``."""
        if now < self._due:
            return
        locks, sessions_dl, expiries = self.lock_deadlines, self.session_deadlines, self.expiries
        while True:
            t_lock = locks[0][0] if locks else None
            t_sess = sessions_dl[0][0] if sessions_dl else None
            t_exp = expiries[0][0] if expiries else None
            t = min((x for x in (t_lock, t_sess, t_exp) if x is not None), default=None)
            if t is None or t > now:
                self._due = t if t is not None else NEVER
                return
            if t == t_lock:
                deadline, token = locks.popleft()
                msg = self.locks.get(token)
                if msg is not None and msg.locked_until == deadline and msg.holder is not None:
                    # SETTLE-LOCK-005: an expired lock counts as a failed delivery.
                    self._release(msg, deadline, failed=True)
            elif t == t_sess:
                deadline, sid = sessions_dl.popleft()
                session = self.sessions.get(sid)
                if session is not None and session.holder is not None and session.locked_until == deadline:
                    self._drop_session_lock(session, deadline, failed=True)  # SETTLE-SESS-007
            else:
                expires_at, seq = heapq.heappop(expiries)
                msg = self.messages.get(seq)
                if msg is not None and msg.state is State.ACTIVE and msg.expires_at == expires_at:
                    self._lane_for(msg).available -= 1
                    self._expire(msg, expires_at)

    def next_due(self) -> int | None:
        """The next instant at which ``tick`` would change something, if any.

        Stale entries at the front (settled locks, released sessions, messages gone)
        are dropped on the way, as ``tick`` would drop them, so a caller waiting on this
        instant never waits on something that will not happen."""
        times = []
        locks = self.lock_deadlines
        while locks:
            deadline, token = locks[0]
            msg = self.locks.get(token)
            if msg is not None and msg.locked_until == deadline and msg.holder is not None:
                times.append(deadline)
                break
            locks.popleft()
        sessions_dl = self.session_deadlines
        while sessions_dl:
            deadline, sid = sessions_dl[0]
            session = self.sessions.get(sid)
            if session is not None and session.holder is not None and session.locked_until == deadline:
                times.append(deadline)
                break
            sessions_dl.popleft()
        expiries = self.expiries
        while expiries:
            expires_at, seq = expiries[0]
            msg = self.messages.get(seq)
            if msg is not None and msg.expires_at == expires_at:
                times.append(expires_at)
                break
            heapq.heappop(expiries)
        return min(times) if times else None

    # ------------------------------------------------------------ arrivals

    def enqueue(self, msg: StoredMessage) -> None:
        """A message copy arrives (sent, activated from schedule, or dead-lettered in)."""
        seq = msg.sequence_number
        self.messages[seq] = msg
        self.bytes += msg.size
        if self.requires_session:
            session = self._lane_for(msg, create=True)
            session.push(seq)
            session.members += 1
        else:
            lane = self.lane
            fresh = lane.fresh
            if not fresh or seq > fresh[-1]:
                fresh.append(seq)  # Lane.push, its usual case: the newest message goes last
                lane.available += 1
            else:
                lane.push(seq)
        if msg.expires_at < NEVER and not self.is_dead_letter:
            heapq.heappush(self.expiries, (msg.expires_at, seq))
            if msg.expires_at < self._due:
                self._due = msg.expires_at
        if self.observer is not None:
            self.observer(self.path, "enqueued", msg)

    def _lane_for(self, msg: StoredMessage, create: bool = False) -> Lane:
        if not self.requires_session:
            return self.lane
        sid = msg.session_id
        session = self.sessions.get(sid)
        if session is None:
            if not create:
                raise KeyError(sid)
            session = self.sessions[sid] = Session(sid)
        return session

    # ------------------------------------------------------------- receive

    def receive(
        self,
        now: int,
        holder: int,
        max_count: int,
        mode: str,
        session_id: str | None = None,
        choose: object = None,
    ) -> list[Delivery]:
        """Hand over up to ``max_count`` available messages, oldest first.

        Peek-lock locks each for the store's lock duration on behalf of ``holder``
        (SETTLE-LOCK-001/002); receive-and-delete settles each as it goes (SETTLE-RECV-001).
        """
        if now >= self._due:
            self.tick(now)
        if self.requires_session:
            lane = self._held_session(now, holder, session_id)
            locked_until = lane.locked_until  # a session message's lock is the session lock (SETTLE-SESS-003)
        else:
            if session_id is not None:
                raise ServiceBusError(
                    ErrorCode.INVALID_OPERATION,
                    "A sessionful message receiver cannot be created on an entity that does not require sessions.",
                )
            lane = self.lane
            locked_until = now + self.lock_duration
        out: list[Delivery] = []
        messages = self.messages
        if mode == PEEK_LOCK:
            track = lane is self.lane
            for _ in range(max_count):
                msg = lane.pop_head(messages)
                if msg is None:
                    break
                self._lock(msg, holder, locked_until, track)
                out.append(Delivery(msg))
        else:
            for _ in range(max_count):
                msg = lane.pop_head(messages)
                if msg is None:
                    break
                out.append(Delivery(msg, State.COMPLETED))
                self._remove(msg, State.COMPLETED, "consumed")
        return out

    def available_head(self, now: int) -> StoredMessage | None:
        """The message a receive would get next (non-session stores), without taking it."""
        self.tick(now)
        return self.lane.head(self.messages)

    def set_description(self, lock_duration: int, max_delivery_count: int, dead_lettering_on_message_expiration: bool) -> None:
        """An entity update: new locks use the new duration (existing locks keep theirs)."""
        self.lock_duration = lock_duration
        self.max_delivery_count = max_delivery_count
        self.dead_lettering_on_message_expiration = dead_lettering_on_message_expiration
        if self.dead_letter_queue is not None:
            self.dead_letter_queue.set_description(lock_duration, max_delivery_count, False)

    def _lock(self, msg: StoredMessage, holder: int, locked_until: int, track: bool = True) -> None:
        """SETTLE-LOCK-001: lock ``msg`` for ``holder`` until ``locked_until``; ``track``
        puts the deadline in the lock queue (session messages follow their session lock)."""
        token = self.next_lock_token()
        msg.state = _LOCKED
        msg.lock_token = token
        msg.locked_until = locked_until
        msg.holder = holder
        self.locks[token] = msg
        if track:
            deadlines = self.lock_deadlines
            if deadlines and locked_until < deadlines[-1][0]:
                self._add_deadline(deadlines, locked_until, token)  # only after a shorter lock duration
            else:
                deadlines.append((locked_until, token))
                if locked_until < self._due:
                    self._due = locked_until
        if self.observer is not None:
            self.observer(self.path, "locked", msg)

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

    # ---------------------------------------------------------- settlement

    def locked_message(self, now: int, holder: int, lock_token: int) -> StoredMessage:
        """The message behind a lock this holder still owns, or the lock-lost error.

        A lock that expired, was settled, or was lost with its connection is gone
        (SETTLE-LOCK-008, SETTLE-LOCK-009); so is a lock held by someone else.
        """
        if now >= self._due:
            self.tick(now)
        msg = self.locks.get(lock_token)
        if msg is not None and msg.holder == holder and not self.requires_session:
            return msg  # the usual case
        if msg is not None and msg.session_id is not None and self.requires_session:
            session = self.sessions[msg.session_id]
            if session.holder != holder or not session.is_locked(now):
                raise ServiceBusError(
                    ErrorCode.SESSION_LOCK_LOST,
                    f"The session lock on session '{msg.session_id}' was lost; the message cannot be settled.",
                )
            return msg
        if msg is None or msg.holder != holder:
            raise ServiceBusError(
                ErrorCode.SESSION_LOCK_LOST if self.requires_session else ErrorCode.MESSAGE_LOCK_LOST,
                "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.",
            )
        return msg

    def complete(self, now: int, holder: int, lock_token: int) -> None:
        """SETTLE-COMP-001: the message is removed."""
        msg = self.locked_message(now, holder, lock_token)
        self._unlock(msg)
        self._remove(msg, State.COMPLETED, "completed")

    def abandon(self, now: int, holder: int, lock_token: int) -> None:
        """SETTLE-ABAN-001: released at once, as a failed delivery."""
        msg = self.locked_message(now, holder, lock_token)
        self._release(msg, now, failed=True)

    def release(self, now: int, holder: int, lock_token: int) -> None:
        """The receiver hands back a message it never processed (an AMQP ``released``
        outcome, as an SDK does for prefetched messages it no longer wants): the lock
        ends and the message returns without counting a delivery."""
        msg = self.locked_message(now, holder, lock_token)
        self._release(msg, now, failed=False)

    def defer(self, now: int, holder: int, lock_token: int) -> None:
        """SETTLE-DEFR-001: set aside; receivable only by sequence number."""
        msg = self.locked_message(now, holder, lock_token)
        self._unlock(msg)
        self._set_deferred(msg)

    def dead_letter(
        self,
        now: int,
        holder: int,
        lock_token: int,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        """SETTLE-DLQ-002: moved to the dead-letter subqueue with reason and description."""
        if self.is_dead_letter:
            self.locked_message(now, holder, lock_token)
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION, "A message cannot be dead-lettered from the dead-letter queue."
            )
        msg = self.locked_message(now, holder, lock_token)
        self._unlock(msg)
        self._to_dead_letter(msg, now, reason, description)

    def renew_lock(self, now: int, holder: int, lock_token: int) -> int:
        """SETTLE-LOCK-004: the holder extends the lock by the lock duration, from now."""
        msg = self.locked_message(now, holder, lock_token)
        if self.requires_session:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                "Session messages cannot renew their own lock; renew the session lock instead.",
            )
        msg.locked_until = now + self.lock_duration
        self._add_deadline(self.lock_deadlines, msg.locked_until, lock_token)
        return msg.locked_until

    # ------------------------------------------------------------- deferred

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
                self._lock(msg, holder, locked_until, track=session is None)
                out.append(Delivery(msg))
            else:
                out.append(Delivery(msg, State.COMPLETED))
                self._remove(msg, State.COMPLETED, "consumed")
        return out

    # ---------------------------------------------------------------- peek

    def peek(self, now: int, from_sequence_number: int, max_count: int, session_id: str | None = None) -> list[Delivery]:
        """SETTLE-PEEK-001: browse live messages in sequence order, locking nothing."""
        self.tick(now)
        seqs = [
            seq
            for seq, msg in self.messages.items()
            if seq >= from_sequence_number and (session_id is None or msg.session_id == session_id)
        ]
        chosen = heapq.nsmallest(max_count, seqs) if len(seqs) > max_count else sorted(seqs)
        return [Delivery(self.messages[seq]) for seq in chosen]

    # ------------------------------------------------------------ sessions

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
                head = session.head(self.messages)
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

    def set_session_state(self, now: int, holder: int, session_id: str, state: bytes | None) -> None:
        """SETTLE-SESS-005: the state outlives the session lock, until set to empty."""
        self._held_session_after_tick(now, holder, session_id).state = state or None

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

    # ---------------------------------------------------------- connections

    def drop_holder(self, now: int, holder: int) -> None:
        """SETTLE-LOCK-009: a dropped connection loses every lock it held.

        The messages become available again at once, counted as a failed delivery.
        """
        self.tick(now)
        for msg in [m for m in self.locks.values() if m.holder == holder and not self.requires_session]:
            self._release(msg, now, failed=True)
        for session in list(self.sessions.values()):  # dropping a lock may forget an idle session
            if session.holder == holder:
                self._drop_session_lock(session, now, failed=True)

    # ------------------------------------------------------------ internals

    def _add_deadline(self, deadlines: deque, deadline: int, key: object) -> None:
        """Keep deadlines sorted. With one lock duration they arrive in order (an append);
        after an update shortened it, a new deadline may belong earlier."""
        if deadlines and deadline < deadlines[-1][0]:
            bisect.insort(deadlines, (deadline, key))
        else:
            deadlines.append((deadline, key))
        if deadline < self._due:
            self._due = deadline

    def _unlock(self, msg: StoredMessage) -> None:
        del self.locks[msg.lock_token]
        msg.lock_token = None
        msg.locked_until = None
        msg.holder = None

    def _release(self, msg: StoredMessage, now: int, failed: bool) -> None:
        """A lock ends without settlement: back to the head, or onwards if it must."""
        self._unlock(msg)
        if failed:
            msg.delivery_count += 1
            if not self.is_dead_letter and msg.delivery_count >= self.max_delivery_count:
                # SETTLE-LOCK-007: delivered max delivery count times without success.
                self._to_dead_letter(
                    msg, now, MAX_DELIVERY_COUNT_EXCEEDED, "Message could not be consumed after maximum delivery attempts."
                )
                return
        if msg.deferred:
            self._set_deferred(msg)  # SETTLE-DEFR-004: an abandoned deferred message stays deferred
            return
        if not self.is_dead_letter and msg.expires_at <= now:
            self._expire(msg, now)  # SETTLE-TTL-004: expiry takes effect when the lock ends
            return
        msg.state = State.ACTIVE
        self._lane_for(msg).push(msg.sequence_number)
        if self.observer is not None:
            self.observer(self.path, "released", msg)

    def _set_deferred(self, msg: StoredMessage) -> None:
        msg.state = State.DEFERRED
        msg.deferred = False
        self.deferred_count += 1
        if self.observer is not None:
            self.observer(self.path, "deferred", msg)

    def _expire(self, msg: StoredMessage, now: int) -> None:
        """SETTLE-TTL-002/003: an expired message is dropped or dead-lettered."""
        if self.dead_lettering_on_message_expiration:
            self._to_dead_letter(msg, now, TTL_EXPIRED, "The message expired and was dead lettered.", from_lane=True)
        else:
            self._remove(msg, State.EXPIRED, "expired")

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
        try:
            self.router(self.forward_dead_letters_to, msg.message.with_changes(application_properties=props), now)
        except ServiceBusError:
            return False
        return True

    def _remove(self, msg: StoredMessage, final: State, event: str, keep_bytes: bool = False) -> None:
        """The copy leaves this store in state ``final``; the entity stops counting its bytes
        unless it moves on within the entity (``keep_bytes``: to the dead-letter subqueue)."""
        del self.messages[msg.sequence_number]
        msg.state = final
        self.bytes -= msg.size
        if self.requires_session:
            self._forget_idle_session(msg.session_id, -1)
        if self.observer is not None:
            self.observer(self.path, event, msg)
        if self.on_remove is not None and not keep_bytes:
            self.on_remove(msg)

    # ------------------------------------------------------------- counts

    def counts(self) -> dict[str, int]:
        active = sum(1 for m in self.messages.values() if m.state in (State.ACTIVE, State.LOCKED))
        return {
            "active": active,
            "deferred": self.deferred_count,
            "dead_letter": len(self.dead_letter_queue.messages) if self.dead_letter_queue is not None else 0,
        }


