"""A careless user in a hurry, second round: what they typed is said back in one line naming it,
exit 2, no traceback; nothing they asked for is silently dropped or silently widened; what is
left on disk and on the terminal agrees with the run that was made. (Earlier rounds:
test_cli_careless.py, test_cli_errors.py, test_cli_preflight.py, test_report_reader.py.)

Every test here runs in process; none starts a test run of the kit (the run is replaced where
a test would otherwise start one), so the module takes about a second.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from sbconform import certify as certify_module
from sbconform.certify import _Run, certify
from sbconform.cli import build_parser, main
from sbconform.results import TestMeta as Meta, make_result

from test_cli_careless import one_error


@pytest.fixture
def no_test_run(monkeypatch):
    """The child test processes are never started: a run that gets that far breaks at once.
    Yields the runs made (their commands and environments)."""
    runs: list[_Run] = []

    def execute(self, jobs, timeout):
        runs.append(self)
        self.broke = "the test run broke (replaced by the test)"
        return None

    monkeypatch.setattr(_Run, "execute", execute)
    yield runs


@pytest.mark.parametrize("pattern", ["", " ", ",", " , "])
def test_an_empty_clause_pattern_is_refused_not_a_run_of_every_clause(tmp_path, capsys, no_test_run, pattern) -> None:
    # `--clause "$CLAUSE"` with the variable unset: it selected nothing, so every clause ran and
    # the run said CERTIFIED, for a user who meant to narrow it
    line = one_error(capsys, ["certify", "--clause", pattern, "--report-dir", str(tmp_path / "r")])
    assert "--clause" in line and "empty" in line, line
    assert not (tmp_path / "r").exists()


def test_a_clause_pattern_beside_an_empty_one_is_still_taken(tmp_path, capsys, no_test_run) -> None:
    """Only a pattern that is nothing at all is refused: a trailing comma is not."""
    assert main(["certify", "--clause", "SETTLE-COMP-001,", "--jobs", "1", "--report-dir", str(tmp_path / "r")]) == 2
    assert "replaced by the test" in capsys.readouterr().err  # it got as far as running


def test_a_run_that_breaks_leaves_no_earlier_report_beside_its_own_log(tmp_path, no_test_run) -> None:
    # an earlier run's PASSED report stayed next to the run.log of a run that wrote none: whoever
    # was handed the directory read the old verdict as this run's
    reports = tmp_path / "r"
    reports.mkdir()
    for name in ("report.json", "report.md"):
        (reports / name).write_text("an earlier run's report", encoding="utf-8")
    (tmp_path / "old.html").write_text("an earlier run's page", encoding="utf-8")
    (tmp_path / "old.xml").write_text("<testsuites/>", encoding="utf-8")
    code = certify("reference", reports, clauses=["SETTLE-COMP-001"], jobs=1, out=io.StringIO(),
                   html=tmp_path / "old.html", junit_xml=tmp_path / "old.xml")
    assert code == 2
    left = sorted(p.name for p in reports.iterdir()) + sorted(p.name for p in tmp_path.glob("old.*"))
    assert left == ["run.log"], left


def test_a_run_refused_before_it_starts_leaves_the_earlier_report_alone(tmp_path, capsys) -> None:
    """A refusal before anything runs (here: a clause that does not exist) touches nothing."""
    reports = tmp_path / "r"
    reports.mkdir()
    (reports / "report.json").write_text("{}", encoding="utf-8")
    one_error(capsys, ["certify", "--clause", "NO-SUCH-001", "--report-dir", str(reports)])
    assert (reports / "report.json").read_text(encoding="utf-8") == "{}"


def a_run(tmp_path: Path, command: list[str], progress: io.StringIO | None = None) -> _Run:
    from sbspec import load_catalog

    return _Run(command, command, tmp_path / "results.json", {}, tmp_path, tmp_path / "run.log", (), load_catalog(), progress)


def test_the_live_line_counts_only_the_selected_clauses(tmp_path) -> None:
    # one scenario checks three clauses, one of them selected: the line said "3/3 clauses, 3 failing"
    # and named an unselected clause, then the summary said 1 clause graded, 1 failing
    out = io.StringIO()
    run = a_run(tmp_path, [sys.executable, "-c", "pass", "--sb-target", "reference", "--sb-clause", "SETTLE-COMP-001"], out)
    meta = Meta(title="t", clauses=["SETTLE-ABAN-001", "SETTLE-COMP-001", "SETTLE-LOCK-003"], needs=[],
                    kind="scenario", uses_target=True)
    run._show_progress(final=True, finished=[make_result("t::a", meta, "call", "fail", "wrong")])
    run.close()
    line = out.getvalue().strip()
    assert line.startswith("1/1 clauses, 1/1 tests, 1 failing  SETTLE-COMP-001"), line


def test_the_live_line_of_a_whole_run_counts_every_clause(tmp_path) -> None:
    out = io.StringIO()
    run = a_run(tmp_path, [sys.executable, "-c", "pass", "--sb-target", "reference"], out)
    meta = Meta(title="t", clauses=["SETTLE-ABAN-001", "SETTLE-COMP-001"], needs=[], kind="scenario", uses_target=True)
    run._show_progress(final=True, finished=[make_result("t::a", meta, "call", "pass")])
    run.close()
    assert out.getvalue().strip().startswith("2/2 clauses, 1/1 tests  SETTLE-ABAN-001"), out.getvalue()


def test_test_arguments_that_select_no_test_are_said_so_not_a_broken_run(tmp_path) -> None:
    # `sbconform certify -- -k typo`: the runner's exit status 5 (no test collected) was reported
    # as "the test run broke (test process exit status 5: ...)"
    run = a_run(tmp_path, [sys.executable, "-c", "import sys; print('1 deselected'); sys.exit(5)", "--sb-target", "reference"])
    assert run.execute(1, None) is None
    run.close()
    assert "no test" in run.broke and "broke" not in run.broke and "exit status 5" not in run.broke, run.broke


def test_a_test_process_that_dies_is_still_a_broken_run(tmp_path) -> None:
    run = a_run(tmp_path, [sys.executable, "-c", "import sys; sys.exit(3)", "--sb-target", "reference"])
    assert run.execute(1, None) is None
    run.close()
    assert run.broke.startswith("the test run broke (test process exit status 3"), run.broke


def test_spec_check_refuses_an_area_it_would_ignore(capsys) -> None:
    # `spec check --area rules` printed every area, exit 0: the option was dropped without a word
    line = one_error(capsys, ["spec", "check", "--area", "rules"])
    assert "--area" in line and "spec list" in line, line


@pytest.fixture
def serve_returns(monkeypatch):
    """`sbconform serve` in process returns once listening (closing its socket), and leaves
    this process's Ctrl-C and SIGTERM handlers as they were."""
    import signal

    from sbconform.server import Server

    monkeypatch.setattr(Server, "run", lambda self: self.listener.close())
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in handlers.items():
        signal.signal(s, handler)
    import logging

    logging.getLogger("sbconform.serve").handlers[:] = []


