"""Large legal traces from the reference model, with planted violations on request.

Each entity is simulated on its own reference ``Namespace`` (entities are independent),
by a few clients doing what clients do: sends (keyed, unkeyed, in sessions, pings),
peek-lock and receive-and-delete receives, completes, abandons, defers and receives of
deferred messages, dead-letters, lock renewals, pauses long enough for locks to expire,
dropped connections, and settlements whose outcome is unknown (``info``). About one
operation in ten overlaps another client's: both are invoked, the model applies them in
either order, and their completions are recorded in either order.

The trace is produced in rounds (each entity a stretch of operations per round) and
written either

- ``by-piece`` (a directory): one Parquet file per bucket, bucket =
  ``crc32(piece key) % buckets``, every event of a piece in its bucket, in position
  order, plus ``_layout.json`` (see ``sbspec/trace-format.md``, "Replay layout");
- ``time`` (a ``.parquet`` or ``.jsonl`` file): every event in position order.

``inject`` plants violations, each in its own entity of a fitting shape, and writes
their positions to ``<out>/_injected.json`` (or ``<out>.injected.json``).
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any, Callable

from sbreference import Message, Namespace, ServiceBusError
from sbreference.entity import PING_CONTENT_TYPE
from sbreference.operations import settle
from sbreference.partitioning import sequence_number

from .checker import CLAUSES, piece_key
from .io import JSONL_SUFFIXES, PARQUET_SUFFIXES
from .schema import FIELD_NAMES, PARQUET_OPTIONS, arrow_schema, header, parquet_metadata

SHAPES = ("plain", "sessions", "partitioned", "retries", "pings")
PLAIN_LIKE = ("plain", "retries", "pings")

#: injected kind -> (the checker's kind, entity shapes it can be planted in)
INJECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lost-message": ("lost-message", PLAIN_LIKE),
    "double-delivery": ("double-delivery", PLAIN_LIKE),
    "settle-after-expiry": ("settled-after-lock-expiry", PLAIN_LIKE),
    "max-delivery-count": ("max-delivery-count-exceeded", PLAIN_LIKE),
    "wrong-partition": ("wrong-partition", ("partitioned",)),
    "session-order": ("out-of-order-session", ("sessions",)),
    "ping-delivered": ("ping-delivered", ("pings",)),
    "redelivered-after-complete": ("delivered-after-complete", PLAIN_LIKE),
}

(TRACE, POS, TIME, CLIENT, CONN, OP_ID, OP, PHASE, ENTITY, PARTITION, MESSAGE_ID, SEQ, LOCK,
 DELIVERY_COUNT, SESSION, PARTITION_KEY, ARGS, RESULT, ERROR) = range(len(FIELD_NAMES))

LOCK_DURATION = 5_000
RECEIVE_ARGS = {(m, n): json.dumps({"mode": m, "max_count": n}, separators=(",", ":"))
                for m in ("peek-lock", "receive-and-delete") for n in (1, 2, 3, 50)}
PING_ARGS = json.dumps({"content_type": PING_CONTENT_TYPE, "ttl": 1000}, separators=(",", ":"))


class Client:
    __slots__ = ("name", "conn", "conn_name", "held", "session", "drops")

    def __init__(self, name: str, conn: int) -> None:
        self.name = name
        self.conn = conn
        self.drops = 0
        self.conn_name = f"{name}#0"
        self.held: list[tuple] = []  # (lock text, token, seq, locked_until)
        self.session: str | None = None


class EntitySim:
    """One entity and its clients on a reference namespace of its own."""

    def __init__(self, index: int, shape: str, clients: int, partitions: int, rng: random.Random, trace: str) -> None:
        self.index, self.shape, self.rng, self.trace = index, shape, rng, trace
        self.partitioned = shape == "partitioned"
        self.ns = Namespace(sku="premium", partition_count=partitions) if self.partitioned else Namespace()
        self.path = f"q{index:04d}-{shape}"
        self.mdc = 3 if shape == "retries" else 10
        self.description = {"lock_duration": LOCK_DURATION, "max_delivery_count": self.mdc,
                            "requires_session": shape == "sessions", "enable_partitioning": self.partitioned}
        self.ns.create_queue(self.path, **self.description)
        self.clients = [Client(f"{self.path}/c{i}", self.ns.connect()) for i in range(clients)]
        self.ops = 0
        self.sent = 0
        self.deferred: list[int] = []
        self.rows: list[list] = []
        self.created = False

    # -- events
    def _row(self, client: Client, op_id: int, op: str, phase: str, **f: Any) -> list:
        row = [self.trace, None, self.ns.clock.now, client.name, client.conn_name, op_id, op, phase, self.path,
               None, None, None, None, None, None, None, None, None, None]
        for k, v in f.items():
            row[_INDEX[k]] = v
        return row

    def _new_op(self) -> int:
        self.ops += 1
        return (self.index << 40) | self.ops

    # -- actions: each returns (invoke row, apply) where apply() returns the completion rows
    def _send(self, c: Client):
        rng = self.rng
        self.sent += 1
        mid = f"{self.path}-m{self.sent}"
        session = pkey = args = None
        content_type = ttl = None
        if self.shape == "sessions":
            session = f"s{rng.randrange(6)}"
        elif self.partitioned and rng.random() < 0.6:
            pkey = f"k{rng.randrange(8)}"
        elif self.shape == "pings" and rng.random() < 0.08:
            args, content_type, ttl = PING_ARGS, PING_CONTENT_TYPE, 1000
        op_id = self._new_op()
        inv = self._row(c, op_id, "send", "invoke", message_id=mid, session=session, partition_key=pkey, args=args)
        message = Message(b"x", message_id=mid, session_id=session, partition_key=pkey, content_type=content_type, time_to_live=ttl)

        def apply():
            try:
                (seq,) = self.ns.send(c.conn, self.path, message)
            except ServiceBusError as e:
                return [self._row(c, op_id, "send", "fail", message_id=mid, error=str(e.code))]
            return [self._row(c, op_id, "send", "ok", message_id=mid, seq=seq, session=session, partition_key=pkey,
                              partition=(seq >> 48) if self.partitioned else None)]
        return inv, apply

    def _receive(self, c: Client, mode: str | None = None, max_count: int | None = None, dead_letter: bool = False):
        rng = self.rng
        if self.shape == "sessions" and c.session is None and not dead_letter:
            return self._accept(c)
        mode = mode or ("receive-and-delete" if rng.random() < 0.08 else "peek-lock")
        n = max_count or rng.choice((1, 1, 2, 3))
        op_id = self._new_op()
        args = RECEIVE_ARGS[(mode, n)]
        path = self.path + "/$DeadLetterQueue" if dead_letter else self.path
        session = None if dead_letter else c.session
        inv = self._row(c, op_id, "receive", "invoke", args=args, session=session)
        inv[ENTITY] = path

        def apply():
            try:
                got = self.ns.receive(c.conn, path, n, mode, session)
            except ServiceBusError as e:
                if c.session is not None:
                    c.session = None
                    c.held.clear()
                return [self._row(c, op_id, "receive", "fail", error=str(e.code))]
            if not got:
                return [self._row(c, op_id, "receive", "ok", entity=path)]
            rows = []
            for d in got:
                lock = None
                if d.lock_token is not None and not dead_letter:
                    lock = f"{self.path}:{d.lock_token}"
                    c.held.append((lock, d.lock_token, d.sequence_number, d.locked_until))
                rows.append(self._row(c, op_id, "receive", "ok", message_id=d.message_id, seq=d.sequence_number,
                                      lock=lock, delivery_count=d.delivery_count, session=d.session_id,
                                      partition=d.partition, partition_key=d.message.partition_key, entity=path))
            return rows
        return inv, apply

    def _accept(self, c: Client):
        op_id = self._new_op()
        inv = self._row(c, op_id, "accept-session", "invoke")

        def apply():
            try:
                sid, until = self.ns.accept_session(c.conn, self.path, None)
            except ServiceBusError as e:
                return [self._row(c, op_id, "accept-session", "fail", error=str(e.code))]
            c.session = sid
            return [self._row(c, op_id, "accept-session", "ok", session=sid,
                              result=json.dumps({"locked_until": until}))]
        return inv, apply

    def _settle(self, c: Client):
        rng = self.rng
        lock, token, seq, until = c.held.pop(rng.randrange(len(c.held)))
        r = rng.random()
        if self.shape == "retries":
            op = "abandon" if r < 0.5 else "complete"
        else:
            op = ("complete" if r < 0.72 else "abandon" if r < 0.84 else "defer" if r < 0.9
                  else "dead-letter" if r < 0.95 else "renew-lock")
        if self.shape == "sessions" and op in ("renew-lock", "defer"):
            op = "complete"
        info = op == "complete" and rng.random() < 0.001
        op_id = self._new_op()
        args = json.dumps({"reason": "bad", "description": "generated"}) if op == "dead-letter" else None
        inv = self._row(c, op_id, op, "invoke", lock=lock, seq=seq, args=args)
        ns, path, conn = self.ns, self.path, c.conn

        def apply():
            if info and rng.random() < 0.5:  # unknown outcome, and it did not happen
                c.held.append((lock, token, seq, until))
                return [self._row(c, op_id, op, "info", lock=lock, seq=seq, error="timeout")]
            try:
                if op != "renew-lock":
                    settle(ns, op, conn, path, token, reason="bad", description="generated")
                    if op == "defer":
                        self.deferred.append(seq)
                else:
                    new = ns.renew_lock(conn, path, token)
                    c.held.append((lock, token, seq, new))
                    return [self._row(c, op_id, op, "ok", lock=lock, seq=seq, result=json.dumps({"locked_until": new}))]
            except ServiceBusError as e:
                return [self._row(c, op_id, op, "fail", lock=lock, seq=seq, error=str(e.code))]
            if info:
                return [self._row(c, op_id, op, "info", lock=lock, seq=seq, error="timeout")]
            return [self._row(c, op_id, op, "ok", lock=lock, seq=seq)]
        return inv, apply

    def _receive_deferred(self, c: Client):
        seq = self.deferred.pop(self.rng.randrange(len(self.deferred)))
        op_id = self._new_op()
        args = json.dumps({"seqs": [seq], "mode": "peek-lock"})
        inv = self._row(c, op_id, "receive-deferred", "invoke", args=args)

        def apply():
            try:
                (d,) = self.ns.receive_deferred(c.conn, self.path, [seq])
            except ServiceBusError as e:
                return [self._row(c, op_id, "receive-deferred", "fail", error=str(e.code))]
            lock = f"{self.path}:{d.lock_token}"
            c.held.append((lock, d.lock_token, seq, d.locked_until))
            return [self._row(c, op_id, "receive-deferred", "ok", message_id=d.message_id, seq=seq, lock=lock,
                              delivery_count=d.delivery_count, partition=d.partition)]
        return inv, apply

    def _close(self, c: Client):
        op_id = self._new_op()
        inv = self._row(c, op_id, "close", "invoke", session=c.session)

        def apply():
            try:
                self.ns.release_session(c.conn, self.path, c.session)
            except ServiceBusError:
                pass
            c.session = None
            c.held.clear()
            return [self._row(c, op_id, "close", "ok")]
        return inv, apply

    def _drop(self, c: Client):
        op_id = self._new_op()
        inv = self._row(c, op_id, "drop-connection", "invoke")

        def apply():
            self.ns.drop_connection(c.conn)
            row = self._row(c, op_id, "drop-connection", "ok")
            c.conn = self.ns.connect()
            c.drops += 1
            c.conn_name = f"{c.name}#{c.drops}"
            c.held.clear()
            c.session = None
            return [row]
        return inv, apply

    def _action(self, c: Client):
        rng = self.rng
        r = rng.random()
        if r < 0.002:
            return self._drop(c)
        if c.held and r < 0.45:
            return self._settle(c)
        if self.deferred and r < 0.49:
            return self._receive_deferred(c)
        if r < 0.5:
            return self._receive(c, "receive-and-delete", 50, dead_letter=True)
        if c.session is not None and r < 0.5:
            return self._close(c)
        if r < 0.7:
            return self._send(c)
        return self._receive(c)

    # -- running
    def _emit(self, actions: list) -> None:
        rows = self.rows
        invs = [inv for inv, _ in actions]
        rows.extend(invs)
        order = list(range(len(actions)))
        self.rng.shuffle(order)
        results = [None] * len(actions)
        for i in order:
            results[i] = actions[i][1]()
        self.rng.shuffle(order)
        for i in order:
            rows.extend(results[i])

    def run(self, ops: int) -> list[list]:
        rng = self.rng
        clock = self.ns.clock
        if not self.created:
            self.created = True
            c = self.clients[0]
            op_id = self._new_op()
            args = json.dumps(self.description)
            self.rows.append(self._row(c, op_id, "create-entity", "invoke", args=args))
            self.rows.append(self._row(c, op_id, "create-entity", "ok"))
        clients = self.clients
        for _ in range(ops):
            p = rng.random()
            clock.advance(rng.randrange(40) if p > 0.004 else LOCK_DURATION + rng.randrange(2000))
            if p < 0.1 and len(clients) > 1:
                a, b = rng.sample(clients, 2)
                self._emit([self._action(a), self._action(b)])
            else:
                self._emit([self._action(rng.choice(clients))])
        rows, self.rows = self.rows, []
        return rows

    def drain(self) -> list[list]:
        """Receive (and complete) everything left, then one empty receive."""
        clock = self.ns.clock
        clock.advance(LOCK_DURATION * 2)
        c = self.clients[0]
        c.held.clear()
        for _ in range(100_000):
            if self.shape == "sessions":
                if c.session is not None:
                    self._emit([self._close(c)])
                self._emit([self._accept(c)])
                if c.session is None:
                    break
            self._emit([self._receive(c, "peek-lock", 50)])
            if not c.held:
                if self.shape != "sessions":
                    break
                continue
            while c.held:
                lock, token, seq, until = c.held[0]
                op_id = self._new_op()
                inv = self._row(c, op_id, "complete", "invoke", lock=lock, seq=seq)
                c.held.pop(0)
                self.ns.complete(c.conn, self.path, token)
                self.rows += [inv, self._row(c, op_id, "complete", "ok", lock=lock, seq=seq)]
        rows, self.rows = self.rows, []
        return rows


_INDEX = {name: i for i, name in enumerate(FIELD_NAMES)}


# -------------------------------------------------------------------- writing


def bucket_of(key: str, buckets: int) -> int:
    """The bucket of a piece in the by-piece layout: CRC-32 of the piece key (UTF-8)."""
    return zlib.crc32(key.encode("utf-8")) % buckets


class _Writer:
    def __init__(self, out: Path, layout: str, buckets: int, trace: str, meta: dict) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa, self.pq = pa, pq
        self.schema = arrow_schema().with_metadata(parquet_metadata(trace, **meta))  # as every Parquet trace
        self.out, self.layout, self.buckets, self.trace = out, layout, buckets, trace
        self.buffers: dict[int, list] = {}
        self.writers: dict[int, Any] = {}
        self.jsonl = None
        self.files: list[Path] = []
        if layout == "by-piece":
            out.mkdir(parents=True, exist_ok=True)
            for old in out.glob("bucket-*.parquet"):
                old.unlink()
        elif out.suffix in JSONL_SUFFIXES:
            self.jsonl = open(out, "w", encoding="utf-8")
            self.jsonl.write(json.dumps(header(trace, **meta)) + "\n")
        self.count = 0
        self.buffered = 0

    def add(self, key: str, rows: list[list]) -> None:
        b = bucket_of(key, self.buckets) if self.layout == "by-piece" else 0
        buf = self.buffers.setdefault(b, [])
        buf.extend(rows)
        self.buffered += len(rows)
        if self.buffered >= 300_000:  # bounded memory, whatever the trace's size
            for bucket in list(self.buffers):
                self._flush(bucket)
            self.buffered = 0

    def _flush(self, b: int) -> None:
        rows = self.buffers.pop(b, None)
        if not rows:
            return
        if self.jsonl is not None:
            names = FIELD_NAMES
            for r in rows:
                self.jsonl.write(json.dumps({n: v for n, v in zip(names, r) if v is not None}, separators=(",", ":")) + "\n")
            self.jsonl.flush()
            return
        pa = self.pa
        cols = list(zip(*rows))
        arrays = [pa.array(col, type=f.type) for col, f in zip(cols, self.schema)]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        w = self.writers.get(b)
        if w is None:
            path = self.out / f"bucket-{b:05d}.parquet" if self.layout == "by-piece" else self.out
            w = self.writers[b] = self.pq.ParquetWriter(str(path), self.schema, **PARQUET_OPTIONS)
            self.files.append(path)
        w.write_table(table, row_group_size=len(rows))

    def close(self, meta: dict) -> None:
        for b in list(self.buffers):
            self._flush(b)
        for w in self.writers.values():
            w.close()
        if self.jsonl is not None:
            self.jsonl.close()
        if self.layout == "by-piece":
            sizes = [p.stat().st_size for p in self.files]
            layout = {"format": "sbconform-trace", "version": 1, "layout": "by-piece", "buckets": self.buckets,
                      "bucket": "crc32(utf-8 piece key) % buckets", "piece": "entity path, lower case, without "
                      "/$deadletterqueue or /subscriptions/...", "order": "position order within a piece",
                      "files": [p.name for p in self.files], "max_file_bytes": max(sizes, default=0), **meta}
            (self.out / "_layout.json").write_text(json.dumps(layout, indent=1))


def generate(out: str | Path, events: int, clients: int = 4, entities: int = 8, partitions: int = 4, seed: int = 0,
             inject: list[str] | tuple[str, ...] = (), layout: str | None = None, ops_per_round: int = 200,
             buckets: int | None = None, trace: str | None = None,
             progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Write a trace of at least ``events`` events; returns a summary (events, injected).
    ``progress(events so far)`` is called once per round, if given."""
    from .inject import plant  # it reads this module's row layout and simulation

    out = Path(out)
    if layout is None:
        layout = "time" if out.suffix in PARQUET_SUFFIXES + JSONL_SUFFIXES else "by-piece"
    if partitions not in (1, 2, 4):
        raise ValueError(f"--partitions must be 1, 2 or 4 (a Premium partition count), got {partitions}")
    trace = trace or f"generated-{seed}"
    rng = random.Random(seed)
    sims = [EntitySim(i, SHAPES[i % len(SHAPES)], max(1, clients), partitions, random.Random(rng.getrandbits(64)), trace)
            for i in range(entities)]
    # each injected kind gets its own entity of a fitting shape
    todo: dict[int, str] = {}
    for kind in inject:
        if kind not in INJECTIONS:
            raise ValueError(f"unknown injection kind {kind!r}; known: {', '.join(INJECTIONS)}")
        shapes = INJECTIONS[kind][1]
        free = [s for s in sims if s.shape in shapes and s.index not in todo]
        if not free:
            raise ValueError(f"no free entity of shape {'/'.join(shapes)} left for --inject {kind}: use more --entities "
                             f"(shapes cycle through {', '.join(SHAPES)})")
        todo[free[0].index] = kind
    if buckets is None:
        buckets = max(2, min(256, events // 250_000 + 2))
    meta = {"generator": {"events": events, "clients": clients, "entities": entities, "partitions": partitions, "seed": seed,
                          "inject": list(inject)}}
    writer = _Writer(out, layout, buckets, trace, meta)
    injected = []
    keys: dict[int, dict] = {}
    pos = 0
    total = 0
    done = False
    while True:
        if total >= events:
            done = True
        for sim in sims:
            rows = sim.drain() if done else sim.run(ops_per_round)
            kind = todo.get(sim.index)
            if kind is not None and not done:
                got = plant(kind, rows, sim, keys.setdefault(sim.index, {}))
                if got is not None:
                    rows, planted = got
                    del todo[sim.index]
                    injected.append((kind, sim, planted))
            for r in rows:
                r[POS] = pos
                pos += 1
            total += len(rows)
            writer.add(piece_key(sim.path), rows)
        if done:
            break
        if progress is not None:
            progress(total)
    records = [{"kind": kind, "checker_kind": INJECTIONS[kind][0], "clause": CLAUSES[INJECTIONS[kind][0]],
                "entity": sim.path, "pos": row[POS], "message_id": row[MESSAGE_ID]} for kind, sim, row in injected]
    writer.close({"events": pos})
    manifest = out / "_injected.json" if layout == "by-piece" else out.with_name(out.name + ".injected.json")
    if inject:
        manifest.write_text(json.dumps({"injected": records, "not_planted": sorted(todo.values())}, indent=1))
    return {"events": pos, "layout": layout, "buckets": buckets if layout == "by-piece" else None,
            "injected": records, "not_planted": sorted(todo.values()), "out": str(out)}
