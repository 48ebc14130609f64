"""Traces and their commands, the leads the last round left (events out of position order in
Parquet, subdirectories, remote inputs, a recording killed) and what a hostile or careless
input does: never a false verdict ("unknown" never said "violation", a violation never
"valid"), one line and exit 2 for what cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

from sbconform.cli import main  # noqa: E402
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


# ------------------------------------------------------------------ subdirectories


def jsonl(path: Path, rows) -> Path:
    from sbconform.trace.io import JsonlWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    with JsonlWriter(path, "t", validate=False) as writer:
        for r in rows:
            writer.write({k: v for k, v in r.items() if v is not None})
    return path


def test_replay_reads_a_directory_s_subdirectories_as_convert_and_diff_do(tmp_path, capsys):
    """A trace split over a directory and its subdirectory: replay read only the top level, so
    the violation in the subdirectory's part was never checked: 'valid', exit 0."""
    rows = overlapping_receives()
    rows[6:] = [rows[7], rows[8], rows[6], rows[9]]
    rows = [dict(r, pos=i) for i, r in enumerate(rows)]  # sequential receives, the second message first
    jsonl(tmp_path / "t" / "part-1.jsonl", rows[:6])
    jsonl(tmp_path / "t" / "part-2" / "rest.jsonl", rows[6:])  # files are read in path order
    assert main(["replay", "--local", str(tmp_path / "t")]) == 1
    assert "VIOLATION SETTLE-RECV-002" in capsys.readouterr().out
    only_below = tmp_path / "u"
    jsonl(only_below / "sub" / "part-1.jsonl", overlapping_receives())
    assert main(["replay", "--local", str(only_below)]) == 0, capsys.readouterr()


# ------------------------------------------------------------------ remote inputs


def test_a_remote_file_system_that_does_not_answer_is_refused_in_bounded_time(monkeypatch, capsys):
    """``replay gs://bucket/trace`` without network or credentials: pyarrow's file system retried
    for minutes (over 2 minutes here) looking for _layout.json, Spark not even started."""
    import time

    from sbconform.trace import layout as replay_module

    def stuck(uri):  # FileSystem.from_uri or open_input_file retrying (pyarrow's types cannot be patched)
        time.sleep(30)
        raise OSError("never")

    monkeypatch.setattr(replay_module, "_open", stuck)
    monkeypatch.setattr(replay_module, "REMOTE_TIMEOUT", 0.5)
    started = time.monotonic()
    line = one_error(capsys, ["replay", "gs://bucket/trace"])
    assert time.monotonic() - started < 5
    assert line.startswith("sbconform replay: gs://bucket/trace") and "did not answer in 0.5 s" in line, line


# ------------------------------------------------------------------ a Parquet recording killed


def _sends(sink, n, first=0):
    for i in range(first, first + n):
        op = sink.op()
        sink.write("c1", op, "peek", "invoke", entity="q", args={"max_count": 1, "from_seq": i})
    sink.flush()  # as the relay does after each batch of frames


def test_a_parquet_recording_killed_keeps_every_part_but_the_last(tmp_path):
    """A Parquet file is readable only once closed, and the recorder closed its file only at
    rotation (256 MiB) or at the end: a recording SIGKILLed held one unreadable file, every
    event lost. Its part is now closed once it is PART_SECONDS old (at the next flush)."""
    from sbconform.proxy.sink import TraceSink
    from sbconform.trace.io import read_events

    now = [1000.0]
    sink = TraceSink(tmp_path, "rec", fmt="parquet", clock=lambda: now[0], part_seconds=60)
    _sends(sink, 10)
    now[0] += 30
    _sends(sink, 5, 10)
    assert len(sink.files) == 1
    now[0] += 31
    sink.flush()  # the part is 61 s old at this flush (the proxy's timer, or the next batch's): closed
    _sends(sink, 3, 15)
    # killed here: nothing more is closed; the first part is whole, the open one is not a trace file
    assert len(sink.files) == 2
    assert [e["pos"] for e in read_events(sink.files[0])] == list(range(15))
    assert sorted(f.name for f in tmp_path.iterdir()) == ["rec-00001.parquet", "rec-00002.parquet.partial"]
    assert replay_local([str(tmp_path)])[0]["events"] == 15  # the directory replays as it was left
    sink.close()  # (the test's own cleanup: a stop closes the last part too)
    assert [e["pos"] for e in read_events(sink.files[1])] == [15, 16, 17]
    assert replay_local([str(tmp_path)])[0]["events"] == 18


