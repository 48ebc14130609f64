"""The trace checker's model adapter: one piece of a trace through the reference model.

A **piece** is everything that happens to one entity (a queue with its dead-letter subqueue
and, when partitioned, all its partitions: PART-KEY-006). Pieces are independent, so a trace
can be split by piece and checked in parallel (``sbconform.trace.replay``). The model is
``sbreference.store.MessageStore``, the settlement state machine the ``Namespace`` itself uses,
one per partition; this module maps what the trace observed (lock tokens as text, clients,
sequence numbers) onto it and compares each observed result with what the model allows
(``PieceModel.apply``). As Porcupine separates a model from the search over histories, the
search over orders of concurrent operations is ``sbconform.trace.search`` (``PieceChecker``),
and reading batches and writing results is ``sbconform.trace.replay``.
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from functools import lru_cache
from dataclasses import dataclass, field

from sbreference.clock import NEVER, TIMESPAN_MAX
from sbreference.entity import PING_CONTENT_TYPE, effective_time_to_live
from sbreference.errors import ErrorCode, ServiceBusError
from sbreference.message import Message, State, StoredMessage
from sbreference.operations import MODIFYING, settle
from sbreference.paths import DEAD_LETTER_SUFFIX as DLQ_SUFFIX, TRANSFER_SUFFIX, entity_key
from sbreference.partitioning import partition_key, partition_of
from sbreference.store import PEEK_LOCK, MessageStore

from .verdicts import (  # noqa: F401  (the row layout and verdicts, importable from here)
    ARGS, CLAUSES, CLIENT, CONN, DELIVERY_COUNT, ENTITY, ERROR, LOCK, MESSAGE_ID, OP, OP_ID, PARTITION,
    PARTITION_KEY, PHASE, POS, RESULT, SEQ, SESSION, TIME, TRACE, Undecidable, Violation,
)

NO_ARGS: dict = {}  # the arguments of an operation recorded without any (shared: read, never changed)
DEFAULT_SEARCH_BOUND = 2000
MAX_CANDIDATES = 64
CHECKPOINT_EVERY = 128  # operations between state checkpoints (more often: copies; less: replays in the search)
REMEMBER_REMOVED = 20_000

#: The piece an entity path belongs to: the queue or topic, lower case (sbreference/paths.py).
piece_key = entity_key


@dataclass
class Shared:
    """What every copy of a piece's state may share: facts fixed by observation alone."""

    holders: dict = field(default_factory=dict)  # client/connection -> model holder id
    key_partitions: dict = field(default_factory=dict)  # partition key -> first observed partition
    pings: set = field(default_factory=set)  # sequence numbers (and ids) of pings sent
    # the last REMEMBER_REMOVED of removed and forgotten: an OrderedDict forgets its oldest in constant time
    removed: OrderedDict = field(default_factory=OrderedDict)  # seq -> how it left (completed, consumed, expired, dead-lettered)
    args: dict = field(default_factory=dict)  # args text -> parsed
    forgotten: OrderedDict = field(default_factory=OrderedDict)  # observed lock -> its last locked-until (None: settled), once pruned

    def observe(self, path: str, event: str, msg: StoredMessage) -> None:
        if event in ("completed", "consumed", "expired", "dead-lettered"):
            removed = self.removed
            if len(removed) >= REMEMBER_REMOVED:
                removed.popitem(last=False)
            removed[msg.sequence_number] = event


