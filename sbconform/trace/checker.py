"""The trace checker: replays one piece of a trace through the reference model.

A **piece** is everything that happens to one entity: a queue (with its dead-letter
subqueue and, when partitioned, all its partitions, so that a key's partition can be
compared across partitions: PART-KEY-006). Pieces are independent, so a trace can be
split by piece and checked in parallel (``sbconform.trace.replay``).

The model is ``reference.store.MessageStore``, the settlement state machine the
``Namespace`` itself uses, one per partition; this module only maps what the trace
observed (lock tokens as text, clients, sequence numbers) onto it and compares each
observed result with what the model allows. No second model lives here.

Concurrency. Operations of a piece whose invoke..completion intervals overlap form a
*window*. The checker first applies each operation at its completion, in completion
order (the fast path, most windows pass). If an operation of a window does not match,
the checker goes back to a copy of the state taken when the window became concurrent
(``MessageStore.clone``) and tries every order the intervals allow (a depth-first
search, at most ``search_bound`` model steps per window); an operation with an unknown
outcome (``info``, or still pending at the end) is tried both as happened and as not
happened. Only if no order fits is it a violation; if the search runs out of steps, or
the trace holds operations the checker does not model, the piece is *unknown*, with the
reason. A violation is never reported on a guess.

Each piece stops at its first violation, named with the clause it breaks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from reference.clock import NEVER, TIMESPAN_MAX
from reference.entity import PING_CONTENT_TYPE, effective_time_to_live
from reference.errors import ServiceBusError
from reference.message import Message, State, StoredMessage
from reference.partitioning import partition_key, partition_of
from reference.store import PEEK_LOCK, MessageStore

from .schema import FIELD_NAMES

# Row layout: a tuple in FIELD_NAMES order.
(TRACE, POS, TIME, CLIENT, CONN, OP_ID, OP, PHASE, ENTITY, PARTITION, MESSAGE_ID, SEQ, LOCK,
 DELIVERY_COUNT, SESSION, PARTITION_KEY, ARGS, RESULT, ERROR) = range(len(FIELD_NAMES))

DLQ_SUFFIX = "/$deadletterqueue"
SUBSCRIPTIONS = "/subscriptions/"
DEFAULT_SEARCH_BOUND = 2000
MAX_CANDIDATES = 64
#: operations between checkpoints of the state (a window needing the search rebuilds its
#: start from the last checkpoint: more often costs copies, less often costs replays)
CHECKPOINT_EVERY = 128
REMEMBER_REMOVED = 20_000

#: The clause each kind of violation breaks.
CLAUSES = {
    "lost-message": "SETTLE-SEND-001",
    "out-of-order": "SETTLE-RECV-002",
    "out-of-order-session": "SETTLE-SESS-003",
    "out-of-order-key": "PART-KEY-007",
    "not-a-partition-head": "PART-RECV-001",
    "double-delivery": "SETTLE-LOCK-001",
    "settled-after-lock-expiry": "SETTLE-LOCK-008",
    "settled-by-other-holder": "SETTLE-LOCK-011",
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


def piece_key(entity: str | None) -> str:
    """The piece an entity path belongs to: the queue or topic, lower case."""
    if entity is None:
        return ""
    path = entity.lower()
    cut = path.find(SUBSCRIPTIONS)
    if cut >= 0:
        return path[:cut]
    if path.endswith(DLQ_SUFFIX):
        return path[: -len(DLQ_SUFFIX)]
    return path


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


@dataclass
class Shared:
    """What every copy of a piece's state may share: facts fixed by observation alone."""

    holders: dict = field(default_factory=dict)  # client/connection -> model holder id
    key_partitions: dict = field(default_factory=dict)  # partition key -> first observed partition
    pings: set = field(default_factory=set)  # sequence numbers (and ids) of pings sent
    removed: dict = field(default_factory=dict)  # seq -> how it left (completed, consumed, expired, dead-lettered)
    args: dict = field(default_factory=dict)  # args text -> parsed
    forgotten: dict = field(default_factory=dict)  # observed lock -> its last locked-until, once pruned

    def observe(self, path: str, event: str, msg: StoredMessage) -> None:
        if event in ("completed", "consumed", "expired", "dead-lettered"):
            removed = self.removed
            if len(removed) >= REMEMBER_REMOVED:
                del removed[next(iter(removed))]
            removed[msg.sequence_number] = event


