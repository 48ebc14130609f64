"""Traces, the recording proxy and their commands, as a careless user and a hostile file meet
them: every bad input is one line naming the file and the line or row, exit 2, no traceback;
nothing accepted is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sbconform.cli import main
from sbconform.trace.io import JsonlWriter, read_events, read_jsonl
from sbconform.trace.schema import TraceFormatError
from test_cli_careless import one_error  # one line, no traceback (the careless-user helper)

EVENT = {"trace": "t1", "pos": 0, "time": 0, "client": "c1", "op_id": 0, "op": "send", "phase": "invoke",
         "entity": "q", "args": "{}"}


def a_trace(path: Path, *lines: str) -> Path:
    """A JSON Lines trace of one good event, then ``lines`` as they are."""
    with JsonlWriter(path, "t1") as writer:
        writer.write(EVENT)
    with open(path, "a", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    return path


DEEP = 100_000
#: a second event whose application properties nest DEEP levels: as JSON values on the line,
#: and as JSON text in the args field
DEEP_LINES = {
    "value": '{"trace":"t1","pos":1,"time":0,"client":"c1","op_id":0,"op":"send","phase":"ok","entity":"q","args":'
             + "[" * DEEP + "]" * DEEP + "}",
    "text": json.dumps({**EVENT, "pos": 1, "phase": "ok",
                        "args": '{"properties": ' + "[" * DEEP + "]" * DEEP + "}"}),
}


@pytest.mark.parametrize("deep", sorted(DEEP_LINES))
def test_reading_a_line_nested_too_deeply_names_the_file_and_line(tmp_path, deep) -> None:
    path = a_trace(tmp_path / "deep.jsonl", DEEP_LINES[deep])
    with pytest.raises(TraceFormatError, match=rf"{path}:3: .*nest"):
        list(read_jsonl(path))
    with pytest.raises(TraceFormatError, match=rf"{path}:3: .*nest"):
        list(read_events(path))


def test_a_header_nested_too_deeply_names_the_file_and_line(tmp_path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"format":"sbconform-trace","version":1,"trace":"t1","x":' + "[" * DEEP + "]" * DEEP + "}\n")
    with pytest.raises(TraceFormatError, match=rf"{path}:1: .*nest"):
        list(read_jsonl(path))


@pytest.mark.parametrize("argv", [
    lambda deep, tmp: ["replay", "--local", str(deep)],
    lambda deep, tmp: ["convert", str(deep), str(tmp / "out.parquet")],
    lambda deep, tmp: ["diff", str(deep), str(deep)],
])
@pytest.mark.parametrize("deep", sorted(DEEP_LINES))
def test_commands_name_the_file_and_line_nested_too_deeply(tmp_path, capsys, argv, deep) -> None:
    pytest.importorskip("pyarrow")
    path = a_trace(tmp_path / "deep.jsonl", DEEP_LINES[deep])
    line = one_error(capsys, argv(path, tmp_path))
    assert f"{path}:3" in line and "nest" in line
    assert not (tmp_path / "out.parquet").exists()


# ------------------------------------------------------------------ the proxy's sink


@pytest.mark.parametrize("trace", ["../escaped", "/abs/olute", "a/b", "a\\b", "nul\0byte", ".hidden", "x" * 300, "..",
                                   "é" * 101])
def test_the_sink_refuses_a_trace_id_that_is_not_a_file_name(tmp_path, trace) -> None:
    from sbconform.proxy.sink import TraceSink

    out = tmp_path / "out" / "rec"
    with pytest.raises(ValueError, match="trace id"):
        TraceSink(out, trace)
    assert not (tmp_path / "out").exists()  # refused before anything is made
    assert not (tmp_path / "escaped-00001.jsonl").exists()


def test_the_sink_takes_a_trace_id_that_is_a_file_name(tmp_path) -> None:
    from sbconform.proxy.sink import TraceSink

    sink = TraceSink(tmp_path, "orders-2026.11 run_1")
    sink.write("c1", sink.op(), "send", "invoke", entity="q", message_id="m")
    sink.close()
    assert [p.name for p in tmp_path.iterdir()] == ["orders-2026.11 run_1-00001.jsonl"]
    assert [e["trace"] for e in read_events(tmp_path)] == ["orders-2026.11 run_1"]


# ------------------------------------------------------------------ generate --events


@pytest.fixture
def never_generated(monkeypatch) -> None:
    """A refusal expected before generating: were it not refused, the test fails at once
    instead of writing billions of events."""
    import sbconform.trace.generate

    def generate(*args, **kwargs):
        raise AssertionError("generate ran: the command line was not refused")
    monkeypatch.setattr(sbconform.trace.generate, "generate", generate)


@pytest.mark.usefixtures("never_generated")
@pytest.mark.parametrize("events, says", [("0", "at least 1"), ("-3", "at least 1"),
                                          ("100000000000", "at most"), ("1" + "0" * 40, "at most")])
def test_generate_events_out_of_bounds_are_refused_when_parsed(tmp_path, capsys, events, says) -> None:
    line = one_error(capsys, ["generate", "--events", events, "--out", str(tmp_path / "t.jsonl")])
    assert "--events" in line and says in line
    assert list(tmp_path.iterdir()) == []


def test_generate_takes_the_benchmarks_ten_million_and_the_readmes_hundred_million() -> None:
    from sbconform.cli import build_parser

    for events in (10_000_000, 100_000_000):
        assert build_parser().parse_args(["generate", "--events", str(events), "--out", "t"]).events == events


@pytest.mark.usefixtures("never_generated")
@pytest.mark.parametrize("out", ["t.jsonl", "t.parquet", "dir"])
def test_generate_more_than_the_disk_holds_is_refused_before_writing(tmp_path, capsys, monkeypatch, out) -> None:
    import shutil

    from sbconform.commands import generate

    free = 50 * 1024 * 1024
    monkeypatch.setattr(generate.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 * free, 9 * free, free))
    line = one_error(capsys, ["generate", "--events", "50000000", "--out", str(tmp_path / out)])
    assert str(tmp_path) in line and "free" in line and "--events" in line
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ record --rotate


@pytest.mark.parametrize("value", ["1", "1K", "2K", "1000000", "0.5M"])
def test_record_rotate_below_a_megabyte_is_refused_when_parsed(capsys, value) -> None:
    """--rotate 1 made a file of every 16 events (the sink looks at the size every 16)."""
    line = one_error(capsys, ["record", "--upstream", "x", "--out", "o", f"--rotate={value}"])
    assert "--rotate" in line and value in line and "at least 1M" in line


@pytest.mark.parametrize("value, size", [("1M", 1024 ** 2), ("256M", 256 * 1024 ** 2), ("2G", 2 * 1024 ** 3)])
def test_record_rotate_takes_a_megabyte_and_more(value, size) -> None:
    from sbconform.cli import build_parser

    assert build_parser().parse_args(["record", "--upstream", "x", "--out", "o", "--rotate", value]).rotate == size


def test_a_recording_past_its_last_file_number_grows_its_last_file_in_order(tmp_path, monkeypatch) -> None:
    """Files are numbered <trace>-00001...-99999 and read in name order: a 100,000th file
    (<trace>-100000) would sort before <trace>-10001 and its events be read out of order."""
    from sbconform.proxy import sink as sink_module

    monkeypatch.setattr(sink_module, "MAX_FILES", 3)
    said: list[str] = []
    sink = sink_module.TraceSink(tmp_path, "t", rotate_bytes=1, on_error=said.append)
    for i in range(200):
        sink.write("c1", sink.op(), "peek", "invoke", entity="q", args={"from_seq": i})
    sink.close()
    assert [p.name for p in sorted(tmp_path.iterdir())] == [f"t-0000{i}.jsonl" for i in (1, 2, 3)]
    assert [e["pos"] for e in read_events(tmp_path)] == list(range(200))
    assert sink.failed is None and len(said) == 1 and "3 files" in said[0]


# ------------------------------------------------------------------ record's upstream


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


@pytest.fixture
def never_listening(monkeypatch) -> None:
    """A refusal expected before the proxy listens: were it not refused, the test fails at once
    instead of relaying until a signal."""
    import sbconform.proxy.run

    async def serve_until_signal(*args, **kwargs):
        raise AssertionError("the proxy started listening")
    monkeypatch.setattr(sbconform.proxy.run, "serve_until_signal", serve_until_signal)


@pytest.mark.usefixtures("never_listening")
def test_record_says_at_once_when_the_upstream_is_unreachable(tmp_path, capsys) -> None:
    pytest.importorskip("proton")
    port = closed_port()
    upstream = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=SECRET123;UseDevelopmentEmulator=true;"
    line = one_error(capsys, ["record", "--upstream", upstream, "--out", str(tmp_path / "rec"), "--listen", "127.0.0.1:0"])
    assert f"nothing listens on 127.0.0.1:{port}" in line and "--upstream" in line and "SECRET123" not in line
    assert not (tmp_path / "rec").exists()  # nothing made for a recording that cannot happen


@pytest.mark.usefixtures("never_listening")
def test_record_says_at_once_when_the_upstream_refuses_its_key(tmp_path, capsys) -> None:
    pytest.importorskip("proton")
    from proxy_support import UPSTREAM_KEY_NAME, connection_string, served

    with served() as server:
        upstream = connection_string(server.port, UPSTREAM_KEY_NAME, "NOT-THE-KEY")
        line = one_error(capsys, ["record", "--upstream", upstream, "--out", str(tmp_path / "rec"), "--listen", "127.0.0.1:0"])
    assert "--upstream" in line and "authentication refused" in line and "NOT-THE-KEY" not in line
    assert not (tmp_path / "rec").exists()


# ------------------------------------------------------------------ replay of remote paths


@pytest.fixture
def no_spark(monkeypatch) -> None:
    """A refusal expected before Spark starts: were it not refused, the test fails at once."""
    import sbconform.trace.spark_replay

    def replay_spark(*args, **kwargs):
        raise AssertionError("Spark was started")
    monkeypatch.setattr(sbconform.trace.spark_replay, "replay_spark", replay_spark)


@pytest.fixture
def local_trace(tmp_path) -> Path:
    return a_trace(tmp_path / "local.jsonl")


@pytest.mark.parametrize("remote", ["hdfs://nn/traces/run1", "s3a://bucket/t.parquet", "http://example.invalid/t.jsonl",
                                    "s3://b/t.ndjson"])
@pytest.mark.parametrize("with_local", [False, True])
def test_replay_local_refuses_a_remote_path_by_name(tmp_path, capsys, local_trace, remote, with_local) -> None:
    """--local read hdfs:// with open() ('[Errno 2] No such file ...'), http:// through pyarrow
    ('ArrowInvalid: Unrecognized filesystem type', said as the replay failing)."""
    paths = [str(local_trace), remote] if with_local else [remote]
    line = one_error(capsys, ["replay", "--local", *paths])
    assert remote in line and "--local" in line and "Errno" not in line and "failed" not in line


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize("paths", [
    lambda local: ["hdfs://nn/traces/a.parquet", "hdfs://nn/traces/b.parquet"],
    lambda local: [str(local), "hdfs://nn/traces/a.jsonl"],
    lambda local: ["s3a://bucket/a.jsonl", "s3a://bucket/b.parquet"],
])
def test_replay_on_spark_refuses_remote_inputs_it_would_merge_unchecked(tmp_path, capsys, monkeypatch, local_trace,
                                                                        paths) -> None:
    """Several remote inputs were read by Spark as one trace, unchecked (two traces' events
    interleaved: violations that are not; a .jsonl read as Parquet), a local path beside a
    remote one resolved on the cluster's file system."""
    monkeypatch.chdir(tmp_path)
    given = paths(local_trace)
    line = one_error(capsys, ["replay", "--out", str(tmp_path / "r"), *given])
    assert given[1] in line
    assert not (tmp_path / "r").exists() and not (tmp_path / "replay-out").exists()