class PieceModel:
    """The model state of one piece: a ``MessageStore`` per partition, and the map from
    observed lock tokens to the model's."""

    __slots__ = ("config", "stores", "locks", "shared", "now", "tokens")

    def __init__(self, shared: Shared, config: dict | None = None) -> None:
        self.shared = shared
        self.config = config or {}
        self.stores: dict[int, MessageStore] = {}
        # observed lock -> (partition, in_dlq, token, seq, locked_until); token None: settled
        self.locks: dict[str, tuple] = {}
        self.now = 0
        # the model's lock tokens: one counter shared by the copies (no reference back: no cycle)
        self.tokens = itertools.count(1).__next__

    def clone(self) -> "PieceModel":
        other = PieceModel.__new__(PieceModel)
        other.shared = self.shared
        other.config = self.config
        other.stores = {p: _unlinked(s.clone()) for p, s in self.stores.items()}
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
    def store(self, partition: int) -> MessageStore:
        store = self.stores.get(partition)
        if store is None:
            c = self.config
            lock = c.get("lock_duration", 60_000)
            mdc = c.get("max_delivery_count", 10)
            dlq = MessageStore("dlq", lock, mdc, is_dead_letter=True, next_lock_token=self.tokens)
            store = MessageStore("q", lock, mdc, c.get("dead_lettering_on_message_expiration", False),
                                 c.get("requires_session", False), dead_letter=dlq, next_lock_token=self.tokens)
            store.observer = dlq.observer = self.shared.observe
            self.stores[partition] = _unlinked(store)
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
            return NO_ARGS
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
        text = inv[ARGS]
        args = NO_ARGS if text is None else self.shared.args.get(text) or self._args(inv)  # _args, inline
        mode = args.get("mode", PEEK_LOCK)
        session = inv[SESSION] if inv[SESSION] is not None else args.get("session")
        holder = self.shared.holders.get(inv[CONN] if inv[CONN] is not None else inv[CLIENT]) or self._holder(inv)
        dead_letter = _is_dead_letter(inv[ENTITY])
        partitioned, stores = self.config.get("enable_partitioning"), self.stores
        for row in comps:
            t = row[TIME]
            now = self.now = t if t > self.now else self.now  # _tick_time
            seq = row[SEQ]
            if seq is None and row[MESSAGE_ID] is None:
                if check:
                    self._check_nothing_available(row, now, session, dead_letter)
                continue
            p = self._partition(row, seq) if partitioned else 0
            store = stores.get(p) or self.store(p)
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
                self.locks[row[LOCK]] = (p, dead_letter, d.lock_token, seq, d.locked_until)

    def prune_locks(self) -> None:
        """Forget observed locks the model no longer holds (expired, lost with their
        connection, settled). ``Shared.forgotten`` keeps how each ended (its locked-until,
        or None once settled), so a later settlement with it still gets its precise kind."""
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
                        forgotten.popitem(last=False)
                    forgotten[k] = None if v[2] is None else v[4]
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
            head = lane.head()
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
        head = lane.head()
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
                self.locks[row[LOCK]] = (p, False, got[0].lock_token, seq, got[0].locked_until)

    # -- settlement
    def _settle(self, inv, comps, check):
        """A settlement or renewal by lock token. SETTLE-LOCK-011: the lock belongs to the
        entity, so whichever client asks settles it (the model ignores who asks, except on
        session entities); once settled, the lock is gone for everyone (SETTLE-COMP-002)."""
        row = comps[0] if comps else inv
        lock = inv[LOCK] if inv[LOCK] is not None else row[LOCK]
        entry = self.locks.get(lock)
        t = row[TIME]
        now = self.now = t if t > self.now else self.now  # _tick_time
        if entry is None or entry[2] is None:  # no live lock: any success is a violation
            if not check:
                return
            forgotten = self.shared.forgotten
            if entry is not None or (lock in forgotten and forgotten[lock] is None):
                raise Violation("settled-twice", row, "message-lock-lost (the lock was settled already)", f"{inv[OP]} ok at {now}")
            if lock in forgotten:
                until = forgotten[lock]
                kind = "settled-after-lock-expiry" if now >= until else "settled-after-connection-drop"
                raise Violation(kind, row, f"message-lock-lost (lock held until {until})", f"{inv[OP]} ok at {now}")
            raise Violation("unknown-lock", row, f"no lock {lock!r} was issued in this entity", f"{inv[OP]} ok")
        p, dead_letter, token, seq, locked_until = entry
        store = self.stores.get(p) or self.store(p)
        if dead_letter:
            store = store.dead_letter_queue
        holder = self.shared.holders.get(inv[CONN] if inv[CONN] is not None else inv[CLIENT]) or self._holder(inv)
        op = inv[OP]
        try:
            if op == "complete":
                store.complete(now, holder, token)  # settle(store, "complete", ...), one call shorter
            elif op != "renew-lock":
                a = self._args(inv) if op in MODIFYING else NO_ARGS
                settle(store, op, now, holder, token, reason=a.get("reason"), description=a.get("description"), properties=a.get("properties"))
            else:
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
            if locked_until is not None and now >= locked_until:
                kind = "settled-after-lock-expiry"
            elif store.requires_session and error.code is ErrorCode.SESSION_LOCK_LOST:
                kind = "session-lock"  # SETTLE-SESS-002: a session's messages are its holder's to settle
            elif self.shared.removed.get(seq) == "completed":
                kind = "settled-twice"
            else:
                kind = "settled-after-connection-drop"
            raise Violation(kind, row, f"{error.code} (lock held until {locked_until})", f"{op} ok at {now}") from None
        self.locks[lock] = (p, dead_letter, None, seq, locked_until)  # settled: gone for every client

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


def _unlinked(store: MessageStore) -> MessageStore:
    """``store`` without its dead-letter subqueue's link back (``parent``: only the namespace's routing follows
    it), so a discarded copy of the state is freed by its reference count, not left as a cycle for the GC."""
    store.dead_letter_queue.parent = None
    return store


@lru_cache(maxsize=4096)
def _is_dead_letter(path: str | None) -> bool:
    """Whether a path names the dead-letter subqueue; the transfer one (TXN-VIA-003) is not modelled."""
    if (lower := (path or "").lower()).endswith(TRANSFER_SUFFIX + DLQ_SUFFIX):
        raise Undecidable(f"the transfer dead-letter queue ({path}) is not modelled by the replay checker")
    return lower.endswith(DLQ_SUFFIX)


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
