"""A careless user's command lines: each mistake is one line on stderr naming what and where,
exit 2, no traceback; nothing the user asked for is silently lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sbconform.cli import main


def one_error(capsys, argv: list[str], code: int = 2) -> str:
    try:
        assert main(argv) == code
    except SystemExit as exit:  # refused when parsed
        assert exit.code == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def a_report(**clause) -> dict:
    entry = {"status": "pass", "level": "MUST", "reason": "", "scenarios": []}
    entry.update(clause)
    return {"target": {"name": "mine"}, "clauses": {"SETTLE-SEND-001": entry},
            "summary": {"pass": 1, "fail": 0, "verdict": "PASSED"}}


def test_compare_takes_a_well_formed_report(tmp_path, capsys) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(a_report()))
    assert main(["compare", str(path), "--html", str(tmp_path / "c.html")]) == 0
    assert "| SETTLE-SEND-001 | MUST | pass |" in capsys.readouterr().out


@pytest.mark.parametrize("change, says", [
    (lambda r: r["clauses"].__setitem__("SETTLE-SEND-001", "pass"), "SETTLE-SEND-001"),
    (lambda r: r["clauses"]["SETTLE-SEND-001"].pop("status"), "SETTLE-SEND-001"),
    (lambda r: r["clauses"]["SETTLE-SEND-001"].__setitem__("status", '"><script>x</script>'), "SETTLE-SEND-001"),
    (lambda r: r["clauses"]["SETTLE-SEND-001"].__setitem__("status", ["pass"]), "SETTLE-SEND-001"),
    (lambda r: r["clauses"]["SETTLE-SEND-001"].__setitem__("scenarios", "none"), "SETTLE-SEND-001"),
    (lambda r: r["clauses"]["SETTLE-SEND-001"].__setitem__("scenarios", [{"id": 1}]), "SETTLE-SEND-001"),
    (lambda r: r["clauses"]["SETTLE-SEND-001"].__setitem__("reason", 5), "SETTLE-SEND-001"),
    (lambda r: r["target"].__setitem__("name", 5), "target"),
    (lambda r: r["summary"].__setitem__("pass", "<b>1</b>"), "summary"),
    (lambda r: r["summary"].__setitem__("verdict", {"x": 1}), "summary"),
])
def test_compare_a_report_with_wrongly_typed_contents_is_one_line(tmp_path, capsys, change, says) -> None:
    report = a_report()
    change(report)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    line = one_error(capsys, ["compare", str(path), "--html", str(tmp_path / "c.html")])
    assert str(path) in line and says in line and "not an sbconform report.json" in line
    assert not (tmp_path / "c.html").exists()


def test_compare_html_that_cannot_be_written_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(a_report()))
    (tmp_path / "a-dir").mkdir()
    assert "--html" in one_error(capsys, ["compare", str(path), "--html", str(tmp_path / "a-dir")])
    (tmp_path / "a-file").write_text("")
    assert "--html" in one_error(capsys, ["compare", str(path), "--html", str(tmp_path / "a-file" / "c.html")])


def test_compare_html_and_out_naming_one_file_is_refused_before_writing(tmp_path, capsys) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(a_report()))
    same = tmp_path / "c.html"
    line = one_error(capsys, ["compare", str(path), "--html", str(same), "--out", str(tmp_path / "." / "c.html")])
    assert "--out" in line and "--html" in line
    assert not same.exists()


def test_compare_refuses_a_file_too_large_to_be_a_report_without_reading_it(tmp_path, capsys) -> None:
    from sbconform.commands.compare import MAX_REPORT_BYTES

    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(MAX_REPORT_BYTES + 1)
    line = one_error(capsys, ["compare", str(path)])
    assert str(path) in line and "too large" in line


@pytest.mark.parametrize("text, says", [
    ('[clause."SETTLE-SEND-001"]\nstatus = "fail"\n', "clause"),  # a typo: every expectation would be lost
    ('expected_fail = ["SETTLE-SEND-001"]\n', "expected_fail"),
    ('[clauses."SETTLE-SEND-001"]\nstatus = "fail"\nreasn = "documented"\n', "reasn"),
    ('[clauses."SETTLE-SEND-001"]\nstatus = "fail"\nreason = 5\n', "reason"),
])
def test_an_expectations_file_with_keys_it_would_lose_is_refused(tmp_path, capsys, text, says) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    line = one_error(capsys, ["certify", "--report-dir", str(tmp_path / "r"), "--expectations", str(path)])
    assert str(path) in line and says in line
    assert not (tmp_path / "r").exists()


def test_the_shipped_expectations_file_is_still_taken() -> None:
    from sbconform.report import load_expectations

    expected = load_expectations(Path(__file__).resolve().parent.parent / "expectations" / "microsoft-emulator.toml")
    assert expected and all(e["status"] in ("fail", "skip") for e in expected.values())


def test_expectations_naming_a_directory_says_so(tmp_path, capsys) -> None:
    line = one_error(capsys, ["certify", "--report-dir", str(tmp_path / "r"), "--expectations", str(tmp_path)])
    assert "directory" in line and "no such file" not in line


def test_compare_a_json_nested_too_deep_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"a":' * 100_000)
    line = one_error(capsys, ["compare", str(path)])
    assert str(path) in line and "nested" in line


@pytest.mark.parametrize("content, says", [
    (b"\xa5\x00binary\xff", "UTF-8"),
    (b"[" * 100_000, "nested"),
])
def test_serve_a_config_that_is_not_json_text_is_one_line(tmp_path, capsys, content, says) -> None:
    pytest.importorskip("proton")
    path = tmp_path / "Config.json"
    path.write_bytes(content)
    line = one_error(capsys, ["serve", "--port", "0", "--http-port", "-1", "--config", str(path)])
    assert str(path) in line and says in line


def test_serve_refuses_a_config_too_large_without_reading_it(tmp_path, capsys) -> None:
    pytest.importorskip("proton")
    from sbconform.commands.serve import MAX_CONFIG_BYTES

    path = tmp_path / "Config.json"
    with path.open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    line = one_error(capsys, ["serve", "--port", "0", "--http-port", "-1", "--config", str(path)])
    assert str(path) in line and "too large" in line


@pytest.fixture
def small_trace(tmp_path) -> Path:
    path = tmp_path / "small.jsonl"
    assert main(["generate", "--events", "10", "--entities", "1", "--out", str(path)]) == 0
    return path


@pytest.mark.parametrize("argv", [
    lambda deep, good, tmp: ["diff", str(deep), str(good)],
    lambda deep, good, tmp: ["diff", str(good), str(deep)],
    lambda deep, good, tmp: ["convert", str(deep), str(tmp / "out.parquet")],
    lambda deep, good, tmp: ["replay", "--local", str(deep)],
])
def test_a_trace_line_nested_too_deeply_is_one_line_not_a_difference(tmp_path, capsys, small_trace, argv) -> None:
    pytest.importorskip("pyarrow")
    deep = tmp_path / "deep.jsonl"
    header = small_trace.read_text().splitlines()[0]
    deep.write_text(header + "\n" + "[" * 100_000 + "\n")
    capsys.readouterr()
    line = one_error(capsys, argv(deep, small_trace, tmp_path))
    assert str(deep) in line and "nest" in line
    assert not (tmp_path / "out.parquet").exists()


UPSTREAM = "Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0"


@pytest.mark.parametrize("trace_id", ["../../elsewhere", "a/b", "a\\b", "..", ".hidden", "x" * 300, "a\x00b"])
def test_record_refuses_a_trace_id_that_is_no_file_name_when_parsed(tmp_path, capsys, trace_id) -> None:
    """The trace id begins every file's name in --out: a path would write outside it, a name too
    long would fail at the first event, after the proxy was already relaying unrecorded."""
    line = one_error(capsys, ["record", "--upstream", UPSTREAM, "--out", str(tmp_path / "rec"), "--trace-id", trace_id])
    assert "--trace-id" in line
    assert not (tmp_path / "rec").exists()


def test_record_takes_a_trace_id_that_is_a_file_name() -> None:
    from sbconform.cli import build_parser

    args = build_parser().parse_args(["record", "--upstream", UPSTREAM, "--out", "x", "--trace-id", "orders-run 2 ü"])
    assert args.trace_id == "orders-run 2 ü"


def test_record_out_that_is_a_file_says_so(tmp_path, capsys) -> None:
    pytest.importorskip("proton")
    (tmp_path / "taken").write_text("")
    line = one_error(capsys, ["record", "--upstream", UPSTREAM, "--out", str(tmp_path / "taken")])
    assert "is a file, not a directory" in line and "Errno" not in line


def test_certify_trace_into_a_directory_that_exists_records_again(tmp_path, capsys) -> None:
    """A second run with the same --trace DIR (or one made beforehand): the directory, an existing
    path on the test processes' command line, made pytest look for its configuration above it,
    lose the features' base directory and break collecting; no report."""
    traces = tmp_path / "traces"
    traces.mkdir()
    argv = ["certify", "--clause", "SETTLE-SEND-001", "--jobs", "1", "--report-dir", str(tmp_path / "r"), "--trace", str(traces)]
    assert main(argv) == 0, capsys.readouterr().err
    assert any(p.name.startswith("tests_test_features.py") for p in traces.iterdir())
    assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize("extra", [
    lambda r: ["--html", str(r / "report.json")],
    lambda r: ["--junit-xml", str(r / "report.md")],
    lambda r: ["--junit-xml", str(r / "run.log")],
    lambda r: ["--html", str(r / "out.html"), "--junit-xml", str(r / "." / "out.html")],
])
def test_certify_outputs_naming_one_file_are_refused_before_the_run(tmp_path, capsys, extra) -> None:
    """Each would overwrite the other (or the report): one of the outputs asked for would be lost."""
    report_dir = tmp_path / "r"
    line = one_error(capsys, ["certify", "--clause", "SETTLE-SEND-001", "--report-dir", str(report_dir), *extra(report_dir)])
    assert "same file" in line
    assert not (report_dir / "report.json").exists()


