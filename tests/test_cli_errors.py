"""Bad input gets one line naming what and where, exit 2, no traceback; the CLI speaks sbconform, not pytest."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sbconform.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent


def one_error(capsys, argv: list[str], code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    pytest.importorskip("pyarrow")
    out = tmp_path_factory.mktemp("traces") / "run"
    assert main(["generate", "--events", "3000", "--entities", "2", "--out", str(out)]) == 0
    return out


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.startswith("sbconform 0.")


def test_every_option_has_help_and_shows_its_default() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert issubclass(command.formatter_class, argparse.ArgumentDefaultsHelpFormatter), name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"sbconform {name} {action.option_strings or action.dest}: no help"
        text = command.format_help()
        assert "pytest" not in text.replace("test runner", ""), name
        flat = " ".join(text.split())
        assert "(default: None)" not in flat and "(default: [])" not in flat, f"sbconform {name}: a default of nothing shown"
        for action in command._actions:
            if action.help and action.option_strings:
                shown = " ".join(command._get_formatter()._expand_help(action).split()) if action.help != argparse.SUPPRESS else ""
                assert shown.count("default") <= 1, f"sbconform {name} {action.option_strings[0]}: two defaults: {shown}"


def test_certify_jobs_default_to_the_number_of_cores() -> None:
    args = build_parser().parse_args(["certify"])
    assert args.jobs == (os.cpu_count() or 1)


def test_certify_report_dir_defaults_to_reports_target() -> None:
    help_text = " ".join(subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", "--help"], capture_output=True,
                                        text=True, cwd=REPO).stdout.split())
    assert "reports/TARGET" in help_text and "number of cores" in help_text


def test_targets_hides_the_kits_own_broken_targets(capsys) -> None:
    import mutants  # noqa: F401  (registers mutant-* targets in this process)
    from sbconform.targets import names

    assert any(n.startswith("mutant-") for n in names(include_test_only=True))
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert "reference:" in out and "mutant-" not in out
    assert "--sb-" not in out  # no pytest option names


def test_an_unknown_target_lists_only_real_ones(capsys, tmp_path) -> None:
    line = one_error(capsys, ["certify", "--target", "nosuch", "--report-dir", str(tmp_path)])
    assert "unknown target 'nosuch'" in line and "mutant" not in line and "reference" in line


def test_report_dir_that_is_a_file(capsys, tmp_path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    assert "is a file, not a directory" in one_error(capsys, ["certify", "--report-dir", str(f)])


def test_missing_expectations_file(capsys, tmp_path) -> None:
    line = one_error(capsys, ["certify", "--report-dir", str(tmp_path / "r"), "--expectations", str(tmp_path / "no.toml")])
    assert "no.toml: no such file" in line and not (tmp_path / "r").exists()


@pytest.mark.parametrize("target", ["sdk", "container", "emulator"])
def test_an_option_a_target_does_not_take_is_one_line(capsys, tmp_path, target) -> None:
    pytest.importorskip("azure.servicebus")
    line = one_error(capsys, ["certify", "--target", target, "--report-dir", str(tmp_path), "--option", "colour=blue"])
    assert "no option 'colour'" in line and "its options:" in line, line


def test_bad_option(capsys, tmp_path) -> None:
    line = one_error(capsys, ["certify", "--report-dir", str(tmp_path), "--option", "novalue"])
    assert "--option" in line and "KEY=VALUE" in line


def test_compare_a_missing_file_and_a_non_report(capsys, tmp_path) -> None:
    assert "no such file" in one_error(capsys, ["compare", str(tmp_path / "nope.json")])
    (tmp_path / "x.json").write_text('{"a": 1}')
    assert "not an sbconform report.json" in one_error(capsys, ["compare", str(tmp_path / "x.json")])
    (tmp_path / "y.json").write_text("not json")
    assert "not JSON" in one_error(capsys, ["compare", str(tmp_path / "y.json")])


@pytest.mark.parametrize("content", [b"", b"garbage, not parquet"])
def test_replay_an_empty_or_corrupt_parquet_trace(capsys, tmp_path, content) -> None:
    pytest.importorskip("pyarrow")
    bad = tmp_path / "t.parquet"
    bad.write_bytes(content)
    line = one_error(capsys, ["replay", "--local", str(bad)])
    assert str(bad) in line


@pytest.mark.parametrize("content", ["", "{bad\n"])
def test_replay_an_empty_or_corrupt_jsonl_trace(capsys, tmp_path, content) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text(content)
    assert str(bad) in one_error(capsys, ["replay", "--local", str(bad)])


def test_replay_a_corrupt_bucket_file(capsys, tmp_path, trace) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(trace, copy)
    bucket = sorted(copy.glob("bucket-*.parquet"))[0]
    bucket.write_bytes(bucket.read_bytes()[:100])
    assert f"{bucket}: not a readable Parquet file" in one_error(capsys, ["replay", "--local", str(copy)])


def test_an_empty_trace_is_not_valid(capsys, tmp_path) -> None:
    from sbconform.trace.io import JsonlWriter

    path = tmp_path / "empty.jsonl"
    try:
        writer = JsonlWriter(path, trace="empty")
    except TypeError:
        pytest.skip("JsonlWriter's signature changed")
    writer.close()
    assert main(["replay", "--local", str(path)]) == 2
    assert "empty trace proves nothing" in capsys.readouterr().err


def test_missing_output_directories_are_made_and_unmakable_ones_are_one_line(capsys, tmp_path, trace) -> None:
    """README's `generate --out traces/run1` and `replay --out replay/run1` on a fresh clone:
    the folders are made; a folder that cannot be made (under a file) is one line, exit 2."""
    assert main(["generate", "--events", "10", "--out", str(tmp_path / "a" / "t.jsonl")]) == 0
    assert (tmp_path / "a" / "t.jsonl").is_file()
    assert main(["replay", "--local", str(trace), "--out", str(tmp_path / "r" / "s" / "out")]) == 0
    assert (tmp_path / "r" / "s" / "out").is_dir()
    (tmp_path / "file").write_text("x")
    assert "cannot create" in one_error(capsys, ["replay", "--local", str(trace), "--out", str(tmp_path / "file" / "b" / "c")])
    assert "cannot create" in one_error(capsys, ["generate", "--events", "10", "--out", str(tmp_path / "file" / "t.jsonl")])


def test_an_interrupted_generate_leaves_nothing_that_passes_for_a_trace(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "big"
    process = subprocess.Popen([sys.executable, "-m", "sbconform.cli", "generate", "--events", "50000000", "--out", str(out)],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(tmp_path.iterdir()):
        time.sleep(0.1)
    assert any(tmp_path.iterdir()), "generate wrote nothing in 60 s"
    process.send_signal(signal.SIGINT)
    out_text, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == [f"sbconform generate: interrupted; nothing written to {out}"]
    assert list(tmp_path.iterdir()) == []  # neither the trace nor its temporary
    assert main(["replay", "--local", str(out)]) == 2


def test_replay_exit_codes(capsys, trace, tmp_path) -> None:
    assert main(["replay", "--local", str(trace)]) == 0
    bad = tmp_path / "bad"
    assert main(["generate", "--events", "20000", "--entities", "10", "--out", str(bad), "--inject", "lost-message"]) == 0
    assert main(["replay", "--local", str(bad)]) == 1


def test_a_crash_in_replay_is_never_1(capsys, trace, monkeypatch) -> None:
    import sbconform.trace.replay as replay

    def boom(*a, **k):
        raise RuntimeError("something broke")

    monkeypatch.setattr(replay, "replay_local", boom)
    line = one_error(capsys, ["replay", "--local", str(trace)])
    assert "no verdict" in line and "something broke" in line


def test_spark_workers_use_this_interpreter(monkeypatch) -> None:
    from sbconform.commands.replay import use_this_interpreter

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    use_this_interpreter()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    use_this_interpreter()
    assert os.environ["PYSPARK_PYTHON"] == "/opt/python/bin/python3"  # the user's choice stands


def test_the_readme_spark_replay_runs_when_the_system_python_lacks_pyarrow(tmp_path, trace) -> None:
    """Spark starts its Python workers with ``python3`` from PATH unless told otherwise; the
    command tells it to use the interpreter running sbconform."""
    pytest.importorskip("pyspark")
    import shutil

    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("python3", "python"):
        (fake / name).write_text("#!/bin/sh\necho 'a python without pyarrow' >&2\nexit 1\n")
        (fake / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{fake}:{env.get('PATH', '')}"
    run = subprocess.run([sys.executable, "-m", "sbconform.cli", "replay", str(trace), "--master", "local[1]",
                          "--out", str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "0 with a violation" in run.stdout and (tmp_path / "out" / "summary.json").exists()
    assert "Exception" not in run.stderr and "\tat " not in run.stderr  # Spark's log is not the user's output

    # a worker interpreter the user chose and that cannot run: one line, no verdict (2, never 1)
    env["PYSPARK_PYTHON"] = str(fake / "python3")
    broken = subprocess.run([sys.executable, "-m", "sbconform.cli", "replay", str(trace), "--master", "local[1]",
                             "--out", str(tmp_path / "out2")], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert broken.returncode == 2, broken.stdout[-2000:] + broken.stderr[-3000:]
    lines = [line for line in broken.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no verdict" in lines[0] and "Spark's log: " in lines[0], broken.stderr[-3000:]
    log = lines[0].split("Spark's log: ")[1].rstrip(")")
    assert Path(log).exists() and Path(log).stat().st_size > 0
    Path(log).unlink()


def test_generate_shows_a_live_line_on_a_terminal_only(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("pyarrow")
    import sbconform.commands.generate as command

    assert main(["generate", "--events", "3000", "--entities", "2", "--out", str(tmp_path / "a")]) == 0
    assert "\r" not in capsys.readouterr().out  # not a terminal: the summary line only

    shown: list[int] = []
    real = command._progress_line

    def spy(total, started, live=None):
        inner = real(total, started, live)

        def show(done):
            shown.append(done)
            inner(done)
        return show

    monkeypatch.setattr(command, "_progress_line", spy)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert main(["generate", "--events", "30000", "--entities", "2", "--out", str(tmp_path / "b")]) == 0
    assert shown and shown == sorted(shown) and shown[-1] >= 0
    assert "/30,000 events, " in capsys.readouterr().out  # the live line


def parse_error(capsys, argv: list[str]) -> str:
    """The command line refused when parsed: one line, exit 2, no traceback (nor usage block)."""
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("flag", ["--idle-timeout", "--open-timeout", "--close-grace", "--accept-backoff"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e300"])
def test_serve_refuses_seconds_that_are_not_a_finite_positive_number(capsys, flag, value) -> None:
    """``nan`` passed the ``<= 0`` check and every connection was then reset (proton's secs2millis)."""
    line = parse_error(capsys, ["serve", "--port", "0", f"{flag}={value}"])
    assert flag in line and value in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "soon"])