def test_a_remote_ndjson_trace_is_read_as_json_lines(monkeypatch) -> None:
    from sbconform.trace import replay
    from sbconform.trace.replay import locate

    monkeypatch.setattr(replay, "_remote_layout", lambda root: None)  # pyarrow's HDFS client: a JVM, a name node

    assert locate(["hdfs://nn/traces/t.ndjson"])["format"] == "json"
    assert locate(["hdfs://nn/traces/t.jsonl"])["format"] == "json"
    assert locate(["hdfs://nn/traces/t.parquet"])["format"] == "parquet"


# ------------------------------------------------------------------ hostile and careless files


def test_replay_local_reads_a_trace_with_a_byte_order_mark_as_convert_and_diff_do(tmp_path, capsys) -> None:
    """A BOM (an editor's save on Windows): convert and diff took the file, replay --local said
    'bom.jsonl:1: not JSON (Unexpected UTF-8 BOM ...)'."""
    plain = tmp_path / "g.jsonl"
    assert main(["generate", "--events", "300", "--entities", "1", "--out", str(plain)]) == 0
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    capsys.readouterr()
    assert main(["replay", "--local", str(plain)]) == 0
    expected = capsys.readouterr().out.split(" events")[0]
    assert main(["replay", "--local", str(bom)]) == 0
    assert capsys.readouterr().out.split(" events")[0] == expected
    assert main(["diff", str(bom), str(plain)]) == 0