def test_an_idle_parquet_recording_closes_its_part_without_traffic(tmp_path):
    """The proxy's timer flushes the sink: events recorded then silence are on disk, readable,
    without waiting for more traffic or the stop."""
    import time

    from sbconform.proxy.run import ProxyThread
    from sbconform.trace.io import read_events

    upstream = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    proxy = ProxyThread(upstream, tmp_path, describe="none", fmt="parquet", part_seconds=0.2)
    proxy.start()
    try:
        proxy.loop.call_soon_threadsafe(_sends, proxy.sink, 4)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (proxy.sink.files and proxy.sink.files[0].exists()):
            time.sleep(0.05)
        assert [e["pos"] for e in read_events(proxy.sink.files[0])] == [0, 1, 2, 3]
    finally:
        proxy.stop()


# ------------------------------------------------------------------ hostile JSON Lines


@pytest.mark.parametrize("field, value", [("seq", 10 ** 20), ("pos", -(2 ** 63) - 1), ("delivery_count", 2 ** 31)])
@pytest.mark.parametrize("command", ["replay", "convert", "diff"])
def test_a_number_beyond_its_field_s_range_is_named_by_every_command(tmp_path, capsys, field, value, command):
    """A JSON number too large for int64 (int32): convert died with pyarrow's OverflowError
    traceback, replay said 'the replay failed ... OverflowError' without the line, and diff
    said 'same'."""
    rows = overlapping_receives()
    rows[9][field] = value
    if field == "pos":
        rows = rows[9:] + rows[:9]  # first: what comes after it is in order
    trace = jsonl(tmp_path / "t.jsonl", rows)
    argv = {"replay": ["replay", "--local", str(trace)], "convert": ["convert", str(trace), str(tmp_path / "t.parquet")],
            "diff": ["diff", str(trace), str(trace)]}[command]
    line = one_error(capsys, argv)
    assert f"t.jsonl:{2 if field == 'pos' else 11}: field '{field}'" in line and "range" in line, line


def test_replay_refuses_an_event_of_another_trace_as_convert_and_diff_do(tmp_path, capsys):
    """Events of two recordings in one file (the header's trace 't', a line of trace 'u'):
    convert and diff refused it; replay checked them as one trace."""
    rows = overlapping_receives()
    rows[9]["trace"] = "u"
    line = one_error(capsys, ["replay", "--local", str(jsonl(tmp_path / "t.jsonl", rows))])
    assert "t.jsonl:11: field 'trace' is 'u', the header's trace is 't'" in line, line


# ------------------------------------------------------------------ the recorder's clock


def test_the_recorder_s_event_times_do_not_follow_the_wall_clock_s_steps(tmp_path, monkeypatch):
    """Event times were ms of time.time since the start: the wall clock stepped by NTP (or by
    hand) between a receive and its complete moved the complete past the lock's expiry (a false
    SETTLE-LOCK-008) or, stepped back, let a redelivery look like a double delivery. They are
    measured on the monotonic clock; the wall clock gives the start's epoch only."""
    import time

    from sbconform.proxy.sink import TraceSink
    from sbconform.trace.io import read_events

    steady, wall = [500.0], [1_800_000_000.0]
    monkeypatch.setattr(time, "monotonic", lambda: steady[0])
    monkeypatch.setattr(time, "time", lambda: wall[0])
    sink = TraceSink(tmp_path, "clock")
    steady[0], wall[0] = 500.25, 1_800_003_600.0  # the wall clock stepped an hour forward
    sink.write("c1", 0, "peek", "invoke", entity="q", args={})
    steady[0], wall[0] = 500.5, 1_700_000_000.0  # and far back
    sink.write("c1", 0, "peek", "ok", entity="q")
    sink.close()
    assert [e["time"] for e in read_events(sink.files[0])] == [250, 500]
    assert sink.epoch_ms() == 1_800_000_000_000


@pytest.mark.parametrize("command", ["replay", "convert", "diff"])
def test_a_parquet_file_holding_another_trace_s_events_is_refused(tmp_path, capsys, command):
    """Rows of two recordings in one Parquet file (written by another tool: header 't', some
    rows of trace 'u'): every command read them as one trace, where a JSON Lines file is refused.
    Found from the file's statistics (its footer): nothing more is read."""
    rows = overlapping_receives()
    for r in rows[5:]:
        r["trace"] = "u"
    trace = parquet(tmp_path / "t.parquet", rows)
    argv = {"replay": ["replay", "--local", str(trace)], "convert": ["convert", str(trace), str(tmp_path / "t.jsonl")],
            "diff": ["diff", str(trace), str(trace)]}[command]
    line = one_error(capsys, argv)
    assert "t.parquet: field 'trace' holds 'u', the header's trace is 't'" in line, line


# ------------------------------------------------------------------ a hostile _layout.json