@pytest.mark.parametrize("kind", ["Fle", "Syslog", "", 5, None])
def test_serve_refuses_a_logging_type_it_does_not_know(tmp_path, capsys, serve_returns, kind) -> None:
    # a typo in UserConfig.Logging.Type logged as if it said Console, without a word
    config = tmp_path / "Config.json"
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "q"}]}],
                                                 "Logging": {"Type": kind}}}), encoding="utf-8")
    line = one_error(capsys, ["serve", "--port", "0", "--http-port", "-1", "--config", str(config)])
    assert str(config) in line and "UserConfig.Logging.Type" in line and "Console or File" in line, line


@pytest.mark.parametrize("kind", ["Console", "File", "console"])
def test_serve_takes_the_logging_types_the_emulator_documents(tmp_path, capsys, serve_returns, kind) -> None:
    config = tmp_path / "Config.json"
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "q"}]}],
                                                 "Logging": {"Type": kind}}}), encoding="utf-8")
    assert main(["serve", "--port", "0", "--http-port", "-1", "--config", str(config)]) == 0
    assert "listening on" in capsys.readouterr().out


def subcommand_help(name: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[name]
    return " ".join(sub.format_help().split())


def test_certify_help_gives_the_exit_codes_the_readme_gives() -> None:
    """README: 2 also when every clause was skipped (nothing graded); --help said only bad input."""
    text = subcommand_help("certify")
    assert "nothing graded" in text and "130" in text, text


def test_serve_help_says_half_the_idle_timeout_is_advertised() -> None:
    """README and proton: OPEN carries half the timeout (proton advertises local_idle_timeout / 2)."""
    assert "half of it advertised in OPEN" in subcommand_help("serve")


def test_compare_says_when_one_report_is_given_twice(tmp_path, capsys) -> None:
    # `compare r5 r5` (or the directory and its report.json) showed two identical columns, "#1" and
    # "#2", without a word: two runs that agree, where there was one
    reports = tmp_path / "r"
    reports.mkdir()
    report = {"target": {"name": "mine"}, "clauses": {"SETTLE-SEND-001": {"status": "pass", "level": "MUST"}},
              "summary": {"pass": 1, "fail": 0, "verdict": "PASSED"}}
    (reports / "report.json").write_text(json.dumps(report), encoding="utf-8")
    line = one_error(capsys, ["compare", str(reports), str(reports / "report.json")], code=0)
    assert "report.json" in line and "twice" in line and "one run" in line, line
    (tmp_path / "copy.json").write_text(json.dumps(report), encoding="utf-8")  # two runs that agree: no note
    assert main(["compare", str(reports), str(tmp_path / "copy.json")]) == 0
    captured = capsys.readouterr()
    assert "mine #2" in captured.out and captured.err == ""


def test_serve_a_frame_size_below_amqps_minimum_names_the_flag(capsys) -> None:
    # it said "max_frame_size: AMQP allows no less than 512 bytes", the field, not the flag typed
    line = one_error(capsys, ["serve", "--port", "0", "--max-frame-size", "100"])
    assert "--max-frame-size" in line and "512" in line, line


SERVE_STRING = "Endpoint=sb://localhost:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"


@pytest.mark.parametrize("argv", [["--target", "reference"], ["--target", "sdk", "--option", "serve=true"],
                                  ["--target", "sdk", "--option", "serve=Yes"]])
def test_an_exported_connection_string_does_not_stop_a_target_that_needs_none(tmp_path, capsys, monkeypatch, no_test_run,
                                                                              argv) -> None:
    # README: export $SBCONFORM_CONNECTION_STRING rather than type it; the same shell's
    # `sbconform certify --target reference` (README's first command) then said "the reference target
    # takes no options ['connection_string']", an option the user never gave
    from sbconform.secrets import ENV

    monkeypatch.setenv(ENV, SERVE_STRING)
    assert main(["certify", *argv, "--clause", "SETTLE-COMP-001", "--jobs", "1", "--report-dir", str(tmp_path / "r")]) == 2
    assert "replaced by the test" in capsys.readouterr().err  # it got as far as running
    [run] = no_test_run
    assert ENV not in run.env  # the test processes do not see it either


def test_a_connection_string_given_to_a_target_that_takes_none_is_still_refused(tmp_path, capsys, no_test_run) -> None:
    line = one_error(capsys, ["certify", "--connection-string", SERVE_STRING, "--report-dir", str(tmp_path / "r")])
    assert "connection_string" in line and "SAS_KEY_VALUE" not in line, line


def test_an_exported_connection_string_is_the_sdk_targets_namespace(tmp_path, capsys, monkeypatch, no_test_run) -> None:
    from sbconform.secrets import ENV

    monkeypatch.setenv(ENV, "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true;")
    line = one_error(capsys, ["certify", "--target", "sdk", "--report-dir", str(tmp_path / "r")])
    assert "nothing listens on 127.0.0.1:1" in line, line  # preflight of the exported namespace


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_an_expectations_file_that_is_a_device_is_not_called_missing(tmp_path, capsys, device) -> None:
    # "--expectations /dev/null: no such file": it is there, it is just not a file of expectations
    line = one_error(capsys, ["certify", "--expectations", device, "--report-dir", str(tmp_path / "r")])
    assert device in line and "no such file" not in line and "not a regular file" in line, line


def test_a_reason_holding_control_characters_leaves_every_report_file_readable(tmp_path) -> None:
    # a broker's error text (a NUL, an ANSI colour, a lone surrogate) in a failure reason: the JUnit
    # file was not well-formed XML (a CI system read no result at all) and report.md was not written
    # (UnicodeEncodeError, a traceback after the whole run)
    import xml.etree.ElementTree as ET

    from sbspec import load_catalog

    from sbconform.certify_outputs import write_outputs
    from sbconform.report import build_report

    catalog = load_catalog()
    meta = Meta(title="t", clauses=["SETTLE-COMP-001"], needs=[], kind="scenario", uses_target=True)
    raw = {"target": {"name": "mine"}, "finished": "now", "exitstatus": 1, "selection": ["SETTLE-COMP-001"],
           "tests": [make_result("t::a", meta, "call", "fail", "the broker said \x00\x1b[31mno\ud800\uffff")]}
    report = build_report(raw, catalog)
    write_outputs(report, catalog, tmp_path / "r", tmp_path / "j.xml", tmp_path / "r.html")
    [failure] = ET.parse(tmp_path / "j.xml").getroot().iter("failure")
    escaped = "the broker said \\x00\\x1b[31mno\\ud800\\uffff"
    assert escaped in failure.text
    assert json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))["clauses"]["SETTLE-COMP-001"]["reason"] \
        == f"t: {escaped}"
    assert escaped in (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert escaped in (tmp_path / "r.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("out", ["stdout", "--out", "--html"])
def test_compare_a_report_holding_a_lone_surrogate_is_shown_not_a_traceback(tmp_path, capsys, out) -> None:
    # JSON may carry "\ud800"; compare's markdown and HTML could not be written (UnicodeEncodeError)
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"target": {"name": "mine\ud800"}, "summary": {"pass": 0, "fail": 1, "verdict": "FAILED\x00"},
                                "clauses": {"SETTLE-SEND-001": {"status": "fail", "level": "MUST", "reason": "x"}}}))
    argv = ["compare", str(path)] + ([] if out == "stdout" else [out, str(tmp_path / "c.out")])
    assert main(argv) == 0
    written = capsys.readouterr().out if out == "stdout" else (tmp_path / "c.out").read_text(encoding="utf-8")
    assert "mine\\ud800" in written