def test_certify_refuses_a_shard_timeout_that_is_not_a_finite_positive_number(capsys, value) -> None:
    line = parse_error(capsys, ["certify", f"--shard-timeout={value}"])
    assert "--shard-timeout" in line and value in line, line


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_record_refuses_a_rotate_size_that_is_not_a_finite_positive_number(capsys, value) -> None:
    line = parse_error(capsys, ["record", "--upstream", "x", "--out", "o", f"--rotate={value}"])
    assert "--rotate" in line and value in line, line


def test_the_seconds_options_still_take_good_values() -> None:
    args = build_parser().parse_args(["serve", "--idle-timeout", "2.5", "--close-grace", "1"])
    assert args.idle_timeout == 2.5 and args.close_grace == 1.0
    assert build_parser().parse_args(["certify", "--shard-timeout", "30"]).shard_timeout == 30.0


@pytest.mark.parametrize("local", [True, False])
def test_replay_of_a_file_that_is_not_a_trace_names_the_file_and_its_suffix(capsys, tmp_path, local) -> None:
    """Refused before any reader (or Spark) starts: one line naming the file, exit 2."""
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}\n')
    line = one_error(capsys, ["replay", *(["--local"] if local else []), str(path)])
    assert str(path) in line and "'.json'" in line and ".jsonl" in line and ".parquet" in line
    assert "Arrow" not in line


