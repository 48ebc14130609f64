"""Traces and their commands, the leads the last round left (events out of position order in
Parquet, subdirectories, remote inputs, a recording killed) and what a hostile or careless
input does: never a false verdict ("unknown" never said "violation", a violation never
"valid"), one line and exit 2 for what cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

from sbconform.trace.io import ParquetWriter  # noqa: E402
from sbconform.trace.replay import check_batches, replay_local  # noqa: E402
from sbconform.trace.schema import FIELD_NAMES, TraceFormatError, arrow_schema  # noqa: E402
from test_cli_careless import one_error  # noqa: E402  (one line, no traceback)

RECV = json.dumps({"mode": "peek-lock", "max_count": 1})


def row(pos, op_id, op, phase, client="c1", entity="q", **fields):
    out = {n: None for n in FIELD_NAMES}
    out.update(trace="t", pos=pos, time=pos, client=client, conn=client, op_id=op_id, op=op, phase=phase, entity=entity)
    out.update(fields)
    return out


def overlapping_receives(entity="q"):
    """A valid trace: two receives overlap (pos 6..9); the second one invoked completes first,
    with the second message. Valid only because they overlap."""
    d = lambda seq: {"message_id": f"m{seq}", "seq": seq, "lock": f"L{seq}", "delivery_count": 1}  # noqa: E731
    rows = [row(0, 1, "create-entity", "invoke", entity=entity, args=json.dumps({"lock_duration": 5000})),
            row(1, 1, "create-entity", "ok", entity=entity)]
    for pos, (op_id, seq) in zip((2, 4), ((2, 1), (3, 2))):
        rows += [row(pos, op_id, "send", "invoke", entity=entity, message_id=f"m{seq}"),
                 row(pos + 1, op_id, "send", "ok", entity=entity, message_id=f"m{seq}", seq=seq)]
    rows += [row(6, 4, "receive", "invoke", "c1", entity, args=RECV),
             row(7, 5, "receive", "invoke", "c2", entity, args=RECV),
             row(8, 5, "receive", "ok", "c2", entity, **d(2)),
             row(9, 4, "receive", "ok", "c1", entity, **d(1))]
    return rows


def parquet(path: Path, rows) -> Path:
    with ParquetWriter(path, "t", validate=False) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=arrow_schema()))
    return path


# ------------------------------------------------------------------ events out of position order


def test_the_overlapping_receives_in_position_order_are_valid():
    (result,) = check_batches([pa.RecordBatch.from_pylist(overlapping_receives(), schema=arrow_schema())])
    assert result["status"] == "valid", result


def test_parquet_events_out_of_position_order_are_refused_not_judged(tmp_path, capsys):
    """Written by another tool, a Parquet file's rows may not be in ``pos`` order. Read in file
    order, the overlapping receives above no longer overlap: the checker said VIOLATION
    SETTLE-RECV-002, exit 1, for a valid trace."""
    rows = overlapping_receives()
    rows[6:] = [rows[7], rows[8], rows[6], rows[9]]  # pos 7, 8, 6, 9
    trace = parquet(tmp_path / "t.parquet", rows)
    with pytest.raises(TraceFormatError, match=r"t\.parquet.*'pos' 6 .*after 8.*'q'"):
        replay_local([str(trace)])
    line = one_error(capsys, ["replay", "--local", str(trace)])
    assert "t.parquet" in line and "position order" in line


def test_events_out_of_order_across_batches_and_files_are_refused(tmp_path):
    """The order is checked per piece over the whole trace: a later file (or batch) going back."""
    rows = overlapping_receives()
    first = parquet(tmp_path / "a-0.parquet", rows[:6] + rows[7:9])
    second = parquet(tmp_path / "a-1.parquet", [rows[6], rows[9]])
    with pytest.raises(TraceFormatError, match=r"a-1\.parquet.*'pos' 6 .*after 8"):
        replay_local([str(first), str(second)])
    batches = [pa.RecordBatch.from_pylist(rows[:8], schema=arrow_schema()),
               pa.RecordBatch.from_pylist(rows[5:], schema=arrow_schema())]  # pos 5 again
    with pytest.raises(TraceFormatError, match=r"'pos' 5 .*after 7"):
        check_batches(batches)


def test_two_pieces_interleaved_each_in_order_are_read(tmp_path):
    """Pieces may interleave in a file (the by-piece layout's buckets): only each piece's own
    order counts."""
    a, b = overlapping_receives("a"), overlapping_receives("b")
    rows = []
    for x, y in zip(a, b):
        rows += [dict(x, pos=2 * x["pos"] + 1), dict(y, pos=2 * y["pos"])]  # b's pos before a's in each pair
    results = replay_local([str(parquet(tmp_path / "t.parquet", rows))])
    assert [r["status"] for r in results] == ["valid", "valid"], results


def test_a_duplicate_pos_is_refused(tmp_path):
    rows = overlapping_receives()
    rows[9]["pos"] = 8
    with pytest.raises(TraceFormatError, match=r"'pos' 8 .*after 8"):
        replay_local([str(parquet(tmp_path / "t.parquet", rows))])