def test_a_second_certify_on_a_report_dir_in_use_is_refused_before_touching_it(tmp_path, capsys) -> None:
    """Two certifications in one --report-dir removed each other's results files: one ended "the
    test run broke", exit 2, with the other's run.log. The second is now refused at once."""
    import fcntl
    import subprocess
    import sys

    report_dir = tmp_path / "r"
    argv = ["certify", "--clause", "SETTLE-SEND-001", "--jobs", "1", "--report-dir", str(report_dir)]
    assert main(argv) == 0  # the lock is released when a run ends: a later run takes the directory again
    assert main(argv) == 0
    capsys.readouterr()
    (report_dir / "run.log").write_text("the other run's log\n")
    other = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                              f"f = open({str(report_dir / 'run.log')!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                              "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        line = one_error(capsys, argv)
        assert str(report_dir) in line and "another sbconform certify" in line
        assert (report_dir / "run.log").read_text() == "the other run's log\n"
    finally:
        other.kill()
        other.wait()
    assert fcntl  # POSIX only, as the rest of certify's process handling


def test_generate_buckets_with_a_one_file_trace_is_refused(tmp_path, capsys) -> None:
    """--buckets shapes the by-piece layout only: with a .jsonl / .parquet file it was silently ignored."""
    line = one_error(capsys, ["generate", "--events", "10", "--buckets", "5", "--out", str(tmp_path / "t.jsonl")])
    assert "--buckets" in line and "by-piece" in line
    assert not (tmp_path / "t.jsonl").exists()