class PieceModel:
    """The model state of one piece: a ``MessageStore`` per partition, and the map from
    observed lock tokens to the model's."""

    __slots__ = ("config", "stores", "locks", "shared", "now", "tokens")

    def __init__(self, shared: Shared, config: dict | None = None) -> None:
        self.shared = shared
        self.config = config or {}
        self.stores: dict[int, MessageStore] = {}
        self.locks: dict[str, tuple] = {}  # observed lock -> (partition, in_dlq, token, seq, locked_until)
        self.now = 0
        self.tokens = [0]

    def clone(self) -> "PieceModel":
        other = PieceModel.__new__(PieceModel)
        other.shared = self.shared
        other.config = self.config
        other.stores = {p: s.clone() for p, s in self.stores.items()}
        other.locks = dict(self.locks)  # entries are tuples
        other.now = self.now
        other.tokens = self.tokens
        return other

    def signature(self) -> tuple:
        """Everything later answers depend on, free of the model's lock-token numbering: two
        states with one signature accept and refuse the same futures. Orders of commuting
        operations (and unknown outcomes that changed nothing) end in equal states, which
        the checker keeps once (``distinct``)."""
        parts: list = [self.now]
        for p in sorted(self.stores):
            top = self.stores[p]
            for st in (top, top.dead_letter_queue):
                parts.append(tuple(sorted(
                    (m.sequence_number, m.state.value, m.delivery_count, m.holder, m.locked_until, m.deferred)
                    for m in st.messages.values())))
                parts.append(tuple(sorted((sid, x.holder, x.locked_until, x.state) for sid, x in st.sessions.items())))
        live = {(p, dl): st.locks for p, s in self.stores.items() for dl, st in ((False, s), (True, s.dead_letter_queue))}
        parts.append(tuple(sorted(
            (str(obs), part, dl, seq, until, token in live.get((part, dl), ()))
            for obs, (part, dl, token, seq, until) in self.locks.items())))
        return tuple(parts)

    # ---------------------------------------------------------------- stores
    def _next_token(self) -> int:
        self.tokens[0] += 1
        return self.tokens[0]

    def store(self, partition: int) -> MessageStore:
        store = self.stores.get(partition)
        if store is None:
            c = self.config
            lock = c.get("lock_duration", 60_000)
            mdc = c.get("max_delivery_count", 10)
            dlq = MessageStore("dlq", lock, mdc, is_dead_letter=True, next_lock_token=self._next_token)
            store = MessageStore("q", lock, mdc, c.get("dead_lettering_on_message_expiration", False),
                                 c.get("requires_session", False), dead_letter=dlq, next_lock_token=self._next_token)
            store.observer = dlq.observer = self.shared.observe
            self.stores[partition] = store
        return store

    def _partition(self, row: tuple, seq: int | None) -> int:
        if not self.config.get("enable_partitioning"):
            return 0
        if row[PARTITION] is not None:
            return row[PARTITION]
        return partition_of(seq) if seq is not None else 0

    def _holder(self, row: tuple) -> int:
        who = row[CONN] if row[CONN] is not None else row[CLIENT]
        holders = self.shared.holders
        h = holders.get(who)
        if h is None:
            h = holders[who] = len(holders) + 1
        return h

    def _args(self, row: tuple) -> dict:
        text = row[ARGS]
        if text is None:
            return {}
        cache = self.shared.args
        parsed = cache.get(text)
        if parsed is None:
            parsed = json.loads(text)
            if len(cache) < 4096:
                cache[text] = parsed
        return parsed

    def _tick_time(self, row: tuple) -> int:
        t = row[TIME]
        if t > self.now:
            self.now = t
        return self.now

    # -------------------------------------------------------------- apply
    def apply(self, inv: tuple, comps: list, check: bool = True) -> None:
        """Apply one operation (its invoke and completion events); raise ``Violation``
        if ``check`` and the model does not allow what was observed."""
        if comps and comps[0][PHASE] == "fail":
            return  # it did not happen
        handler = _HANDLERS.get(inv[OP])
        if handler is None:
            raise Undecidable(f"operation {inv[OP]!r} (pos {inv[POS]}) is not modelled by the replay checker")
        handler(self, inv, comps, check)

    # -- management
    def _create(self, inv, comps, check):
        args = self._args(inv)
        self.config = {k: v for k, v in args.items()}
        self.stores = {}
        self.locks = {}
        if self.config.get("requires_session") and self.config.get("enable_partitioning"):
            raise Undecidable("partitioned session entities are not modelled by the replay checker yet")

    def _delete(self, inv, comps, check):
        self.stores = {}
        self.locks = {}

    # -- send
    def _send(self, inv, comps, check):
        if not comps:  # unknown outcome: "happened" cannot be placed without its number
            return
        row = comps[0]
        seq = row[SEQ]
        mid = row[MESSAGE_ID] if row[MESSAGE_ID] is not None else inv[MESSAGE_ID]
        session = row[SESSION] if row[SESSION] is not None else inv[SESSION]
        pkey = row[PARTITION_KEY] if row[PARTITION_KEY] is not None else inv[PARTITION_KEY]
        args = self._args(inv)
        if seq is None:
            raise Undecidable(f"send ok without a sequence number (pos {row[POS]}): its place in the FIFO is unknown")
        if args.get("scheduled") is not None:
            raise Undecidable(f"scheduled sends are not modelled by the replay checker yet (pos {row[POS]})")
        config = self.config
        message = Message(message_id=mid, session_id=session, partition_key=pkey,
                          time_to_live=args.get("ttl"), content_type=args.get("content_type"))
        p = self._partition(row, seq)
        if config.get("enable_partitioning"):
            key = partition_key(message, config.get("requires_duplicate_detection", False))
            if key is not None:
                first = self.shared.key_partitions.setdefault(key, p)
                if check and first != p:
                    kind = "wrong-session-partition" if session is not None else "wrong-partition"
                    raise Violation(kind, row, f"partition {first} (where key {key!r} went first)", f"partition {p}")
        if message.content_type == PING_CONTENT_TYPE:
            self.shared.pings.add(seq)  # PAIR-PING-002: never stored, never delivered
            return
        now = self._tick_time(row)
        store = self.store(p)
        ttl = effective_time_to_live(message.time_to_live, config.get("default_message_time_to_live", TIMESPAN_MAX))
        store.enqueue(StoredMessage(message, seq, now, NEVER if ttl >= TIMESPAN_MAX else now + ttl, 0, partition=p))

    # -- receive
    def _receive(self, inv, comps, check):
        args = self._args(inv)
        mode = args.get("mode", PEEK_LOCK)
        session = inv[SESSION] if inv[SESSION] is not None else args.get("session")
        holder = self._holder(inv)
        dead_letter = (inv[ENTITY] or "").lower().endswith(DLQ_SUFFIX)
        for row in comps:
            now = self._tick_time(row)
            seq = row[SEQ]
            if seq is None and row[MESSAGE_ID] is None:
                if check:
                    self._check_nothing_available(row, now, session, dead_letter)
                continue
            p = self._partition(row, seq)
            store = self.store(p)
            if dead_letter:
                store.tick(now)  # lock expiries there may dead-letter messages (SETTLE-LOCK-007)
                store = store.dead_letter_queue
            if check:
                self._check_delivery(store, row, seq, now, session)
            got = store.receive(now, holder, 1, mode, session)
            if not got or got[0].sequence_number != seq:
                if check:
                    raise Violation("out-of-order", row, "the head", f"seq {seq}")
                continue
            d = got[0]
            if check and row[DELIVERY_COUNT] is not None and row[DELIVERY_COUNT] != d.delivery_count:
                kind = "max-delivery-count-exceeded" if row[DELIVERY_COUNT] > store.max_delivery_count else "wrong-delivery-count"
                raise Violation(kind, row, f"delivery count {d.delivery_count} (max {store.max_delivery_count})",
                                f"delivery count {row[DELIVERY_COUNT]}")
            if d.lock_token is not None and row[LOCK] is not None:
                self._remember_lock(row[LOCK], p, dead_letter, d.lock_token, seq, d.locked_until)

    def _remember_lock(self, lock, p, dead_letter, token, seq, locked_until):
        self.locks[lock] = (p, dead_letter, token, seq, locked_until)

    def prune_locks(self) -> None:
        """Forget observed locks the model no longer holds (expired, lost with their
        connection). A settlement with one is then refused as a lock never issued: the
        same answer, under ``settled-by-other-holder`` instead of the precise kind."""
        locks = self.locks
        if len(locks) < 32:
            return
        live = {(p, dl, t) for p, s in self.stores.items() for dl, st in ((False, s), (True, s.dead_letter_queue)) for t in st.locks}
        if len(live) < len(locks):
            kept = {}
            forgotten = self.shared.forgotten
            for k, v in locks.items():
                if (v[0], v[1], v[2]) in live:
                    kept[k] = v
                else:
                    if len(forgotten) >= REMEMBER_REMOVED:
                        del forgotten[next(iter(forgotten))]
                    forgotten[k] = v[4]
            self.locks = kept

    def _check_nothing_available(self, row, now, session, dead_letter):
        for p, store in self.stores.items():
            store.tick(now)
            if dead_letter:
                store = store.dead_letter_queue
            lane = store.sessions.get(session) if session is not None else store.lane
            if lane is None:
                continue
            if session is not None and store.requires_session and (lane.holder is None or not lane.is_locked(now)):
                continue
            head = lane.head(store.messages)
            if head is not None:
                raise Violation("lost-message", row, f"message seq {head.sequence_number} ({head.message.message_id})",
                                "an empty receive", seq=head.sequence_number, message_id=head.message.message_id,
                                watch=head.sequence_number)

    def _check_delivery(self, store: MessageStore, row, seq, now, session):
        shared = self.shared
        if seq in shared.pings:
            raise Violation("ping-delivered", row, "pings are never delivered", f"ping seq {seq} delivered")
        store.tick(now)
        msg = store.messages.get(seq)
        if msg is None:
            how = shared.removed.get(seq)
            kind = {"completed": "delivered-after-complete", "consumed": "delivered-after-receive-and-delete",
                    "expired": "delivered-after-expiry", "dead-lettered": "delivered-after-dead-letter"}.get(how, "unknown-message")
            if kind == "delivered-after-dead-letter" and row[DELIVERY_COUNT] is not None and row[DELIVERY_COUNT] > store.max_delivery_count:
                kind = "max-delivery-count-exceeded"
            raise Violation(kind, row, f"no live message seq {seq}" + (f" (it was {how})" if how else ""), f"delivered seq {seq}")
        if msg.state is State.LOCKED:
            raise Violation("double-delivery", row, f"seq {seq} locked by another receiver until {msg.locked_until}",
                            f"delivered seq {seq} at {now}")
        if msg.state is State.DEFERRED:
            raise Violation("deferred-delivered", row, f"seq {seq} deferred", f"delivered by a plain receive")
        if store.requires_session:
            sess = store.sessions.get(session) if session is not None else None
            if sess is None or sess.holder != self._holder(row) or not sess.is_locked(now):
                raise Violation("session-lock", row, f"session {session!r} locked by this receiver", "not held")
            lane = sess
            kind = "out-of-order-session"
        else:
            lane = store.lane
            kind = "out-of-order-key" if msg.message.partition_key is not None and self.config.get("enable_partitioning") else "out-of-order"
        head = lane.head(store.messages)
        if head is not msg:
            expected = head.sequence_number if head is not None else None
            raise Violation(kind, row, f"head seq {expected}", f"seq {seq}", watch=expected)

    def _receive_deferred(self, inv, comps, check):
        args = self._args(inv)
        mode = args.get("mode", PEEK_LOCK)
        holder = self._holder(inv)
        session = inv[SESSION] if inv[SESSION] is not None else args.get("session")
        for row in comps:
            seq = row[SEQ]
            if seq is None:
                continue
            now = self._tick_time(row)
            p = self._partition(row, seq)
            store = self.store(p)
            try:
                got = store.receive_deferred(now, holder, [seq], mode, session)
            except ServiceBusError as error:
                if check:
                    raise Violation("deferred-not-found", row, f"{error.code}", f"deferred seq {seq} delivered") from None
                continue
            if check and row[DELIVERY_COUNT] is not None and got[0].delivery_count != row[DELIVERY_COUNT]:
                raise Violation("wrong-delivery-count", row, f"delivery count {got[0].delivery_count}", f"{row[DELIVERY_COUNT]}")
            if got[0].lock_token is not None and row[LOCK] is not None:
                self._remember_lock(row[LOCK], p, False, got[0].lock_token, seq, got[0].locked_until)

    # -- settlement
    def _settle(self, inv, comps, check):
        row = comps[0] if comps else inv
        lock = inv[LOCK] if inv[LOCK] is not None else row[LOCK]
        entry = self.locks.get(lock)
        now = self._tick_time(row)
        if entry is None:
            if check:
                until = self.shared.forgotten.get(lock)
                if until is not None:
                    kind = "settled-after-lock-expiry" if now >= until else "settled-after-connection-drop"
                    raise Violation(kind, row, f"message-lock-lost (lock held until {until})", f"{inv[OP]} ok at {now}")
                raise Violation("settled-by-other-holder", row, f"no lock {lock!r} was issued in this entity", f"{inv[OP]} ok")
            return
        p, dead_letter, token, seq, locked_until = entry
        store = self.store(p)
        if dead_letter:
            store = store.dead_letter_queue
        holder = self._holder(inv)
        op = inv[OP]
        try:
            if op == "complete":
                store.complete(now, holder, token)
            elif op == "abandon":
                store.abandon(now, holder, token)
            elif op == "defer":
                store.defer(now, holder, token)
            elif op == "dead-letter":
                args = self._args(inv)
                store.dead_letter(now, holder, token, args.get("reason"), args.get("description"))
            else:  # renew-lock
                until = store.renew_lock(now, holder, token)
                self.locks[lock] = (p, dead_letter, token, seq, until)
                if check and comps and comps[0][RESULT] is not None:
                    observed = json.loads(comps[0][RESULT]).get("locked_until")
                    if observed is not None and observed != until:
                        raise Violation("renewed-lock", row, f"locked until {until}", f"locked until {observed}")
                return
        except ServiceBusError as error:
            if not check:
                return
            msg = store.messages.get(seq)
            if locked_until is not None and now >= locked_until:
                kind = "settled-after-lock-expiry"
            elif msg is not None and msg.holder is not None and msg.holder != holder:
                kind = "settled-by-other-holder"
            elif self.shared.removed.get(seq) == "completed":
                kind = "settled-twice"
            else:
                kind = "settled-after-connection-drop"
            raise Violation(kind, row, f"{error.code} (lock held until {locked_until})", f"{op} ok at {now}") from None
        del self.locks[lock]

    # -- sessions
    def _accept_session(self, inv, comps, check):
        row = comps[0] if comps else inv
        session = row[SESSION] if row[SESSION] is not None else self._args(row).get("session")
        if session is None:
            session = self._args(inv).get("session")
        if session is None:
            raise Undecidable(f"accept-session ok without a session id (pos {row[POS]})")
        now = self._tick_time(row)
        requested = inv[SESSION] if inv[SESSION] is not None else self._args(inv).get("session")
        store = self.store(0)
        if check and requested is None and session not in store.available_sessions(now):
            raise Violation("session-not-available", row, f"one of {store.available_sessions(now)[:5]}", f"session {session!r}")
        try:
            store.accept_session(now, self._holder(inv), session)
        except ServiceBusError as error:
            if check:
                raise Violation("session-lock", row, f"{error.code}", f"session {session!r} accepted") from None

    def _session_op(self, inv, comps, check):
        row = comps[0] if comps else inv
        session = inv[SESSION] if inv[SESSION] is not None else self._args(inv).get("session")
        now = self._tick_time(row)
        store = self.store(0)
        try:
            if inv[OP] == "renew-session-lock":
                store.renew_session_lock(now, self._holder(inv), session)
            elif inv[OP] == "set-session-state":
                state = self._args(inv).get("state")
                store.set_session_state(now, self._holder(inv), session, state.encode() if state else None)
            else:
                store.get_session_state(now, self._holder(inv), session)
        except ServiceBusError as error:
            if check:
                raise Violation("session-lock", row, f"{error.code}", f"{inv[OP]} ok") from None

    def _close(self, inv, comps, check):
        row = comps[0] if comps else inv
        now = self._tick_time(row)
        holder = self._holder(inv)
        for store in self.stores.values():
            if store.requires_session:
                for sid, sess in list(store.sessions.items()):
                    if sess.holder == holder and sess.is_locked(now):
                        store.release_session(now, holder, sid)

    def _drop(self, inv, comps, check):
        row = comps[0] if comps else inv
        now = self._tick_time(row)
        holder = self._holder(inv)
        for store in self.stores.values():
            store.drop_holder(now, holder)
            store.dead_letter_queue.drop_holder(now, holder)

    def _nothing(self, inv, comps, check):
        if comps:
            self._tick_time(comps[0])