@pytest.mark.parametrize("argv", [["--out", "x.txt"], ["--out", "x.json"], ["--out", "x.csv"],
                                  ["--layout", "time", "--out", "plain"], ["--layout", "by-piece", "--out", "t.parquet"]])
def test_generate_refuses_an_out_that_is_neither_a_trace_file_nor_a_directory(capsys, tmp_path, argv) -> None:
    """README: ``--out`` is a directory (by-piece layout) or a .parquet / .jsonl file. A name
    that looks like another kind of file is refused, not made into a directory."""
    name = argv[-1]
    argv = [*argv[:-1], str(tmp_path / name)]
    line = one_error(capsys, ["generate", "--events", "10", *argv])
    assert str(tmp_path / name) in line and ".parquet" in line and ".jsonl" in line
    assert not (tmp_path / name).exists() and list(tmp_path.iterdir()) == []


def test_generate_out_names_that_work(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    for name, extra, is_dir in (("t.parquet", [], False), ("t.jsonl", [], False), ("run1", [], True),
                                ("run.2026-11-28", [], True), ("t.pq", [], False), ("t.ndjson", [], False),
                                ("x.final", ["--layout", "by-piece"], True)):
        out = tmp_path / name
        assert main(["generate", "--events", "10", "--out", str(out), *extra]) == 0, name
        assert out.is_dir() == is_dir and out.exists(), name
        assert main(["replay", "--local", str(out)]) == 0, name


@pytest.mark.parametrize("argv", [
    ["record", "--upstream", "x", "--out", "o", "--listen", "127.0.0.1:99999"],
    ["serve", "--port", "0", "--http-port", "99999"],
    ["serve", "--port", "99999"],
    ["serve", "--port", "0", "--http-port", "-2"],
])
def test_a_port_out_of_range_is_one_line_when_parsed(capsys, argv) -> None:
    """Finding 8: record --listen and serve --http-port ended in an OverflowError traceback, exit 1."""
    line = parse_error(capsys, argv)
    assert "99999" in line or "-2" in line, line
    assert "65535" in line, line


def test_serve_http_port_minus_one_still_means_none() -> None:
    assert build_parser().parse_args(["serve", "--http-port", "-1"]).http_port == -1


def test_a_report_dir_certify_cannot_write_in_is_one_line_before_anything_runs(capsys, tmp_path) -> None:
    """Finding 6: an existing report directory without write permission was a PermissionError
    traceback on run.log, exit 1 (the 'MUST clause fails' code). (run.log a directory stands in
    for the permission, which root does not feel.)"""
    report = tmp_path / "r"
    (report / "run.log").mkdir(parents=True)
    line = one_error(capsys, ["certify", "--clause", "SETTLE-LOCK-003", "--report-dir", str(report)])
    assert f"--report-dir {report}" in line and "cannot write" in line, line
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        line = one_error(capsys, ["certify", "--clause", "SETTLE-LOCK-003", "--report-dir", str(ro)])
        assert "Permission denied" in line, line


@pytest.mark.parametrize("flag", ["--junit-xml", "--html"])
def test_an_output_file_that_is_a_directory_is_refused_before_the_run(capsys, tmp_path, flag) -> None:
    """Finding 7: --junit-xml naming a directory ran every test, then an IsADirectoryError traceback, exit 1."""
    started = time.monotonic()
    line = one_error(capsys, ["certify", "--clause", "SETTLE-LOCK-003", "--report-dir", str(tmp_path / "r"),
                              flag, str(tmp_path)])
    assert f"{flag} {tmp_path}: is a directory" in line, line
    assert not (tmp_path / "r" / "run.log").exists() and time.monotonic() - started < 30


def test_certify_trace_naming_a_file_says_trace_needs_a_directory(capsys, tmp_path) -> None:
    """Finding 12: it said 'the test run broke (collecting the tests failed ...)', naming no option."""
    afile = tmp_path / "afile.json"
    afile.write_text("")
    line = one_error(capsys, ["certify", "--clause", "SETTLE-LOCK-003", "--report-dir", str(tmp_path / "r"),
                              "--trace", str(afile)])
    assert f"--trace {afile}" in line and "directory" in line, line


@pytest.mark.parametrize("option", ["serve=maybe", "serve="])
def test_an_invalid_boolean_option_value_is_named_with_what_is_accepted(capsys, tmp_path, option) -> None:
    pytest.importorskip("azure.servicebus")
    line = one_error(capsys, ["certify", "--target", "sdk", "--option", option, "--report-dir", str(tmp_path)])
    value = option.split("=")[1]
    assert f"serve={value!r}" in line and "true or false" in line, line


def test_spec_list_of_an_unknown_area_names_it_and_the_known_ones(capsys) -> None:
    line = one_error(capsys, ["spec", "list", "--area", "nosucharea"])
    assert "--area 'nosucharea'" in line and "settlement" in line, line
    assert main(["spec", "list", "--area", "settlement"]) == 0 and "SETTLE-" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["--backlog-queues", "100000000000"], "--backlog-queues"),
    (["--backlog-queues", "10", "--days", "100000000"], "--days"),
])
def test_cost_refuses_numbers_too_big_for_the_model_when_parsed(capsys, argv, says) -> None:
    """Finding 12: cost --backlog-queues 100000000000 ran until it was killed (the model runs every
    long poll of every queue: time and memory grow with queues x days)."""
    line = parse_error(capsys, ["cost", *argv])
    assert says in line and "at most" in line, line


