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
from typing import Callable

from .clock import NEVER
from .deadletter import DeadLettering
from .deferral import Deferral
from .errors import ErrorCode, ServiceBusError
from .lanes import Lane
from .message import (ACTIVE, COMPLETED, LOCKED, MAX_DELIVERY_COUNT_EXCEEDED, Delivery, Message, State, StoredMessage,
                      header_problem, with_properties_modified)
from .operations import PEEK_LOCK, RECEIVE_AND_DELETE  # noqa: F401 (re-exported: callers import the modes from here)
from .sessions import Session, SessionLocks

#: Observer signature: (store path, event, message record). Events are the names of the
#: transitions: "enqueued", "locked", "released", "completed", "deferred",
#: "dead-lettered", "expired", "consumed".
Observer = Callable[[str, str, StoredMessage], None]


class MessageStore(SessionLocks, Deferral, DeadLettering):
    """One queue or subscription (or its dead-letter subqueue) and its settlement rules.

    Its parts, each a state machine of its own: the lanes of available messages
    (``lanes``), session locks and state (``sessions``), deferral (``deferral``) and
    dead-lettering and expiry (``deadletter``); this module holds the lock cycle
    itself (receive, lock, settle, release) and time."""

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
        self._due = 0  # earliest instant anything above may come due (a hint, never late)

    # ----------------------------------------------------------------- copies

    def clone(self) -> "MessageStore":
        """An independent copy of this store's state, its dead-letter subqueue's too, for checkers that try
        several orders of concurrent operations from one state (``sbconform.trace.checker``): each order runs
        on its own copy. Messages (immutable) are shared; records, locks, lanes, sessions and deadlines are
        copied. Lock tokens keep coming from the same counter, so they stay unique across copies."""
        other = MessageStore.__new__(MessageStore)
        other.__dict__.update(self.__dict__)
        messages = {seq: msg.copy() for seq, msg in self.messages.items()}
        other.messages = messages
        other.locks = {token: messages[msg.sequence_number] for token, msg in self.locks.items()}
        other.lane = self.lane.clone(messages)
        other.sessions = {sid: session.clone(messages) for sid, session in self.sessions.items()}
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
            t_lock = locks[0][0] if locks else NEVER
            t_sess = sessions_dl[0][0] if sessions_dl else NEVER
            t_exp = expiries[0][0] if expiries else NEVER
            t = min(t_lock, t_sess, t_exp)  # NEVER: nothing is due
            if t > now:
                self._due = t
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
                if msg is not None and msg.state is ACTIVE and msg.expires_at == expires_at:
                    self._lane_for(msg).available -= 1
                    self._expire(msg, expires_at)

    def next_due(self) -> int | None:
        """The next instant at which ``tick`` would change something, if any. Stale entries at the front
        (settled locks, released sessions, messages gone) are dropped on the way, as ``tick`` would drop
        them, so a caller waiting on this instant never waits on something that will not happen."""
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
        if self.requires_session:
            session = self._lane_for(msg, create=True)
            session.push(msg)
            session.members += 1
        else:
            lane = self.lane
            fresh = lane.fresh
            if not fresh or seq > fresh[-1].sequence_number:
                fresh.append(msg)  # Lane.push, its usual case: the newest message goes last
                lane.available += 1
            else:
                lane.push(msg)
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
            if max_count == 1 and mode == PEEK_LOCK:
                # The usual receive: one message, under a peek-lock. Lane.pop_head's usual case, inline.
                fresh = lane.fresh
                if fresh and not lane.returned:
                    msg = fresh.popleft()
                    if msg.state is ACTIVE:
                        lane.available -= 1
                        return [self._lock(msg, holder, locked_until)]
                    fresh.appendleft(msg)  # stale (expired from the middle): pop_head drops it
                msg = lane.pop_head()
                return [self._lock(msg, holder, locked_until)] if msg is not None else []
        out: list[Delivery] = []
        if mode == PEEK_LOCK:
            track = lane is self.lane
            while len(out) < max_count:
                msg = lane.pop_head()
                if msg is None:
                    break
                out.append(self._lock(msg, holder, locked_until, track))
        else:
            while len(out) < max_count:
                msg = lane.pop_head()
                if msg is None:
                    break
                out.append(Delivery(msg, COMPLETED))
                self._remove(msg, COMPLETED, "consumed")
        return out

    def available_head(self, now: int) -> StoredMessage | None:
        """The message a receive would get next (non-session stores), without taking it."""
        self.tick(now)
        return self.lane.head()

    def set_description(self, lock_duration: int, max_delivery_count: int, dead_lettering_on_message_expiration: bool) -> None:
        """An entity update: new locks use the new duration (existing locks keep theirs)."""
        self.lock_duration = lock_duration
        self.max_delivery_count = max_delivery_count
        self.dead_lettering_on_message_expiration = dead_lettering_on_message_expiration
        if self.dead_letter_queue is not None:
            self.dead_letter_queue.set_description(lock_duration, max_delivery_count, False)

    def _lock(self, msg: StoredMessage, holder: int, locked_until: int, track: bool = True) -> Delivery:
        """SETTLE-LOCK-001: lock ``msg`` for ``holder`` until ``locked_until``, and hand it over; ``track``
        puts the deadline in the lock queue (session messages follow their session lock).
        The holder is the connection that received the message: its locks are lost with it
        (SETTLE-LOCK-009); who may settle the lock is another matter (SETTLE-LOCK-011)."""
        next_token = self.next_lock_token  # a callable attribute: read, then called (no method lookup)
        token = next_token()
        msg.state = LOCKED
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
        return Delivery(msg)

    # ---------------------------------------------------------- settlement

    def locked_message(self, now: int, holder: int, lock_token: int) -> StoredMessage:
        """The message behind a live lock of this store, or the lock-lost error.

        SETTLE-LOCK-011: a message lock belongs to the entity, not to the receiver that
        took the message: any receiver of this store may settle or renew it by its token,
        and ``holder`` (who asks) does not matter. A token of another store is unknown
        here. A lock that expired, was settled, or was lost with its connection is gone
        (SETTLE-LOCK-008, SETTLE-LOCK-009, SETTLE-COMP-002). Session messages follow the
        session lock instead: only the session's holder settles them (SETTLE-SESS-002).
        """
        if now >= self._due:
            self.tick(now)
        msg = self.locks.get(lock_token)
        if msg is not None and not self.requires_session:
            return msg  # the usual case
        if msg is not None and msg.session_id is not None and self.requires_session:
            session = self.sessions[msg.session_id]
            if session.holder != holder or not session.is_locked(now):
                raise ServiceBusError(
                    ErrorCode.SESSION_LOCK_LOST,
                    f"The session lock on session '{msg.session_id}' was lost; the message cannot be settled.",
                )
            return msg
        raise ServiceBusError(
            ErrorCode.SESSION_LOCK_LOST if self.requires_session else ErrorCode.MESSAGE_LOCK_LOST,
            "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.",
        )

    def complete(self, now: int, holder: int, lock_token: int) -> None:
        """SETTLE-COMP-001: the message is removed."""
        msg = self.locks.get(lock_token)
        if msg is None or now >= self._due or self.requires_session or self.observer is not None:
            self._remove(self.locked_message(now, holder, lock_token), COMPLETED, "completed")  # time first, a session's holder...
            return
        del self.messages[msg.sequence_number]  # the usual settlement: _remove, inline (the message and its lock end)
        del self.locks[lock_token]
        deadlines = self.lock_deadlines
        if deadlines:  # as _unlock does
            newest = deadlines.pop()
            if newest[1] != lock_token:
                deadlines.append(newest)
        msg.lock_token = msg.locked_until = msg.holder = None
        msg.state = COMPLETED
        on_remove = self.on_remove  # as next_lock_token in _lock
        if on_remove is not None:
            on_remove(msg)

    def abandon(self, now: int, holder: int, lock_token: int, properties: dict | None = None) -> None:
        """SETTLE-ABAN-001: released at once, as a failed delivery; SETTLE-MOD-001: with the
        application properties to modify set on it."""
        msg = self.locked_message(now, holder, lock_token)
        self._modify(msg, properties)
        self._release(msg, now, failed=True)

    @staticmethod
    def _modify(msg: StoredMessage, properties: dict | None) -> None:
        """SETTLE-MOD-001: a settlement's properties to modify, set on the locked message; a
        header they would take past the quota (SETTLE-SEND-009) refuses the settlement,
        before anything changes (the lock stays)."""
        if not properties:
            return
        changed = with_properties_modified(msg.message, properties)
        problem = header_problem(changed)
        if problem is not None:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The properties to modify were refused: {problem}.", transient=False)
        msg.message = changed

    def release(self, now: int, holder: int, lock_token: int) -> None:
        """The receiver hands back a message it never processed (an AMQP ``released``
        outcome, as an SDK does for prefetched messages it no longer wants): the lock
        ends and the message returns without counting a delivery."""
        msg = self.locked_message(now, holder, lock_token)
        self._release(msg, now, failed=False)

    def renew_lock(self, now: int, holder: int, lock_token: int) -> int:
        """SETTLE-LOCK-004: the lock is extended by the lock duration, from now; any receiver
        of the store may renew it (SETTLE-LOCK-011), and it stays its holder's lock
        (lost with the holder's connection: SETTLE-LOCK-009)."""
        msg = self.locked_message(now, holder, lock_token)
        if self.requires_session:
            raise ServiceBusError(
                ErrorCode.INVALID_OPERATION,
                "Session messages cannot renew their own lock; renew the session lock instead.",
            )
        msg.locked_until = now + self.lock_duration
        self._add_deadline(self.lock_deadlines, msg.locked_until, lock_token)
        return msg.locked_until

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
        """The lock ends before its deadline, which stays behind, stale (``tick`` skips it); unless it is the newest,
        as when messages are settled in the order they were received: then it leaves now (the queue does not grow)."""
        token = msg.lock_token
        del self.locks[token]
        deadlines = self.lock_deadlines
        if deadlines:
            newest = deadlines.pop()  # (taken and put back: cheaper than deadlines[-1])
            if newest[1] != token:
                deadlines.append(newest)
        msg.lock_token = msg.locked_until = msg.holder = None

    def _release(self, msg: StoredMessage, now: int, failed: bool) -> None:
        """A lock ends without settlement: back to the head, or onwards if it must."""
        self._unlock(msg)
        if failed:
            msg.delivery_count += 1
            if not self.is_dead_letter and msg.delivery_count >= self.max_delivery_count:
                # SETTLE-LOCK-007: delivered max delivery count times without success; the description as Service
                # Bus writes it, with the count (the dead-letter page paraphrases: "after maximum delivery attempts").
                self._to_dead_letter(msg, now, MAX_DELIVERY_COUNT_EXCEEDED,
                                     f"Message could not be consumed after {self.max_delivery_count} delivery attempts.")
                return
        if msg.deferred:
            self._set_deferred(msg)  # SETTLE-DEFR-004: an abandoned deferred message stays deferred
            return
        if not self.is_dead_letter and msg.expires_at <= now:
            self._expire(msg, now)  # SETTLE-TTL-004: expiry takes effect when the lock ends
            return
        msg.state = ACTIVE
        self._lane_for(msg).push(msg)
        if self.observer is not None:
            self.observer(self.path, "released", msg)

    def _remove(self, msg: StoredMessage, final: State, event: str, keep_bytes: bool = False) -> None:
        """The copy leaves this store in state ``final``, with its lock if it had one; the entity
        stops counting its bytes unless it moves on within the entity (``keep_bytes``: to the
        dead-letter subqueue)."""
        del self.messages[msg.sequence_number]
        if msg.lock_token is not None:  # settled under its lock: the lock ends with it
            self._unlock(msg)
        msg.state = final
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
