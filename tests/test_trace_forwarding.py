"""Replay of auto-forwarding: a destination holds messages no send of its own put there.

The checker does not model forwarding (SETTLE-FWD-*), so a piece that an entity forwards to
can only be "unknown", never "violation", wherever the forwarding was set: at creation or by
an update (SETTLE-FWD-003's scenario updates a queue to forward), and whichever file, bucket
or Spark partition holds the source's events.
"""

from __future__ import annotations

import json

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from sbconform.trace.replay import replay_local  # noqa: E402
from sbconform.trace.schema import FIELD_NAMES, arrow_schema  # noqa: E402

RECV = json.dumps({"mode": "peek-lock", "max_count": 1})


def _row(pos, entity, op_id, op, phase, **fields):
    row = {n: None for n in FIELD_NAMES}
    row.update(trace="t", pos=pos, time=pos, client="admin" if op.endswith("entity") else "c1", op_id=op_id, op=op,
               phase=phase, entity=entity)
    if row["client"] == "c1":
        row["conn"] = "c1.1"
    row.update(fields)
    return row


def forwarding_trace(how: str, also_broken: bool = False) -> list[dict]:
    """src forwards to dst (set at creation, or by an update); m1 sent to src is received from
    dst. With ``also_broken``, a third queue delivers a message nobody sent (a real violation)."""
    rows: list[dict] = []

    def add(entity, op_id, op, phase, **f):
        rows.append(_row(len(rows), entity, op_id, op, phase, **f))

    add("dst", 1, "create-entity", "invoke")
    add("dst", 1, "create-entity", "ok")
    forward = json.dumps({"forward_to": "dst"})
    add("src", 2, "create-entity", "invoke", args=forward if how == "create" else None)
    add("src", 2, "create-entity", "ok")
    if how == "update":
        add("src", 3, "update-entity", "invoke", args=json.dumps({"properties": {"forward_to": "dst"}}))
        add("src", 3, "update-entity", "ok")
    add("src", 4, "send", "invoke", message_id="m1")
    add("src", 4, "send", "ok", message_id="m1", seq=1)
    add("dst", 5, "receive", "invoke", args=RECV)
    add("dst", 5, "receive", "ok", message_id="m1", seq=1, lock="1", delivery_count=1)
    if also_broken:
        add("other", 6, "create-entity", "invoke")
        add("other", 6, "create-entity", "ok")
        add("other", 7, "receive", "invoke", args=RECV)
        add("other", 7, "receive", "ok", message_id="x", seq=9, lock="2", delivery_count=1)
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows))
    return path


def write_by_piece(root, rows):
    """A by-piece directory (as ``sbconform generate`` writes it) with each entity in its own
    bucket file: the source's events are never in the destination's file."""
    root.mkdir()
    files = []
    for i, entity in enumerate(dict.fromkeys(r["entity"] for r in rows)):
        name = f"bucket-{i:05d}.parquet"
        mine = [r for r in rows if r["entity"] == entity]
        pq.write_table(pa.Table.from_pylist(mine, schema=arrow_schema()), str(root / name))
        files.append(name)
    size = max((root / f).stat().st_size for f in files)
    (root / "_layout.json").write_text(json.dumps({"layout": "by-piece", "files": files, "max_file_bytes": size,
                                                   "buckets": len(files)}))
    return root


def pieces(results):
    return {r["piece"]: r for r in results}


@pytest.mark.parametrize("how", ["create", "update"])
def test_a_forwarding_destination_is_unknown_never_a_violation(tmp_path, how):
    got = pieces(replay_local([str(write_jsonl(tmp_path / "t.jsonl", forwarding_trace(how)))]))
    assert got["dst"]["status"] == "unknown", got["dst"]
    assert "auto-forwarded from 'src'" in got["dst"]["reason"], got["dst"]


@pytest.mark.parametrize("how", ["create", "update"])
def test_forwarding_is_known_across_bucket_files(tmp_path, how):
    root = write_by_piece(tmp_path / "b", forwarding_trace(how, also_broken=True))
    got = pieces(replay_local([str(root)]))
    assert got["dst"]["status"] == "unknown", got["dst"]
    assert got["other"]["status"] == "violation" and got["other"]["clause"] == "SETTLE-SEQ-001", got["other"]


def test_spark_knows_forwarding_across_tasks(spark, tmp_path):
    from sbconform.trace.replay import replay_spark

    rows = forwarding_trace("update", also_broken=True)
    by_piece_dir = write_by_piece(tmp_path / "b", rows)
    summary = replay_spark([str(by_piece_dir)], str(tmp_path / "r1"), spark=spark)
    got = pieces(pq.read_table(tmp_path / "r1" / "pieces.parquet").to_pylist())
    assert got["dst"]["status"] == "unknown" and got["other"]["status"] == "violation", got
    assert summary["violations"] == 1, summary
    # time layout: Spark repartitions by piece, src and dst in partitions of their own
    replay_spark([str(write_jsonl(tmp_path / "t.jsonl", rows))], str(tmp_path / "r2"), spark=spark, partitions=3)
    got = pieces(pq.read_table(tmp_path / "r2" / "pieces.parquet").to_pylist())
    assert got["dst"]["status"] == "unknown" and got["other"]["status"] == "violation", got
