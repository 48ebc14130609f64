"""``sbconform diff``: are two traces of the same scenario equivalent?

Two traces of one scenario (the reference and another target, or two runs) are compared
operation by operation: the k-th operation of a client on an entity in one is matched with
the k-th operation of that client on that entity in the other. What may legitimately
differ is normalised away first:

- times, connection names, lock tokens and sequence numbers are not compared;
- entity paths are compared as the run requested them (a target that adds a unique
  suffix to the names it creates is mapped back through ``create-entity``);
- partitions are compared only where the model allows no choice: deliveries of keyed
  messages (partition key, session, or message id on an entity with duplicate detection).
  On a partitioned entity a receive may answer from any partition, so what a client was
  delivered there is compared as a whole (the multiset of message ids and delivery counts
  over the trace), not receive by receive;
- observations that describe a target rather than the scenario (``describe-entity``,
  ``create-entity``'s description) are not compared.

Real differences: an operation only one side has, a different operation at the same
place, a different outcome (ok / fail / info / none), different error codes, different
messages or message counts delivered, different delivery counts, a keyed message in a
different partition, different entity counts.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .io import TraceFormatError, read_events, read_header, trace_files
from .schema import FIELD_NAMES

DELIVERING = ("receive", "receive-deferred", "peek")
SETTLING = ("complete", "abandon", "defer", "dead-letter", "renew-lock")


@dataclass
class Op:
    op_id: int
    op: str
    client: str
    entity: str | None
    invoke: dict[str, Any]
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pos(self) -> int:
        return self.invoke["pos"]

    @property
    def phase(self) -> str:
        phases = {e["phase"] for e in self.outcomes}
        if not phases:
            return "none"
        if len(phases) == 1:
            return phases.pop()
        return "+".join(sorted(phases))

    @property
    def error(self) -> str | None:
        return next((e["error"] for e in self.outcomes if e["error"]), None)

    def delivered(self) -> list[dict[str, Any]]:
        return [e for e in self.outcomes if e["phase"] == "ok" and (e["message_id"] is not None or e["seq"] is not None)]


@dataclass
class Difference:
    what: str
    client: str
    entity: str | None
    index: int  # the operation's rank among its client's operations on the entity, from 1
    pos_a: int | None
    pos_b: int | None

    def __str__(self) -> str:
        where = f"A:pos {self.pos_a if self.pos_a is not None else '-'} / B:pos {self.pos_b if self.pos_b is not None else '-'}"
        rank = f"op #{self.index}" if self.index else "all ops"
        return f"{where}  {self.client} {self.entity or '-'} {rank}: {self.what}"


class Trace:
    """One trace as operations, with the entity facts normalisation needs."""

    def __init__(self, events: Iterable[dict[str, Any]]) -> None:
        ops: dict[int, Op] = {}
        renames: dict[str, str] = {}  # path the target returned -> path requested
        created: list[tuple[Op, dict[str, Any]]] = []
        for e in events:
            e = {name: e.get(name) for name in FIELD_NAMES}  # events made in memory may leave nulls out
            op = ops.get(e["op_id"])
            if e["phase"] == "invoke":
                ops[e["op_id"]] = Op(e["op_id"], e["op"], e["client"], e["entity"], e)
                continue
            if op is None:
                continue  # an outcome without its invoke: nothing to match it with
            op.outcomes.append(e)
            if e["op"] == "create-entity" and e["phase"] == "ok":
                if e["entity"] and op.entity and e["entity"] != op.entity:
                    renames[e["entity"]] = op.entity
                created.append((op, json.loads(e["result"] or "{}")))
        self.renames = renames
        self.partitioned: set[str] = set()
        self.deduplicating: set[str] = set()
        for op, result in created:
            path = self.entity(op.entity)
            description = result.get("description") or {}
            if (result.get("partitions") or 0) > 1 or description.get("enable_partitioning"):
                self.partitioned.add(path)
            if description.get("requires_duplicate_detection"):
                self.deduplicating.add(path)
        self.ops = sorted(ops.values(), key=lambda o: o.pos)
        for op in self.ops:
            op.entity = self.entity(op.entity)

    def entity(self, path: str | None) -> str | None:
        if path is None:
            return None
        for _ in range(4):  # a subscription of a renamed topic: map the topic too
            for returned in sorted(self.renames, key=len, reverse=True):
                if path == returned or path.startswith(returned + "/"):
                    path = self.renames[returned] + path[len(returned):]
                    break
            else:
                break
        return path

    @staticmethod
    def _under(path: str | None, roots: set[str]) -> bool:
        return path is not None and any(path == r or path.startswith(r + "/") for r in roots)

    def is_partitioned(self, path: str | None) -> bool:
        return self._under(path, self.partitioned)

    def keyed(self, path: str | None, event: dict[str, Any]) -> bool:
        return bool(event["partition_key"] or event["session"] or (event["message_id"] and self._under(path, self.deduplicating)))

    def by_client_entity(self) -> dict[tuple[str, str | None], list[Op]]:
        out: dict[tuple[str, str | None], list[Op]] = defaultdict(list)
        for op in self.ops:
            out[(op.client, op.entity)].append(op)
        return out


def _names(events: list[dict[str, Any]]) -> list[str]:
    return [f"{e['message_id']}" + (f"(dc {e['delivery_count']})" if e["delivery_count"] is not None else "") for e in events]


def compare(a: Trace, b: Trace) -> list[Difference]:
    diffs: list[Difference] = []
    ops_a, ops_b = a.by_client_entity(), b.by_client_entity()
    keys = sorted(set(ops_a) | set(ops_b), key=lambda k: min(
        [o.pos for o in ops_a.get(k, [])[:1]] + [o.pos for o in ops_b.get(k, [])[:1]]))
    for key in keys:
        client, entity = key
        la, lb = ops_a.get(key, []), ops_b.get(key, [])
        partitioned = a.is_partitioned(entity) or b.is_partitioned(entity)
        pooled_a: Counter = Counter()
        pooled_b: Counter = Counter()
        for index in range(max(len(la), len(lb))):
            x = la[index] if index < len(la) else None
            y = lb[index] if index < len(lb) else None

            def note(what: str) -> None:
                diffs.append(Difference(what, client, entity, index + 1, x.pos if x else None, y.pos if y else None))

            if x is None or y is None:
                only = x or y
                note(f"{only.op} only in {'A' if x else 'B'} ({only.phase}{' ' + only.error if only.error else ''})")
                continue
            if x.op != y.op:
                note(f"different operations: A {x.op}, B {y.op}")
                continue
            if x.phase != y.phase:
                note(f"{x.op}: A {x.phase}{' ' + x.error if x.error else ''}, B {y.phase}{' ' + y.error if y.error else ''}")
                continue
            if x.error != y.error:
                note(f"{x.op} failed with different errors: A {x.error}, B {y.error}")
                continue
            if x.op in ("send", "schedule") and x.invoke["message_id"] != y.invoke["message_id"]:
                note(f"{x.op} of different messages: A {x.invoke['message_id']}, B {y.invoke['message_id']}")
            elif x.op in SETTLING and not partitioned and x.invoke["message_id"] != y.invoke["message_id"]:
                note(f"{x.op} of different messages: A {x.invoke['message_id']}, B {y.invoke['message_id']}")
            if x.op == "entity-counts" and x.phase == "ok":
                ca, cb = (json.loads(o.outcomes[0]["result"] or "{}") for o in (x, y))
                if ca != cb:
                    note(f"entity counts differ: A {ca}, B {cb}")
            if x.op not in DELIVERING or x.phase != "ok":
                continue
            da, db = x.delivered(), y.delivered()
            if partitioned:
                pooled_a.update((e["message_id"], e["delivery_count"]) for e in da)
                pooled_b.update((e["message_id"], e["delivery_count"]) for e in db)
            else:
                ida, idb = [e["message_id"] for e in da], [e["message_id"] for e in db]
                if ida != idb:
                    note(f"{x.op} delivered different messages: A {ida} ({len(ida)}), B {idb} ({len(idb)})")
                    continue
                counts_a, counts_b = [e["delivery_count"] for e in da], [e["delivery_count"] for e in db]
                if counts_a != counts_b:
                    note(f"{x.op} delivered with different delivery counts: A {_names(da)}, B {_names(db)}")
                    continue
            by_id_b = {e["message_id"]: e for e in db}
            for ea in da:
                eb = by_id_b.get(ea["message_id"])
                if eb is None or ea["partition"] is None or eb["partition"] is None:
                    continue
                if (a.keyed(entity, ea) or b.keyed(entity, eb)) and ea["partition"] != eb["partition"]:
                    note(f"keyed message {ea['message_id']} delivered from partition {ea['partition']} in A, {eb['partition']} in B")
        if pooled_a != pooled_b:
            only_a = sorted((pooled_a - pooled_b).elements(), key=str)
            only_b = sorted((pooled_b - pooled_a).elements(), key=str)
            first_a = la[0].pos if la else None
            first_b = lb[0].pos if lb else None
            diffs.append(Difference(
                f"delivered different messages on the partitioned entity (message id, delivery count): only A {only_a}, only B {only_b}",
                client, entity, 0, first_a, first_b))
    return diffs


@dataclass
class DiffResult:
    differences: dict[str, list[Difference]]  # trace id -> its differences
    only_a: list[str]
    only_b: list[str]

    @property
    def same(self) -> bool:
        return not self.only_a and not self.only_b and not any(self.differences.values())


def _load(path: Path) -> dict[str, Trace]:
    """trace id -> Trace, for a file or every trace file under a directory (a by-piece
    directory's bucket files make one trace). A cut file is unreadable here (comparing half a trace would report differences that are not)."""
    out: dict[str, Trace] = {}
    if (path / "_layout.json").is_file():  # by-piece (sbconform generate): the bucket files are pieces of one trace
        pieces: dict[str, list[dict[str, Any]]] = {}
        for file in trace_files(path):
            pieces.setdefault(read_header(file)["trace"], []).extend(read_events(file))
        out = {trace_id: Trace(sorted(events, key=lambda e: e["pos"])) for trace_id, events in pieces.items()}
    for file in [] if out else trace_files(path):
        trace_id = read_header(file)["trace"]
        if trace_id in out:
            raise TraceFormatError(f"{file}: trace {trace_id!r} appears in two files under {path}")
        out[trace_id] = Trace(read_events(file))
    if not out:
        raise TraceFormatError(f"{path}: no trace files (.jsonl, .parquet)")
    return out


def diff_paths(a: str | Path, b: str | Path) -> DiffResult:
    """Compare two trace files (whatever their trace ids), or two directories of traces
    (matched by trace id)."""
    ta, tb = _load(Path(a)), _load(Path(b))
    if not Path(a).is_dir() and not Path(b).is_dir():
        (ka, va), (kb, vb) = next(iter(ta.items())), next(iter(tb.items()))
        name = ka if ka == kb else f"{ka} | {kb}"
        return DiffResult({name: compare(va, vb)}, [], [])
    return DiffResult(
        {k: compare(ta[k], tb[k]) for k in sorted(set(ta) & set(tb))},
        sorted(set(ta) - set(tb)),
        sorted(set(tb) - set(ta)),
    )


__all__ = ["DiffResult", "Difference", "Trace", "compare", "diff_paths"]