@pytest.mark.parametrize("layout, says", [
    ("{bad", "not JSON"),
    ('{"layout": "by-piece"}', "'files'"),
    ("[1, 2]", "not a JSON object"),
    ('{"files": "ok.parquet"}', "'files'"),
    ('{"files": [3]}', "'files'"),
    ('{"files": ["missing.parquet"]}', "missing.parquet"),
    ('{"files": ["../outside.parquet"]}', "outside"),
    ('{"files": ["/etc/passwd"]}', "/etc/passwd"),
])
def test_a_bad_layout_file_is_one_line_not_a_traceback_read_as_a_violation(tmp_path, capsys, layout, says):
    """A damaged or hand-edited _layout.json: a JSONDecodeError, KeyError or TypeError traceback,
    exit 1 (the code for 'a violation found'); a file listed outside the directory was read."""
    root = tmp_path / "trace"
    root.mkdir()
    parquet(root / "ok.parquet", overlapping_receives())
    parquet(tmp_path / "outside.parquet", overlapping_receives())
    (root / "_layout.json").write_text(layout)
    line = one_error(capsys, ["replay", "--local", str(root)])
    assert "_layout.json" in line and says in line, line


def test_an_unforeseen_failure_while_reading_the_inputs_is_no_verdict_never_exit_1(tmp_path, capsys, monkeypatch):
    """Exit 1 means 'a violation found': a failure in the checks before the replay (as the bad
    _layout.json above made) went out as a traceback with exit 1."""
    from sbconform.trace import replay as replay_module

    def broken(paths):
        raise KeyError("files")

    monkeypatch.setattr(replay_module, "locate", broken)
    line = one_error(capsys, ["replay", "--local", str(parquet(tmp_path / "t.parquet", overlapping_receives()))])
    assert line.startswith("sbconform replay: ") and "no verdict" in line and "KeyError" in line, line


# ------------------------------------------------------------------ connection-wide operations without an entity


def dropped(drop_entity, op="drop-connection"):
    """c1 receives m1, its connection drops (its lock lost), c2 receives m1 again: valid."""
    d = lambda seq, lock, dc: {"message_id": f"m{seq}", "seq": seq, "lock": lock, "delivery_count": dc}  # noqa: E731
    return [row(0, 1, "create-entity", "invoke", args=json.dumps({"lock_duration": 5000})), row(1, 1, "create-entity", "ok"),
            row(2, 2, "send", "invoke", message_id="m1"), row(3, 2, "send", "ok", message_id="m1", seq=1),
            row(4, 3, "receive", "invoke", "c1", args=RECV), row(5, 3, "receive", "ok", "c1", **d(1, "L1", 1)),
            row(6, 4, op, "invoke", "c1", entity=drop_entity),
            row(7, 4, op, "ok", "c1", entity=drop_entity, result=json.dumps({"conn": None})),
            row(8, 5, "receive", "invoke", "c2", args=RECV), row(9, 5, "receive", "ok", "c2", **d(1, "L2", 2))]


def test_a_receive_without_an_entity_is_refused_not_a_lost_message(tmp_path, capsys):
    """c1's receive of m1 names no entity (or an empty one): q's piece never saw m1 taken, and
    c2's receive of m2 read as m1 lost (SETTLE-SEND-001), exit 1."""
    rows = overlapping_receives()
    rows[6:] = [rows[6], rows[9], rows[7], rows[8]]  # sequential: c1 gets m1, then c2 gets m2: valid
    rows = [dict(r, pos=i) for i, r in enumerate(rows)]
    (valid,) = check_batches([pa.RecordBatch.from_pylist(rows, schema=arrow_schema())])
    assert valid["status"] == "valid", valid
    for entity in (None, ""):
        rows[6]["entity"] = rows[7]["entity"] = entity
        line = one_error(capsys, ["replay", "--local", str(parquet(tmp_path / "t.parquet", rows))])
        assert "t.parquet: pos 6: a receive without an entity" in line, line


@pytest.mark.parametrize("op", ["drop-connection", "close"])
def test_a_connection_wide_operation_without_an_entity_is_refused_not_a_false_violation(tmp_path, capsys, op):
    """A hand-made or foreign trace whose drop-connection (or close) names no entity: the piece
    whose lock it releases never saw it, and the redelivery after the drop was said VIOLATION
    SETTLE-LOCK-001 double-delivery, exit 1, for a valid trace (the checker needs each link's
    entity: trace-replay.md). Refused, naming the file and pos."""
    (valid,) = check_batches([pa.RecordBatch.from_pylist(dropped("q"), schema=arrow_schema())])
    assert valid["status"] == "valid", valid
    trace = parquet(tmp_path / "t.parquet", dropped(None, op))
    line = one_error(capsys, ["replay", "--local", str(trace)])
    assert f"t.parquet: pos 6: a {op} without an entity" in line, line


def test_an_unforeseen_failure_of_diff_is_not_exit_1_which_means_different(tmp_path, capsys, monkeypatch):
    from sbconform.trace import diff as diff_module

    def broken(a, b):
        raise KeyError("trace")

    monkeypatch.setattr(diff_module, "diff_paths", broken)
    trace = str(jsonl(tmp_path / "t.jsonl", overlapping_receives()))
    line = one_error(capsys, ["diff", trace, trace])
    assert line.startswith("sbconform diff: ") and "KeyError" in line, line