@pytest.mark.parametrize("command", [["replay", "--local"], ["diff"], ["convert"]])
def test_a_line_that_is_not_utf8_is_one_line_naming_the_file_and_line(tmp_path, capsys, command) -> None:
    """replay --local said 'the replay failed, no verdict: UnicodeDecodeError ... position 628'."""
    path = a_trace(tmp_path / "bad.jsonl")
    with open(path, "ab") as f:
        f.write(b'{"trace":"\xff\xfe"}\n')
        f.write((json.dumps({**EVENT, "pos": 2}) + "\n").encode())
    extra = {"replay": [], "diff": [str(path)], "convert": [str(tmp_path / "out.parquet")]}[command[0]]
    line = one_error(capsys, [*command, str(path), *extra])
    assert f"{path}:3" in line and "failed" not in line


def test_replay_local_refuses_events_out_of_position_order_as_convert_and_diff_do(tmp_path, capsys) -> None:
    """Two lines swapped: convert and diff named the line, replay --local checked the events in
    file order and answered 'unknown: overlapping operations exceed the search bound'."""
    plain = tmp_path / "g.jsonl"
    assert main(["generate", "--events", "300", "--entities", "1", "--out", str(plain)]) == 0
    lines = plain.read_text().splitlines(keepends=True)
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("".join([lines[0], lines[2], lines[1], *lines[3:]]))
    capsys.readouterr()
    for argv in (["replay", "--local", str(swapped)], ["convert", str(swapped), str(tmp_path / "s.parquet")],
                 ["diff", str(swapped), str(plain)]):
        line = one_error(capsys, argv)
        assert f"{swapped}:3" in line and "'pos' is 0" in line