def test_cost_refuses_queues_times_days_too_big_to_finish(capsys) -> None:
    started = time.monotonic()
    line = one_error(capsys, ["cost", "--backlog-queues", "2000", "--days", "30"])
    assert "queue-days" in line and "at most" in line and "--backlog-queues" in line and "--days" in line, line
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("argv, says", [
    (["--clients", "100000000"], "--clients"),
    (["--entities", "100000000"], "--entities"),
])
def test_generate_refuses_clients_or_entities_too_many_to_hold_when_parsed(capsys, tmp_path, argv, says) -> None:
    """Review finding: generate --clients 100000000 grew past 7 GB in a minute; --entities
    100000000 past 3.6 GB (each entity writes a few hundred events however few --events asks)."""
    line = parse_error(capsys, ["generate", "--events", "10", *argv, "--out", str(tmp_path / "t.jsonl")])
    assert says in line and "at most" in line, line


def test_generate_refuses_clients_times_entities_too_many_to_hold(capsys, tmp_path) -> None:
    started = time.monotonic()
    line = one_error(capsys, ["generate", "--events", "10", "--clients", "1000", "--entities", "100000", "--out", str(tmp_path / "t.jsonl")])
    assert "--clients" in line and "--entities" in line and "at most" in line, line
    assert time.monotonic() - started < 5 and not any(tmp_path.iterdir())


