"""What keeps replay fast per core (issue 20), asserted where a figure cannot be: the checker
leaves no cyclic garbage behind (a discarded copy of a piece's state, a violation tried in
the search), so the cyclic GC has nothing to find; before, a store and its dead-letter
subqueue, a state and its lock-token counter, and each violation kept with its traceback
were cycles: about a fifth of replay's CPU went to the GC."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("pyarrow")

from sbconform.trace.generate import INJECTIONS, generate  # noqa: E402
from sbconform.trace.replay import replay_local  # noqa: E402


def _garbage_after(run) -> list:
    gc.collect()
    enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        result = run()
        gc.collect()
        found = list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
        if enabled:
            gc.enable()
    return result, found


def test_checking_a_trace_leaves_no_cyclic_garbage(tmp_path) -> None:
    # overlapping operations (windows searched, candidates forked and dropped) and violations
    generate(tmp_path / "t", 12_000, clients=4, entities=10, seed=5, inject=list(INJECTIONS)[:4])
    replay_local([str(tmp_path / "t")])  # imports and caches warmed up
    results, garbage = _garbage_after(lambda: replay_local([str(tmp_path / "t")]))
    assert {r["status"] for r in results} == {"valid", "violation"}
    kinds = sorted({type(o).__name__ for o in garbage} & {"MessageStore", "PieceModel", "Violation", "frame", "_Op"})
    assert not kinds, f"{len(garbage)} objects left for the cyclic GC, among them {kinds}"


def test_decoding_a_batch_runs_no_gc_collection(tmp_path) -> None:
    """A batch's row tuples were each counted towards the cyclic GC's next collection, and
    each of those (one every 700 rows) walked the batch's column lists again: a tenth of
    replay's CPU. Decoding pauses the GC; the tuples are left for one collection after."""
    import pyarrow as pa

    from sbconform.trace.batches import by_piece, rows_of
    from sbconform.trace.schema import arrow_schema

    n = 20_000
    rows = [{"trace": "t", "pos": i, "time": i, "client": f"c{i % 4}", "op_id": i // 2, "op": "send",
             "phase": ("invoke", "ok")[i % 2], "entity": f"q{i % 3}", "message_id": f"m{i}", "seq": i} for i in range(n)]
    batch = pa.RecordBatch.from_pylist(rows, schema=arrow_schema())
    order, runs, _ = by_piece(batch)
    collections: list[int] = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        decoded = rows_of(batch, order)
    finally:
        gc.callbacks.remove(seen)
    assert len(decoded) == n and [r[1] for r in decoded[:2]] == [0, 3]  # in piece order: q0's rows first
    assert gc.isenabled()
    assert not collections, f"{len(collections)} collections while decoding {n} rows"


def test_the_creations_of_a_batch_are_found_column_wise() -> None:
    """check_batches looked at every row of a batch whose op dictionary names a creation (every
    batch of a file holding one) for the auto-forwarding it sets; ``configuring`` names the
    rows to look at, in ``by_piece``'s order."""
    import pyarrow as pa

    from sbconform.trace.batches import by_piece, configuring
    from sbconform.trace.schema import arrow_schema

    ops = ["send", "create-entity", "send", "update-entity", "create-entity", "send"]
    entities = ["b", "a", "b", "a", "b", "a"]
    rows = [{"trace": "t", "pos": i, "time": i, "client": "c", "op_id": i, "op": op, "phase": "invoke", "entity": e}
            for i, (op, e) in enumerate(zip(ops, entities))]
    batch = pa.RecordBatch.from_pylist(rows, schema=arrow_schema())
    assert configuring(batch, None) == [1, 3, 4]
    order, _, _ = by_piece(batch)
    assert order.tolist() == [0, 2, 4, 1, 3, 5]  # b's rows, then a's
    assert configuring(batch, order) == [2, 3, 4]  # rows 4, 1, 3 in that order
    plain = pa.RecordBatch.from_pylist([dict(r, op="send") for r in rows], schema=arrow_schema())
    assert configuring(plain, None) == []


def test_forgetting_the_oldest_removal_takes_constant_time() -> None:
    """A piece remembers how its last 20,000 messages left (and how its last 20,000 pruned locks
    ended); past that, each new one forgot the oldest with ``del d[next(iter(d))]``, which on a
    dict scans over every slot deleted before it: 15 us each at 20,000, so a long piece (the
    10M-event benchmark's pieces pass 20,000 removals) slowed down the longer it ran."""
    import time

    from sbconform.trace.checker import REMEMBER_REMOVED, Shared
    from sbreference.message import Message, StoredMessage

    shared = Shared()
    message = Message()
    msgs = [StoredMessage(message, seq, 0, 0, 0) for seq in range(REMEMBER_REMOVED + 100_000)]
    for msg in msgs[:REMEMBER_REMOVED]:
        shared.observe("q", "completed", msg)
    started = time.process_time()
    for msg in msgs[REMEMBER_REMOVED:]:
        shared.observe("q", "completed", msg)
    spent = time.process_time() - started
    assert len(shared.removed) == REMEMBER_REMOVED and next(iter(shared.removed)) == 100_000
    assert spent < 0.2, f"{spent:.2f} s for 100,000 removals past the limit"