_HANDLERS = {
    "create-entity": PieceModel._create,
    "delete-entity": PieceModel._delete,
    "send": PieceModel._send,
    "receive": PieceModel._receive,
    "receive-deferred": PieceModel._receive_deferred,
    "complete": PieceModel._settle,
    "abandon": PieceModel._settle,
    "defer": PieceModel._settle,
    "dead-letter": PieceModel._settle,
    "renew-lock": PieceModel._settle,
    "accept-session": PieceModel._accept_session,
    "renew-session-lock": PieceModel._session_op,
    "get-session-state": PieceModel._session_op,
    "set-session-state": PieceModel._session_op,
    "close": PieceModel._close,
    "drop-connection": PieceModel._drop,
    "wait": PieceModel._nothing,
    "peek": PieceModel._nothing,  # peeks change nothing; their results are not compared yet
    # an outage keeps what the entity holds (Target.make_unavailable) and operations during it
    # fail (nothing happened); attaching a link, reading counts or a description change nothing
    "entity-down": PieceModel._nothing,
    "entity-up": PieceModel._nothing,
    "attach": PieceModel._nothing,
    "entity-counts": PieceModel._nothing,
    "describe-entity": PieceModel._nothing,
}


# ------------------------------------------------------------------ the piece


def distinct(states: list[PieceModel]) -> list[PieceModel]:
    """``states`` without repeats (same ``signature``), first of each kept, order kept."""
    if len(states) < 2:
        return states
    seen: set = set()
    out = []
    for state in states:
        key = state.signature()
        if key not in seen:
            seen.add(key)
            out.append(state)
    return out