def test_generate_says_how_many_bucket_files_it_wrote(tmp_path, capsys) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "run"
    assert main(["generate", "--events", "10", "--entities", "2", "--buckets", "1000", "--out", str(out)]) == 0
    written = len(list(out.glob("bucket-*.parquet")))
    said = capsys.readouterr().out
    assert written < 1000 and f"{written} bucket files" in said, said


def test_convert_a_directory_without_traces_is_one_line_not_zero_events_written(tmp_path, capsys) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "notes.txt").write_text("not a trace")
    line = one_error(capsys, ["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--to", "jsonl"])
    assert str(tmp_path / "src") in line and "no trace files" in line


def test_convert_to_that_contradicts_the_destination_suffix_is_refused(tmp_path, capsys, small_trace) -> None:
    """With a file SRC the encoding is DST's suffix: --to jsonl with out.parquet wrote Parquet, silently."""
    line = one_error(capsys, ["convert", str(small_trace), str(tmp_path / "out.parquet"), "--to", "jsonl"])
    assert "--to jsonl" in line and ".parquet" in line
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("value", ["-5", "many"])
def test_diff_limit_that_is_not_a_count_is_refused_when_parsed(capsys, value) -> None:
    """--help says 0 shows all; -5 showed all too, silently."""
    line = one_error(capsys, ["diff", "a.jsonl", "b.jsonl", "--limit", value])
    assert "--limit" in line and value in line