@pytest.mark.parametrize("newline", [True, False])
def test_a_line_longer_than_any_event_is_refused_without_reading_it_whole(tmp_path, capsys, monkeypatch, newline) -> None:
    """A trace line of gigabytes (no newline: a binary file named .jsonl) was read into memory whole."""
    from sbconform.trace import io

    monkeypatch.setattr(io, "MAX_LINE", 4096)
    path = a_trace(tmp_path / "huge.jsonl")
    with open(path, "a") as f:
        f.write('{"trace":"t1","pos":1,"args":"' + "x" * 10_000 + '"}' + ("\n" if newline else ""))
    with pytest.raises(TraceFormatError, match=rf"{path}:3: .*longer than"):
        list(read_jsonl(path))
    line = one_error(capsys, ["replay", "--local", str(path)])
    assert f"{path}:3" in line and "longer than" in line


@pytest.mark.parametrize("column, kind", [("pos", "string"), ("time", "double")])
def test_replay_local_refuses_a_parquet_trace_whose_column_types_are_off(tmp_path, capsys, column, kind) -> None:
    """pos as text, time as a float: convert and diff said 'column 'pos' is string, expected
    int64'; replay --local read the file and said every piece valid, exit 0."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    good = tmp_path / "g.parquet"
    assert main(["generate", "--events", "300", "--entities", "1", "--out", str(good)]) == 0
    table = pq.read_table(good)
    i = table.schema.get_field_index(column)
    off = table.set_column(i, pa.field(column, kind), table.column(column).cast(kind))
    bad = tmp_path / "off.parquet"
    pq.write_table(off.replace_schema_metadata(table.schema.metadata), bad)
    capsys.readouterr()
    line = one_error(capsys, ["replay", "--local", str(bad)])
    assert str(bad) in line and f"column {column!r}" in line


@pytest.mark.parametrize("local", [True, False])
def test_replay_refuses_a_by_piece_directory_holding_a_trace_file_it_would_skip(tmp_path, capsys, monkeypatch, local,
                                                                               no_spark) -> None:
    """A .jsonl copied into generate's directory was skipped without a word (only the bucket
    files _layout.json lists are read): its events were never checked."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "bp"
    assert main(["generate", "--events", "300", "--entities", "2", "--out", str(out)]) == 0
    stray = a_trace(out / "extra.jsonl")
    capsys.readouterr()
    line = one_error(capsys, ["replay", *(["--local"] if local else []), "--out", str(tmp_path / "r"), str(out)])
    assert str(stray) in line and "_layout.json" in line