class _Op:
    __slots__ = ("inv", "comps", "done_at")

    def __init__(self, inv: tuple) -> None:
        self.inv = inv
        self.comps: list = []
        self.done_at = None  # position of its first completion event


class _Cand:
    """One possible state of the piece, with the checkpoint it can be rebuilt from: the
    state at ``base`` plus the operations of ``log`` (cheaper than copying the state at
    every concurrent window: only a window that needs the search rebuilds its start)."""

    __slots__ = ("state", "base", "log", "win_start")

    def __init__(self, state: PieceModel) -> None:
        self.state = state
        self.checkpoint()

    def checkpoint(self) -> None:
        self.state.prune_locks()
        self.base = self.state.clone()
        self.log: list[tuple] = []
        self.win_start = 0

    def applied(self, op: "_Op") -> None:
        log = self.log
        log.append((op.inv, op.comps))
        if len(log) >= CHECKPOINT_EVERY and self.win_start == 0:
            self.checkpoint()

    def before_window(self) -> PieceModel:
        state = self.base.clone()
        for inv, comps in self.log[: self.win_start]:
            state.apply(inv, comps, check=False)
        return state


class PieceChecker:
    """Streaming checker of one piece: feed its events in position order, then ``finish``."""

    def __init__(self, key: str, search_bound: int = DEFAULT_SEARCH_BOUND) -> None:
        self.key = key
        self.search_bound = search_bound
        self.shared = Shared()
        self.cands: list[_Cand] = [_Cand(PieceModel(self.shared))]
        self.pending: dict[int, _Op] = {}
        self.current: _Op | None = None  # the operation whose completion events are arriving
        self.window: list[_Op] | None = None  # ops of the current concurrent window
        self.failed: Violation | None = None  # first fast-path failure in the window
        self.needs_search = False
        self.events = 0
        self.violation: Violation | None = None
        self.unknown: str | None = None
        self.entity: str | None = None
        self.seen_later: bool = False
        self.done = False

    # -- input
    def feed(self, row: tuple) -> None:
        self.events += 1
        if self.done:
            v = self.violation
            if v is not None and v.watch is not None and row[SEQ] == v.watch and row[OP] == "receive" and row[PHASE] == "ok":
                self.seen_later = True
            return
        try:
            self._feed(row)
        except Violation as v:
            self.violation = v
            self.done = True
        except Undecidable as u:
            self.unknown = str(u)
            self.done = True

    def _feed(self, row: tuple) -> None:
        cur = self.current
        if cur is not None and row[OP_ID] != cur.inv[OP_ID]:
            self.current = None
            self._completed(cur)
        phase = row[PHASE]
        if phase == "invoke":
            pending = self.pending
            if row[OP_ID] in pending:
                raise Undecidable(f"op_id {row[OP_ID]} invoked twice (pos {row[POS]})")
            if pending and self.window is None:
                # the window becomes concurrent: nothing of it has been applied yet
                for c in self.cands:
                    c.win_start = len(c.log)
                self.window = []
            pending[row[OP_ID]] = _Op(row)
            return
        op = self.current
        if op is None:
            op = self.pending.pop(row[OP_ID], None)
            if op is None and row[OP] == "create-entity" and phase == "ok":
                # a target that names what it creates (a unique suffix) records the invoke under
                # the name asked for and the ok under the path it made: the ok is the creation here
                op = _Op(row)
            if op is None:
                raise Undecidable(f"{phase} event at pos {row[POS]} for op_id {row[OP_ID]} that is not pending "
                                  "(no invoke, or its completion events are not consecutive)")
            op.done_at = row[POS]
            self.current = op
        op.comps.append(row)

    def _completed(self, op: _Op) -> None:
        window = self.window
        info = op.comps[0][PHASE] == "info"
        if window is not None:
            window.append(op)
            if info:
                self.needs_search = True
            elif self.failed is None and not self.needs_search:
                for c in self.cands:
                    try:
                        c.state.apply(op.inv, op.comps)
                    except Violation as v:
                        self.failed = v
                        break
                    c.log.append((op.inv, op.comps))
            if not self.pending:
                self._close_window()
            return
        # a window of one operation: exactly one order
        if info:
            forks = []
            for c in self.cands:
                happened = c.state.clone()
                try:
                    happened.apply(op.inv, [], check=False)
                    forks.append(_Cand(happened))
                except Violation:
                    pass
                c.checkpoint()
                forks.append(c)
            kept = {id(state) for state in distinct([f.state for f in forks])}
            forks = [f for f in forks if id(f.state) in kept]
            if len(forks) > MAX_CANDIDATES:
                raise Undecidable(f"more than {MAX_CANDIDATES} possible states after unknown outcomes (pos {op.done_at})")
            self.cands = forks
            return
        cands = self.cands
        if len(cands) == 1:
            c = cands[0]
            c.state.apply(op.inv, op.comps)
            c.applied(op)
            return
        kept, first = [], None
        for c in cands:
            try:
                c.state.apply(op.inv, op.comps)
                c.applied(op)
                kept.append(c)
            except Violation as v:
                first = first or v
        if not kept:
            raise first
        self.cands = kept

    def _close_window(self) -> None:
        window = self.window
        self.window = None
        failed, search = self.failed, self.needs_search
        self.failed, self.needs_search = None, False
        if failed is None and not search:
            for c in self.cands:
                c.win_start = 0
                if len(c.log) >= CHECKPOINT_EVERY:
                    c.checkpoint()
            return
        starts = [c.before_window() for c in self.cands]
        self.cands = [_Cand(state) for state in self._search(starts, window, failed)]

    def _search(self, starts: list[PieceModel], ops: list[_Op], failed: Violation | None) -> list[PieceModel]:
        """Every order of ``ops`` their intervals allow, from each start state."""
        n = len(ops)
        before = [[j for j in range(n) if j != i and ops[j].done_at is not None and ops[j].done_at < ops[i].inv[POS]]
                  for i in range(n)]
        infos = [not op.comps or op.comps[0][PHASE] == "info" for op in ops]
        collect_all = any(infos)
        found: list[PieceModel] = []
        budget = [self.search_bound]
        failures: list[tuple[int, int, Violation]] = []  # (ops applied before, not an ordering kind, violation)

        def dfs(state: PieceModel, done: int) -> bool:
            if done == (1 << n) - 1:
                found.append(state)
                return not collect_all
            for i in range(n):
                if done & (1 << i) or any(not done & (1 << j) for j in before[i]):
                    continue
                branches = (True, False) if infos[i] else (True,)
                for happen in branches:
                    budget[0] -= 1
                    if budget[0] < 0:
                        raise Undecidable(f"{n} overlapping operations (pos {ops[0].inv[POS]}..{ops[-1].done_at}) "
                                          f"exceed the search bound of {self.search_bound} steps")
                    nxt = state.clone()
                    if happen:
                        try:
                            nxt.apply(ops[i].inv, [] if infos[i] else ops[i].comps, check=not infos[i])
                        except Violation as v:
                            failures.append((bin(done).count("1"), v.watch is None, v))
                            continue
                    if dfs(nxt, done | (1 << i)):
                        return True
            return False

        for start in starts:  # each possible state before the window: its first fitting order
            dfs(start, 0)
            if collect_all:
                found[:] = distinct(found)
            if len(found) > MAX_CANDIDATES:
                raise Undecidable(f"more than {MAX_CANDIDATES} possible states after unknown outcomes")
        if not found:
            if failures:
                # the operation that fails latest in its order; among those, a direct
                # violation before an ordering one (a lost or reordered head is often
                # only the consequence of another operation's violation)
                failed = max(failures, key=lambda f: (f[0], f[1]))[2]
            if failed is None:
                # only unknown outcomes were involved, and even so nothing fits: find which op
                failed = Violation("out-of-order", ops[-1].comps[0] if ops[-1].comps else ops[-1].inv,
                                   "some order of the overlapping operations", "none fits")
            failed.expected += f" (no order of the {n} overlapping operations fits)"
            raise failed
        return found[:MAX_CANDIDATES]

    def finish(self) -> dict[str, Any]:
        """The verdict of this piece, as one result row."""
        if not self.done:
            try:
                if self.current is not None:
                    cur, self.current = self.current, None
                    self._completed(cur)
                if self.pending:
                    # operations that never completed: unknown outcome
                    leftover = sorted(self.pending.values(), key=lambda o: o.inv[POS])
                    self.pending = {}
                    if self.window is not None:
                        self.window.extend(leftover)
                        self.needs_search = True
                        self._close_window()
            except Violation as v:
                self.violation = v
            except Undecidable as u:
                self.unknown = str(u)
        out = {"piece": self.key, "entity": self.entity, "events": self.events, "status": "valid", "pos": None,
               "message_id": None, "seq": None, "kind": None, "clause": None, "expected": None, "observed": None,
               "reason": None}
        v = self.violation
        if v is not None:
            kind = v.kind
            if v.watch is not None and kind in ("lost-message", "out-of-order", "out-of-order-session", "out-of-order-key"):
                if not self.seen_later:
                    kind = "lost-message"  # the expected head never came: the message was lost
                elif kind == "lost-message":
                    kind = "out-of-order"
            out.update(status="violation", pos=v.row[POS], message_id=v.message_id, seq=v.seq, kind=kind,
                       clause=CLAUSES[kind], expected=v.expected, observed=v.observed)
        elif self.unknown is not None:
            out.update(status="unknown", reason=self.unknown)
        return out


