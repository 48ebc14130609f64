"""The search over concurrent operations of one piece (the model is ``checker.PieceModel``).

Operations of a piece whose invoke..completion intervals overlap form a *window*. The
checker first applies each operation at its completion, in completion order (the fast
path, most windows pass). If an operation of a window does not match, the checker goes
back to a copy of the state taken when the window became concurrent
(``MessageStore.clone``) and tries every order the intervals allow (a depth-first search,
at most ``search_bound`` model steps per window); an operation with an unknown outcome
(``info``, or still pending at the end) is tried both as happened and as not happened.
Only if no order fits is it a violation; if the search runs out of steps, or the trace
holds operations the checker does not model, the piece is *unknown*, with the reason. A
violation is never reported on a guess.

Each piece stops at its first violation, named with the clause it breaks.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from .checker import (
    CHECKPOINT_EVERY,
    CLAUSES,
    DEFAULT_SEARCH_BOUND,
    MAX_CANDIDATES,
    OP_ID,
    PHASE,
    POS,
    SEQ,
    OP,
    PieceModel,
    Shared,
    Undecidable,
    Violation,
)


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


def _detached(v: Violation) -> Violation:
    """``v``, kept for later, without its traceback and the error it replaced: their frames
    hold whoever keeps it (this checker, the search's failures, the states), a cycle only
    the cyclic GC would find."""
    v.__traceback__ = v.__context__ = None
    return v


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
        """The state when the current window began, rebuilt from the checkpoint. It takes the
        checkpoint's own state, uncopied: a window searched gives new candidates, each with a
        checkpoint of its own, and this one is not used again."""
        state, self.base = self.base, None
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
        self.last_pos = -1  # of the last event fed (check_batches checks the position order)

    # -- input
    def feed(self, row: tuple) -> None:
        self.feed_rows((row,))

    def feed_rows(self, rows) -> None:
        """Feed events of this piece, in position order (a run of rows of one batch: the hot
        path of replay, one call per run; the completion events of the current operation,
        then the next invoke)."""
        self.events += len(rows)
        it = iter(rows)
        if not self.done:
            pending = self.pending
            cur = self.current
            cur_id = cur.inv[OP_ID] if cur is not None else None
            for row in it:
                try:
                    op_id = row[OP_ID]
                    phase = row[PHASE]
                    if cur is not None:
                        if op_id != cur_id:
                            self.current = None
                            done, cur = cur, None
                            self._completed(done)
                        elif phase != "invoke":
                            cur.comps.append(row)
                            continue
                    if phase == "invoke":
                        if op_id in pending:
                            raise Undecidable(f"op_id {op_id} invoked twice (pos {row[POS]})")
                        if pending and self.window is None:
                            # the window becomes concurrent: nothing of it has been applied yet
                            for c in self.cands:
                                c.win_start = len(c.log)
                            self.window = []
                        pending[op_id] = _Op(row)
                        continue
                    op = pending.pop(op_id, None)
                    if op is None and row[OP] == "create-entity" and phase == "ok":
                        # a target that names what it creates (a unique suffix) records the invoke under
                        # the name asked for and the ok under the path it made: the ok is the creation here
                        op = _Op(row)
                    if op is None:
                        raise Undecidable(f"{phase} event at pos {row[POS]} for op_id {op_id} that is not pending "
                                          "(no invoke, or its completion events are not consecutive)")
                    op.done_at = row[POS]
                    self.current = cur = op
                    cur_id = op_id
                    op.comps.append(row)
                except Violation as v:
                    self.violation = _detached(v)
                    self.done = True
                    break
                except Undecidable as u:
                    self.unknown = str(u)
                    self.done = True
                    break
            else:
                return
        v = self.violation
        if v is not None and v.watch is not None:
            watch = v.watch
            for row in it:
                if row[SEQ] == watch and row[OP] == "receive" and row[PHASE] == "ok":
                    self.seen_later = True
                    break

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
                        self.failed = _detached(v)
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
            log = c.log
            log.append((op.inv, op.comps))
            if len(log) >= CHECKPOINT_EVERY and c.win_start == 0:
                c.checkpoint()
            return
        kept, first = [], None
        for c in cands:
            try:
                c.state.apply(op.inv, op.comps)
                c.applied(op)
                kept.append(c)
            except Violation as v:
                first = first or _detached(v)
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
        """Every order of ``ops`` their intervals allow, from each start state: a depth-first
        search over (operation, happened or not) choices, in the order of ``ops`` (completion
        order, so the first order tried is the fast path's). Iterative, so a window longer than
        Python's recursion limit is searched like any other; a state is copied only for a choice
        that is not its node's last (the last one takes the node's own state, which nothing
        needs afterwards)."""
        n = len(ops)
        full = (1 << n) - 1
        # ops[j] must come before ops[i] if it completed before ops[i] was invoked
        completed = sorted((op.done_at, j) for j, op in enumerate(ops) if op.done_at is not None)
        done_at = [d for d, _ in completed]
        prefix = [0]
        for _, j in completed:
            prefix.append(prefix[-1] | (1 << j))
        before = [prefix[bisect_left(done_at, op.inv[POS])] for op in ops]
        infos = [not op.comps or op.comps[0][PHASE] == "info" for op in ops]
        collect_all = any(infos)
        found: list[PieceModel] = []
        budget = self.search_bound
        failures: list[tuple[int, int, Violation]] = []  # (ops applied before, not an ordering kind, violation)

        def choices(done: int) -> list[tuple[int, bool]]:
            out = []
            for i in range(n):
                if not done & (1 << i) and done & before[i] == before[i]:
                    out.append((i, True))
                    if infos[i]:
                        out.append((i, False))
            return out

        for start in starts:  # each possible state before the window: its first fitting order
            # a node: (its state, the operations applied, its choices, the next choice to try)
            stack = [[start, 0, choices(0), 0]]
            while stack:
                node = stack[-1]
                state, done, options, k = node
                if k == len(options):
                    stack.pop()
                    continue
                node[3] = k + 1
                i, happen = options[k]
                budget -= 1
                if budget < 0:
                    raise Undecidable(f"{n} overlapping operations (pos {ops[0].inv[POS]}..{ops[-1].done_at}) "
                                      f"exceed the search bound of {self.search_bound} steps")
                nxt = state if k + 1 == len(options) else state.clone()
                if happen:
                    try:
                        nxt.apply(ops[i].inv, [] if infos[i] else ops[i].comps, check=not infos[i])
                    except Violation as v:
                        failures.append((bin(done).count("1"), v.watch is None, _detached(v)))
                        continue
                after = done | (1 << i)
                if after == full:
                    found.append(nxt)
                    if not collect_all:
                        break
                    continue
                stack.append([nxt, after, choices(after), 0])
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
                self.violation = _detached(v)
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