@pytest.mark.parametrize("action", ["engine", "sweep"])
def test_container_an_engine_that_does_not_answer_is_one_line(tmp_path, capsys, monkeypatch, action) -> None:
    # DOCKER_HOST naming nothing: `container engine` said "engine: docker at ..." and exit 0, as if it
    # were there; `container sweep` ended in a traceback of the docker client
    pytest.importorskip("docker")
    from sbconform import containers

    monkeypatch.setattr(containers, "_ENGINE", None)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    line = one_error(capsys, ["container", action])
    assert "no-engine.sock" in line and "does not answer" in line, line


def test_serve_takes_a_config_saved_with_a_byte_order_mark(tmp_path, capsys, serve_returns) -> None:
    # Windows editors may save UTF-8 with a byte order mark; serve said
    # "Config.json:1:1: not valid JSON: Unexpected UTF-8 BOM"
    config = tmp_path / "Config.json"
    config.write_bytes(b"\xef\xbb\xbf" + json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "q"}]}]}}).encode())
    assert main(["serve", "--port", "0", "--http-port", "-1", "--config", str(config)]) == 0
    assert "1 queues" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["certify", "--expectations", ""], ["certify", "--html", ""], ["certify", "--junit-xml", " "], ["certify", "--trace", ""],
    ["certify", "--report-dir", ""], ["compare", "r.json", "--out", ""], ["compare", "r.json", "--html", ""],
    ["serve", "--config", ""],
])
def test_an_empty_path_is_refused_when_parsed_not_dropped(tmp_path, capsys, no_test_run, argv) -> None:
    # `--expectations "$EXPECTED"` with the variable unset: the run went on without the file (its
    # expected failures graded as failures, exit 1); --html/--junit-xml/--trace "" wrote nothing, unsaid
    flag = next(a for a in argv if a.startswith("--"))
    line = one_error(capsys, argv)
    assert flag in line and "empty" in line, line


@pytest.mark.parametrize("argv, takes", [(["--sb-target", "reference"], False), (["--sb-target", "sdk", "--sb-option", "serve=true"], False),
                                         (["--sb-target", "sdk"], True)])
def test_an_exported_connection_string_reaches_only_the_pytest_target_that_takes_one(monkeypatch, argv, takes) -> None:
    # the plugin read $SBCONFORM_CONNECTION_STRING for every target: `pytest --sb-target reference` in the
    # shell README tells to export it said "the reference target takes no options ['connection_string']"
    from sbconform.pytest_plugin import target_options
    from sbconform.secrets import ENV

    monkeypatch.setenv(ENV, SERVE_STRING)

    class Config:
        def __init__(self, args: list[str]) -> None:
            self.args = args

        def getoption(self, name: str):
            if name == "--sb-target":
                return self.args[self.args.index("--sb-target") + 1]
            if name == "--sb-option":
                return [self.args[i + 1] for i, a in enumerate(self.args) if a == "--sb-option"]
            return None

    assert ("connection_string" in target_options(Config(argv))) is takes