# ------------------------------------------------------------------ batches

RESULT_FIELDS = (("piece", "string"), ("entity", "string"), ("events", "int64"), ("status", "string"),
                 ("pos", "int64"), ("message_id", "string"), ("seq", "int64"), ("kind", "string"),
                 ("clause", "string"), ("expected", "string"), ("observed", "string"), ("reason", "string"))


def result_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64()}
    return pa.schema([pa.field(n, types[t]) for n, t in RESULT_FIELDS])


def rows_of(batch) -> Iterator[tuple]:
    """Row tuples (FIELD_NAMES order) of an Arrow record batch, column-wise conversion."""
    names = batch.schema.names
    n = batch.num_rows
    cols = []
    for name in FIELD_NAMES:
        if name in names and name not in ("trace",):
            cols.append(batch.column(names.index(name)).to_pylist())
        else:
            cols.append([None] * n)
    return zip(*cols)


def check_batches(batches: Iterable, search_bound: int = DEFAULT_SEARCH_BOUND) -> list[dict[str, Any]]:
    """Check every piece found in ``batches`` (rows of each piece in position order; pieces
    may interleave). Returns one result per piece."""
    checkers: dict[str, PieceChecker] = {}
    by_entity: dict[str | None, PieceChecker] = {}
    for batch in batches:
        for row in rows_of(batch):
            checker = by_entity.get(row[ENTITY])
            if checker is None:
                entity = row[ENTITY]
                key = piece_key(entity)
                checker = checkers.get(key)
                if checker is None:
                    checker = checkers[key] = PieceChecker(key, search_bound)
                    checker.entity = entity
                if entity is not None and SUBSCRIPTIONS in entity.lower() and not checker.done:
                    checker.unknown = f"subscriptions are not modelled by the replay checker yet ({entity})"
                    checker.done = True
                by_entity[entity] = checker
            checker.feed(row)
    return [c.finish() for c in checkers.values()]