@pytest.mark.parametrize("master", ["nonsense", "local[0]", "local[x]", "local[2", "spark//host:7077", ""])
def test_replay_master_that_spark_cannot_take_is_refused_when_parsed(capsys, master) -> None:
    """Spark's JVM exited on it and the user read 'the replay failed, no verdict: PySparkRuntimeError'."""
    line = one_error(capsys, ["replay", "x.jsonl", "--master", master])
    assert "--master" in line and "local[*]" in line


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]", "local[*,2]", "local-cluster[2,1,1024]",
                                    "spark://host:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://host:443"])
def test_replay_takes_the_masters_spark_documents(master) -> None:
    from sbconform.cli import build_parser

    assert build_parser().parse_args(["replay", "x.jsonl", "--master", master]).master == master


def test_a_default_of_zero_is_shown_in_help() -> None:
    """The formatter hid defaults equal to False, and 0 == False: generate --seed showed none."""
    from sbconform.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = " ".join(sub.choices["generate"].format_help().split())
    assert "the same seed writes the same trace (default: 0)" in text


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_certify_test_args_the_runner_refuses_are_named(tmp_path, capsys, jobs) -> None:
    """The line said 'the test run broke (...: rootdir: /work/main)', pytest's last line, not its error."""
    err = None
    assert main(["certify", "--jobs", jobs, "--report-dir", str(tmp_path), "--", "--bogus-flag"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus-flag" in err and "rootdir:" not in err, err


def test_an_expectations_file_too_large_to_be_one_is_refused_without_reading_it(tmp_path, capsys) -> None:
    from sbconform.report import MAX_EXPECTATIONS_BYTES

    path = tmp_path / "huge.toml"
    with path.open("wb") as f:
        f.truncate(MAX_EXPECTATIONS_BYTES + 1)
    line = one_error(capsys, ["certify", "--report-dir", str(tmp_path / "r"), "--expectations", str(path)])
    assert str(path) in line and "too large" in line


def test_an_expectations_file_nested_too_deeply_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 100_000 + "\n")
    line = one_error(capsys, ["certify", "--report-dir", str(tmp_path / "r"), "--expectations", str(path)])
    assert str(path) in line and "nested" in line


@pytest.mark.parametrize("local", [True, False])
def test_replay_of_one_file_twice_is_refused_and_two_traces_are_each_checked_not_a_violation(tmp_path, capsys, local) -> None:
    """Their events were checked as one trace: each entity's operations twice, or two runs'
    interleaved, and replay found 'violations' (exit 1) in traces that are each valid. A file given
    twice is refused; two traces are each checked on their own (tests/test_trace_many.py)."""
    pytest.importorskip("pyarrow")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["generate", "--events", "10", "--entities", "2", "--seed", "1", "--out", str(a)]) == 0
    assert main(["generate", "--events", "10", "--entities", "2", "--seed", "2", "--out", str(b)]) == 0
    assert main(["replay", "--local", str(a)]) == 0 and main(["replay", "--local", str(b)]) == 0
    capsys.readouterr()
    spark = ["--local"] if local else ["--out", str(tmp_path / "o")]  # never replay-out/ in the current directory
    line = one_error(capsys, ["replay", *spark, str(a), str(tmp_path / "." / "a.jsonl")])
    assert "twice" in line and str(a) in line
    if not local:
        return  # Spark's run of several traces: tests/test_trace_many.py
    assert main(["replay", "--local", str(a), str(b)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("2 traces: 2 valid")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "b.jsonl").write_bytes(b.read_bytes())
    assert main(["replay", "--local", str(a), str(tmp_path / "dir")]) == 0


def test_replay_help_names_the_files_local_writes(tmp_path, small_trace) -> None:
    """--help listed pieces.parquet and violations.jsonl; --local --out writes pieces.jsonl and summary.json."""
    from sbconform.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = " ".join(sub.choices["replay"].format_help().split())
    assert "with --local: pieces.jsonl, summary.json" in text
    assert main(["replay", "--local", str(small_trace), "--out", str(tmp_path / "o")]) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["pieces.jsonl", "summary.json"]


def test_generate_never_removes_a_directory_that_is_not_a_trace(tmp_path, capsys) -> None:
    """--out naming an existing directory replaced it whole (shutil.rmtree): `--out ~/work` lost the work."""
    pytest.importorskip("pyarrow")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    line = one_error(capsys, ["generate", "--events", "10", "--out", str(mine)])
    assert str(mine) in line and "thesis.txt" in line
    assert (mine / "thesis.txt").read_text() == "years of work"
    # a trace generate wrote, or an empty directory, is still replaced
    trace = tmp_path / "trace"
    assert main(["generate", "--events", "10", "--out", str(trace)]) == 0
    assert main(["generate", "--events", "10", "--seed", "3", "--inject", "lost-message", "--out", str(trace)]) == 0
    assert main(["generate", "--events", "10", "--out", str(trace)]) == 0
    assert not (trace / "_injected.json").exists()
    (tmp_path / "empty").mkdir()
    assert main(["generate", "--events", "10", "--out", str(tmp_path / "empty")]) == 0


@pytest.mark.parametrize("out", [".", "..", "/"])
def test_generate_out_that_names_no_directory_of_its_own_is_one_line(tmp_path, capsys, monkeypatch, out) -> None:
    """`--out .` was a ValueError traceback (PosixPath('.') has an empty name)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    line = one_error(capsys, ["generate", "--events", "10", "--out", out])
    assert "--out" in line
    assert list(work.iterdir()) == []


def test_record_into_a_directory_holding_a_recording_is_refused_before_listening(tmp_path) -> None:
    """--help says one recording per directory; a second with the same --trace-id overwrote the
    first's <id>-00001.jsonl, and one with another id mixed two traces in the directory."""
    import subprocess
    import sys

    pytest.importorskip("proton")
    out = tmp_path / "rec"
    out.mkdir()
    (out / "orders-00001.jsonl").write_text("the first recording\n")
    done = subprocess.run([sys.executable, "-m", "sbconform.cli", "record", "--upstream", UPSTREAM, "--out", str(out),
                           "--listen", "127.0.0.1:0", "--trace-id", "orders"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "orders-00001.jsonl" in done.stderr and "listening" not in done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (out / "orders-00001.jsonl").read_text() == "the first recording\n"


def test_serve_a_log_file_it_cannot_open_is_one_line(tmp_path, capsys) -> None:
    """The config's Logging Type File logs to sbconform-serve.log beside it; a log that cannot be
    opened there was an IsADirectoryError traceback."""
    pytest.importorskip("proton")
    config = tmp_path / "Config.json"
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q1"}],
                                                                 "Topics": []}], "Logging": {"Type": "File"}}}))
    (tmp_path / "sbconform-serve.log").mkdir()
    line = one_error(capsys, ["serve", "--port", "0", "--http-port", "-1", "--config", str(config)])
    assert "sbconform-serve.log" in line and "Logging" in line