def test_a_damaged_parquet_trace_read_by_spark_names_the_file_and_the_cause(tmp_path, spark, capsys) -> None:
    """Spark's own Parquet reader (--reader spark) on a damaged file said only "Py4JJavaError: An
    error occurred while calling o124.collectToPython": which file, and what is wrong with it?"""
    trace = tmp_path / "t.parquet"
    assert main(["generate", "--events", "3000", "--entities", "2", "--out", str(trace)]) == 0
    data = bytearray(trace.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 200):
        data[i] ^= 0x5A
    trace.write_bytes(bytes(data))
    capsys.readouterr()
    line = one_error(capsys, ["replay", "--reader", "spark", str(trace), "--out", str(tmp_path / "o")])
    assert str(trace) in line and "no verdict" in line and "Py4JJavaError" not in line and "o1" not in line, line


def test_a_damaged_page_that_still_decodes_is_refused_by_spark_as_by_local(tmp_path, spark, capsys, monkeypatch) -> None:
    """One byte changed inside a plain, uncompressed page decodes without error (a message id
    read wrong): only the page checksum tells. Replay --local verified it; Spark's own reader
    did not, and graded the damaged trace as the broker's behaviour."""
    import json as _json

    from sbconform.trace import io

    jsonl = tmp_path / "t.jsonl"
    assert main(["generate", "--events", "2000", "--entities", "1", "--out", str(jsonl)]) == 0
    events = [e for e in map(_json.loads, jsonl.read_text().splitlines()) if "op" in e]  # not the header line
    monkeypatch.setattr(io, "PARQUET_OPTIONS", {"compression": "none", "use_dictionary": False, "write_page_checksum": True})
    trace = tmp_path / "t.parquet"
    with io.ParquetWriter(trace, events[0]["trace"]) as writer:
        writer.write_all(events)
    data = bytearray(trace.read_bytes())
    ids = sorted({e["message_id"] for e in events if e.get("message_id")})
    mid = ids[len(ids) // 2].encode()  # neither the column's min nor its max (those are in page headers, unchecked)
    at = data.index(mid)
    data[at + len(mid) - 1] ^= 0x01  # the id's last character, one bit
    trace.write_bytes(bytes(data))
    capsys.readouterr()
    for argv in (["replay", "--local", str(trace)], ["replay", "--reader", "spark", str(trace), "--out", str(tmp_path / "o")]):
        line = one_error(capsys, argv)
        assert str(trace) in line and ("corrupt" in line or "cannot be read" in line) and "VIOLATION" not in line, (argv, line)
