"""Planted violations (``sbconform generate --inject``): each kind rewrites the events of
one generated entity so that the replay checker must name it (``INJECTIONS`` in
``generate.py`` lists the kinds, the checker's name for each and where it can be planted)."""

from __future__ import annotations

from sbreference.partitioning import sequence_number

from .generate import (
    ARGS, CONN, DELIVERY_COUNT, ERROR, INJECTIONS, LOCK, LOCK_DURATION, MESSAGE_ID, OP, OP_ID, PARTITION,
    PARTITION_KEY, PHASE, PING_ARGS, SEQ, SESSION, TIME, EntitySim,
)


def _ops_by_id(rows: list[list]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        out.setdefault(r[OP_ID], []).append(i)
    return out


def plant(kind: str, rows: list[list], sim: EntitySim, seen_keys: dict) -> tuple[list[list], list] | None:
    """Plant one violation of ``kind`` in an entity's chunk of rows; returns the new rows
    and the planted row (its position is set when written), or None if the chunk has no
    place for it."""
    ok_receives = [i for i, r in enumerate(rows) if r[OP] == "receive" and r[PHASE] == "ok" and r[SEQ] is not None and r[LOCK] is not None]
    by_op = _ops_by_id(rows)
    if kind == "lost-message":
        for i in ok_receives:
            r = rows[i]
            if len([j for j in by_op[r[OP_ID]] if rows[j][PHASE] == "ok"]) != 1:
                continue
            later = [j for j in range(i + 1, len(rows)) if rows[j][SEQ] == r[SEQ] or rows[j][LOCK] == r[LOCK]]
            settle = [j for j in later if rows[j][OP] == "complete" and rows[j][PHASE] == "ok"]
            if not settle or any(rows[j][OP] not in ("complete",) for j in later):
                continue
            drop = set(by_op[rows[settle[0]][OP_ID]])
            for f in (MESSAGE_ID, SEQ, LOCK, DELIVERY_COUNT, PARTITION, PARTITION_KEY, SESSION):
                r[f] = None
            return [x for j, x in enumerate(rows) if j not in drop], r
    elif kind == "double-delivery":
        for i in ok_receives:
            a = rows[i]
            for k in ok_receives:
                b = rows[k]
                if k > i and b[CONN] != a[CONN] and b[TIME] < a[TIME] + LOCK_DURATION and not any(
                        rows[j][LOCK] == a[LOCK] and rows[j][PHASE] != "invoke" and rows[j][OP] != "renew-lock" for j in range(i + 1, k)):
                    b[MESSAGE_ID], b[SEQ], b[DELIVERY_COUNT], b[PARTITION] = a[MESSAGE_ID], a[SEQ], a[DELIVERY_COUNT], a[PARTITION]
                    return rows, b
    elif kind == "settle-after-expiry":
        for r in rows:
            if r[OP] == "complete" and r[PHASE] == "fail" and r[ERROR] == "message-lock-lost":
                grant = [x for x in rows if x[LOCK] == r[LOCK] and x[OP] in ("receive", "receive-deferred") and x[PHASE] == "ok"]
                renews = [x for x in rows if x[LOCK] == r[LOCK] and x[OP] == "renew-lock" and x[PHASE] == "ok"]
                drops = [x for x in rows if x[OP] == "drop-connection" and x[CONN] == r[CONN]]
                if grant and not renews and not drops and r[TIME] >= grant[0][TIME] + LOCK_DURATION:
                    r[PHASE], r[ERROR] = "ok", None
                    return rows, r
    elif kind == "max-delivery-count":
        if ok_receives:
            r = rows[ok_receives[len(ok_receives) // 2]]
            r[DELIVERY_COUNT] = sim.mdc + 1
            return rows, r
    elif kind == "wrong-partition":
        for r in rows:
            if r[OP] == "send" and r[PHASE] == "ok" and r[PARTITION_KEY] is not None:
                if r[PARTITION_KEY] in seen_keys:
                    p = (seen_keys[r[PARTITION_KEY]] + 1) % 4
                    r[PARTITION] = p
                    r[SEQ] = sequence_number(p, (1 << 40) + r[OP_ID] % 100_000)
                    return rows, r
                seen_keys[r[PARTITION_KEY]] = r[PARTITION]
    elif kind == "session-order":
        last: dict[str, int] = {}
        for i in [i for i, r in enumerate(rows) if r[OP] == "receive" and r[PHASE] == "ok" and r[SEQ] is not None]:
            r = rows[i]
            j = last.get(r[SESSION])
            if j is not None and rows[j][CONN] == r[CONN] and rows[j][OP_ID] != r[OP_ID] and rows[j][SEQ] < r[SEQ] \
                    and not any(x[OP] == "send" and x[SEQ] == r[SEQ] for x in rows[j:i]) \
                    and not any(rows[x][OP] in ("accept-session", "close", "abandon", "drop-connection") or rows[x][PHASE] in ("info", "fail")
                                for x in range(j + 1, i) if rows[x][CONN] == r[CONN] or rows[x][PHASE] == "info"):
                a = rows[j]
                for f in (MESSAGE_ID, SEQ, DELIVERY_COUNT):
                    a[f], r[f] = r[f], a[f]
                return rows, a
            last[r[SESSION]] = i
    elif kind == "ping-delivered":
        pings = [r for r in rows if r[OP] == "send" and r[PHASE] == "ok" and r[SEQ] is not None
                 and any(x[OP_ID] == r[OP_ID] and x[ARGS] == PING_ARGS for x in rows)]
        for p in pings:
            for i in ok_receives:
                r = rows[i]
                if rows.index(p) < i:
                    r[MESSAGE_ID], r[SEQ] = p[MESSAGE_ID], p[SEQ]
                    return rows, r
    elif kind == "redelivered-after-complete":
        for i, r in enumerate(rows):
            if r[OP] == "complete" and r[PHASE] == "ok":
                grant = [x for x in rows[:i] if x[LOCK] == r[LOCK] and x[PHASE] == "ok" and x[MESSAGE_ID] is not None]
                for k in ok_receives:
                    if k > i and grant:
                        b = rows[k]
                        b[MESSAGE_ID], b[SEQ], b[PARTITION] = grant[0][MESSAGE_ID], grant[0][SEQ], grant[0][PARTITION]
                        return rows, b
    else:
        raise ValueError(f"unknown injection kind {kind!r}; known: {', '.join(INJECTIONS)}")
    return None