@pytest.mark.parametrize("secondary, says", [
    ("garbage", "not a Service Bus connection string"),
    ("Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0U0VDT05E;UseDevelopmentEmulator=true",
     "nothing listens on 127.0.0.1:1"),
])
def test_certify_sdk_secondary_that_is_wrong_is_one_line_not_a_failing_clause(tmp_path, capsys, secondary, says) -> None:
    """A pairing's secondary namespace was not preflighted: its every paired scenario failed and
    certify said FAILED, exit 1, for the user's typo."""
    line = one_error(capsys, ["certify", "--target", "sdk", "--connection-string", UPSTREAM, "--clause", "PAIR-API-001",
                              "--option", f"secondary={secondary}", "--report-dir", str(tmp_path / "r")])
    assert "secondary" in line and says in line and "c2VjcmV0U0VDT05E" not in line
    assert not (tmp_path / "r" / "report.json").exists()


@pytest.mark.parametrize("host", ["", " "])
def test_serve_an_empty_host_is_refused_not_every_interface(capsys, host) -> None:
    """--host '' bound every interface ('listening on :43675'), which SECURITY.md asks for only as 0.0.0.0."""
    line = one_error(capsys, ["serve", "--host", host, "--port", "0", "--http-port", "-1"])
    assert "--host" in line and "0.0.0.0" in line


