"""Trace encodings: JSON Lines and Parquet round trips, conversion, cut files, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sbconform.trace.io import (
    JsonlWriter,
    ParquetWriter,
    TraceCut,
    convert,
    jsonl_header,
    parquet_header,
    read_events,
    read_jsonl,
    read_parquet,
)
from sbconform.trace.schema import FIELD_NAMES, Event, TraceFormatError, check_event

REPO = Path(__file__).resolve().parent.parent


def sample(n: int = 20, trace: str = "t1") -> list[dict]:
    events = []
    for i in range(n):
        op_id = i // 2
        phase = "invoke" if i % 2 == 0 else ("ok" if op_id % 3 else "fail")
        events.append({
            "trace": trace, "pos": i, "time": i * 10, "client": f"c{op_id % 3}", "conn": f"c{op_id % 3}.1",
            "op_id": op_id, "op": "send" if op_id % 2 else "receive", "phase": phase, "entity": "q",
            "partition": op_id % 2 if phase == "ok" else None, "message_id": f"m{op_id}",
            "seq": op_id + 1 if phase == "ok" else None, "lock": "7" if phase == "ok" else None,
            "delivery_count": 1 if phase == "ok" else None, "session": None, "partition_key": "k" if op_id % 4 == 0 else None,
            "args": json.dumps({"max_count": 2}) if phase == "invoke" else None,
            "result": json.dumps({"ünï": "code"}) if phase == "ok" else None,
            "error": "message-lock-lost" if phase == "fail" else None,
        })
    return [check_event(e, "sample") for e in events]


def write_jsonl(path: Path, events: list[dict], **meta) -> None:
    with JsonlWriter(path, events[0]["trace"], **meta) as writer:
        writer.write_all(events)


def test_jsonl_round_trip_with_header(tmp_path: Path) -> None:
    events = sample()
    path = tmp_path / "t.jsonl"
    write_jsonl(path, events, target={"name": "reference"})
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"format": "sbconform-trace", "version": 1, "trace": "t1", "target": {"name": "reference"}}
    assert len(lines) == len(events) + 1
    assert "null" not in lines[1]  # null fields are left out
    assert list(read_jsonl(path)) == events
    assert jsonl_header(path)["target"] == {"name": "reference"}
    assert Event(**events[3]).as_dict() == events[3]


def test_jsonl_writer_flushes_every_event_and_appends(tmp_path: Path) -> None:
    events = sample(6)
    path = tmp_path / "t.jsonl"
    writer = JsonlWriter(path, "t1")
    writer.write(events[0])
    assert len(path.read_text().splitlines()) == 2  # on disk before close
    writer.close()
    with JsonlWriter(path, "t1") as again:  # the same trace: appended, no second header
        again.write_all(events[1:])
    assert list(read_jsonl(path)) == events
    with pytest.raises(TraceFormatError, match="cannot append trace 'other'"):
        JsonlWriter(path, "other")


def test_writer_refuses_a_bad_event_and_keeps_the_file_well_formed(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with JsonlWriter(path, "t1") as writer:
        writer.write(sample(1)[0])
        with pytest.raises(TraceFormatError, match="field 'phase'"):
            writer.write({**sample(2)[1], "phase": "done"})
    assert len(list(read_jsonl(path))) == 1


def test_a_cut_file_yields_everything_before_then_reports_the_cut(tmp_path: Path) -> None:
    events = sample(10)
    path = tmp_path / "cut.jsonl"
    write_jsonl(path, events)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 25])  # the last line loses its end
    got = []
    with pytest.raises(TraceCut) as info:
        for event in read_jsonl(path):
            got.append(event)
    assert got == events[:-1]
    assert info.value.line == 11 and info.value.events == 9
    assert f"{path}:11" in str(info.value) and "cut" in str(info.value)
    cuts = []
    assert list(read_jsonl(path, on_cut=cuts.append)) == events[:-1]
    assert len(cuts) == 1 and cuts[0].line == 11


def test_a_last_line_without_its_newline_is_a_cut(tmp_path: Path) -> None:
    events = sample(4)
    path = tmp_path / "cut.jsonl"
    write_jsonl(path, events)
    path.write_bytes(path.read_bytes()[:-1])
    cuts = []
    assert list(read_jsonl(path, on_cut=cuts.append)) == events[:-1]
    assert cuts[0].line == 5 and "no newline" in str(cuts[0])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda e: {**e, "seq": "five"}, "field 'seq' should be int64"),
        (lambda e: {**e, "phase": "done"}, "field 'phase' is 'done'"),
        (lambda e: {k: v for k, v in e.items() if k != "client"}, "field 'client' is required"),
        (lambda e: {**e, "colour": "red"}, "unknown field(s) ['colour']"),
        (lambda e: {**e, "args": "[1]"}, "field 'args' is not a JSON object"),
        (lambda e: {**e, "pos": 0}, "field 'pos' is 0, not after"),
        (lambda e: {**e, "trace": "t2"}, "field 'trace' is 't2'"),
    ],
)
def test_a_bad_line_in_the_middle_names_file_line_and_field(tmp_path: Path, mutate, message) -> None:
    events = sample(6)
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps({"format": "sbconform-trace", "version": 1, "trace": "t1"})]
    lines += [json.dumps(mutate(e) if i == 3 else e) for i, e in enumerate(events)]
    path.write_text("\n".join(lines) + "\n")
    got = []
    with pytest.raises(TraceFormatError) as info:
        for event in read_jsonl(path):
            got.append(event)
    assert not isinstance(info.value, TraceCut)
    assert str(info.value).startswith(f"{path}:5: ") and message in str(info.value)
    assert got == events[:3]


def test_invalid_json_in_the_middle_is_an_error_not_a_cut(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    write_jsonl(path, sample(4))
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=rf"{path.name}:3: not a JSON object") as info:
        list(read_jsonl(path))
    assert not isinstance(info.value, TraceCut)


def test_headers_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"format": "sbconform-trace", "version": 99, "trace": "t"}\n')
    with pytest.raises(TraceFormatError, match="version 99 is newer"):
        list(read_jsonl(path))
    path.write_text(json.dumps(sample(1)[0]) + "\n")
    with pytest.raises(TraceFormatError, match=r"h.jsonl:1: not a trace header"):
        list(read_jsonl(path))
    path.write_text("")
    with pytest.raises(TraceFormatError, match="empty file"):
        list(read_jsonl(path))


def test_parquet_round_trip_in_row_groups(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    events = sample(50)
    path = tmp_path / "t.parquet"
    with ParquetWriter(path, "t1", row_group=16, target={"name": "reference"}) as writer:
        writer.write_all(events)
    meta = pq.ParquetFile(str(path)).metadata
    assert meta.num_row_groups == 4 and meta.num_rows == 50
    assert parquet_header(path) == {"format": "sbconform-trace", "version": 1, "trace": "t1", "target": {"name": "reference"}}
    assert list(read_events(path)) == events
    batches = list(read_parquet(path, batch_size=20))
    assert sum(b.num_rows for b in batches) == 50 and batches[0].schema.names == list(FIELD_NAMES)


def test_parquet_errors_name_the_row_and_field(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    from sbconform.trace.schema import arrow_schema

    events = sample(10)
    events[7]["op"] = "teleport"
    path = tmp_path / "bad.parquet"
    with ParquetWriter(path, "t1", validate=False) as writer:
        writer.write_all(events)
    with pytest.raises(TraceFormatError, match=r"bad.parquet: row 7: field 'op' is not an operation"):
        list(read_events(path))
    plain = tmp_path / "plain.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), str(plain))
    with pytest.raises(TraceFormatError, match="no 'sbconform-trace' key"):
        list(read_parquet(plain))
    assert arrow_schema().field("pos").nullable is False


def test_convert_both_ways_keeps_every_event_and_the_header(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    events = sample(40)
    src = tmp_path / "a.jsonl"
    write_jsonl(src, events, target={"name": "x"})
    assert convert(src, tmp_path / "b.parquet") == 40
    assert convert(tmp_path / "b.parquet", tmp_path / "c.jsonl") == 40
    assert list(read_events(tmp_path / "c.jsonl")) == events
    assert jsonl_header(tmp_path / "c.jsonl") == jsonl_header(src)


def test_convert_a_cut_file_converts_what_precedes_the_cut(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    events = sample(10)
    src = tmp_path / "a.jsonl"
    write_jsonl(src, events)
    src.write_bytes(src.read_bytes()[:-3])
    with pytest.raises(TraceCut):
        convert(src, tmp_path / "b.parquet")
    assert list(read_events(tmp_path / "b.parquet")) == events[:-1]


def sbconform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sbconform.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_convert_command(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    events = sample(12)
    write_jsonl(tmp_path / "a.jsonl", events)
    run = sbconform("convert", str(tmp_path / "a.jsonl"), str(tmp_path / "a.parquet"))
    assert run.returncode == 0, run.stderr
    assert "12 events" in run.stdout
    assert list(read_events(tmp_path / "a.parquet")) == events
    (tmp_path / "bad.jsonl").write_text("nonsense\n")
    run = sbconform("convert", str(tmp_path / "bad.jsonl"), str(tmp_path / "bad.parquet"))
    assert run.returncode == 2 and "bad.jsonl:1" in run.stderr
    assert not (tmp_path / "bad.parquet").exists()


def test_an_incomplete_last_line_followed_by_blank_lines_is_still_a_cut(tmp_path: Path) -> None:
    events = sample(4)
    path = tmp_path / "cut.jsonl"
    write_jsonl(path, events)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][:10]]) + "\n\n\n")
    cuts = []
    assert list(read_jsonl(path, on_cut=cuts.append)) == events[:-1]
    assert cuts[0].line == 5 and "incomplete JSON" in str(cuts[0])


# ------------------------------------------------------------------ every trace file the tool writes


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """One small scenario, as ``sbconform generate`` writes it: a Parquet file, a JSON Lines
    file and a by-piece directory (Parquet bucket files)."""
    pytest.importorskip("pyarrow")
    from sbconform.trace.generate import generate

    root = tmp_path_factory.mktemp("generated")
    for name in ("g.parquet", "g.jsonl", "gdir"):
        generate(root / name, 2_000, entities=4, seed=1)
    return root


def test_diff_and_convert_read_every_trace_generate_writes(generated: Path, tmp_path: Path, capsys) -> None:
    from sbconform.cli import main
    from sbconform.trace.diff import diff_paths

    g = generated
    assert parquet_header(g / "g.parquet")["trace"] == jsonl_header(g / "g.jsonl")["trace"] == "generated-1"
    for bucket in sorted((g / "gdir").glob("bucket-*.parquet")):
        assert parquet_header(bucket)["trace"] == "generated-1"
    assert diff_paths(g / "g.parquet", g / "g.jsonl").same
    assert diff_paths(g / "gdir", g / "gdir").same  # the bucket files are the pieces of one trace
    assert diff_paths(g / "gdir", g / "g.jsonl").same
    assert convert(g / "g.parquet", tmp_path / "back.jsonl") > 0
    assert list(read_jsonl(tmp_path / "back.jsonl")) == list(read_jsonl(g / "g.jsonl"))
    assert main(["diff", str(g / "g.parquet"), str(g / "g.jsonl")]) == 0
    assert main(["diff", str(g / "gdir"), str(g / "gdir")]) == 0
    assert main(["convert", str(g / "g.parquet"), str(tmp_path / "c.jsonl")]) == 0
    assert "not a sbconform trace" not in capsys.readouterr().err


def test_generate_and_the_parquet_writer_store_the_header_the_same_way(generated: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    convert(generated / "g.jsonl", tmp_path / "c.parquet")
    assert pq.read_schema(generated / "g.parquet").metadata == pq.read_schema(tmp_path / "c.parquet").metadata


def test_a_parquet_trace_from_an_older_generate_is_still_read(tmp_path: Path) -> None:
    """``generate`` used to store the header under the key ``header``: those files stay readable."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from sbconform.trace.schema import arrow_schema, header

    events = sample(6, trace="old")
    schema = arrow_schema()
    schema = schema.with_metadata({**schema.metadata, b"header": json.dumps(header("old")).encode()})
    pq.write_table(pa.Table.from_pylist(events, schema=schema), tmp_path / "old.parquet")
    assert parquet_header(tmp_path / "old.parquet")["trace"] == "old"
    assert list(read_events(tmp_path / "old.parquet")) == events


def _corrupt_data_pages(path: Path) -> None:
    """Overwrite the middle of the data pages, leaving the footer (schema, metadata) intact."""
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    start, end = 4, len(data) - footer
    middle = (start + end) // 2
    data[middle - (end - start) // 4: middle + (end - start) // 4] = b"\x5a" * (2 * ((end - start) // 4))
    path.write_bytes(bytes(data))


def test_a_parquet_trace_with_corrupt_data_pages_is_called_corrupt(tmp_path: Path, capsys) -> None:
    pytest.importorskip("pyarrow")
    from sbconform.cli import main

    path = tmp_path / "t.parquet"
    with ParquetWriter(path, "t1") as writer:
        writer.write_all(sample(2_000))
    _corrupt_data_pages(path)
    assert parquet_header(path)["trace"] == "t1"  # the footer is intact: the damage is in the data
    for argv in (["diff", str(path), str(path)], ["convert", str(path), str(tmp_path / "o.jsonl")],
                 ["replay", "--local", str(path)]):
        assert main(argv) == 2, argv
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and str(path) in lines[0] and "corrupt" in lines[0], (argv, lines)
    assert not (tmp_path / "o.jsonl").exists()