def test_replay_out_into_an_input_directory_is_refused(tmp_path, capsys, small_trace) -> None:
    """Its pieces.jsonl (and Spark's violations.jsonl) landed among the traces: the next replay of
    the directory took it for a trace and refused the directory."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "t.jsonl").write_bytes(small_trace.read_bytes())
    line = one_error(capsys, ["replay", "--local", str(traces), "--out", str(tmp_path / "traces" / ".")])
    assert "--out" in line and str(traces) in line
    assert sorted(p.name for p in traces.iterdir()) == ["t.jsonl"]
    assert main(["replay", "--local", str(traces)]) == 0


def test_certify_an_option_given_twice_with_two_values_is_refused(tmp_path, capsys) -> None:
    """--option serve=true --option serve=false: the last won, silently."""
    line = one_error(capsys, ["certify", "--target", "sdk", "--option", "serve=true", "--option", " serve=false",
                              "--report-dir", str(tmp_path / "r")])
    assert "serve" in line and "twice" in line
    assert not (tmp_path / "r").exists()


def test_certify_an_option_given_twice_hides_a_key_it_holds(tmp_path, capsys) -> None:
    cs = "Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0VFdJQ0U="
    line = one_error(capsys, ["certify", "--target", "sdk", "--option", f"secondary={cs}", "--option", "secondary=x",
                              "--report-dir", str(tmp_path / "r")])
    assert "twice" in line and "c2VjcmV0VFdJQ0U" not in line


@pytest.mark.parametrize("jobs, says", [("100000", "at most 128"), ("0", "at least 1"), ("two", "whole number")])
def test_certify_jobs_are_bounded_when_parsed(capsys, jobs, says) -> None:
    """--jobs 100000 was taken: a full run starts a test process per test (1,100 of them) side by side."""
    from sbconform.cli import build_parser

    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["certify", "--jobs", jobs])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--jobs" in err and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--out", "--html"])
def test_compare_output_naming_an_input_report_is_refused(tmp_path, capsys, flag) -> None:
    """compare r/report.json --out r/report.json replaced the report with the markdown."""
    (tmp_path / "r").mkdir()
    path = tmp_path / "r" / "report.json"
    path.write_text(json.dumps(a_report()))
    line = one_error(capsys, ["compare", str(tmp_path / "r"), flag, str(path)])
    assert flag in line and "input" in line
    assert json.loads(path.read_text()) == a_report()


@pytest.mark.parametrize("flag", ["--html", "--junit-xml"])
def test_certify_output_naming_the_expectations_file_is_refused(tmp_path, capsys, flag) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text('[clauses."SETTLE-SEND-001"]\nstatus = "skip"\nreason = "documented"\n')
    line = one_error(capsys, ["certify", "--clause", "SETTLE-SEND-001", "--report-dir", str(tmp_path / "r"),
                              "--expectations", str(mine), flag, str(mine)])
    assert flag in line and "--expectations" in line
    assert "documented" in mine.read_text()


def _fifo_fed(tmp_path: Path, data: bytes) -> Path:
    """A named pipe a thread writes ``data`` into (what `<(...)` or /dev/zero give: no size to stat)."""
    import os
    import threading

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with open(fifo, "wb") as f:
                for start in range(0, len(data), 1 << 20):
                    f.write(data[start:start + (1 << 20)])
        except OSError:  # the reader stopped reading: enough was read
            pass
    threading.Thread(target=feed, daemon=True).start()
    return fifo


def test_compare_reads_at_most_its_bound_from_a_pipe(tmp_path, capsys) -> None:
    """stat says 0 bytes for a pipe or /dev/zero: compare /dev/zero grew past 24 GB."""
    from sbconform.commands.compare import MAX_REPORT_BYTES

    fifo = _fifo_fed(tmp_path, b" " * (MAX_REPORT_BYTES + 2))
    line = one_error(capsys, ["compare", str(fifo)])
    assert str(fifo) in line and "too large" in line


def test_compare_still_reads_a_report_from_a_pipe(tmp_path, capsys) -> None:
    fifo = _fifo_fed(tmp_path, json.dumps(a_report()).encode())
    assert main(["compare", str(fifo)]) == 0
    assert "| SETTLE-SEND-001 | MUST | pass |" in capsys.readouterr().out


def test_serve_reads_at_most_its_bound_of_config_from_a_pipe(tmp_path, capsys) -> None:
    """serve --config /dev/zero grew past 24 GB (load_config and the logging set-up read it whole)."""
    pytest.importorskip("proton")
    from sbconform.commands.serve import MAX_CONFIG_BYTES

    fifo = _fifo_fed(tmp_path, b" " * (MAX_CONFIG_BYTES + 2))
    line = one_error(capsys, ["serve", "--port", "0", "--http-port", "-1", "--config", str(fifo)])
    assert str(fifo) in line and "too large" in line
