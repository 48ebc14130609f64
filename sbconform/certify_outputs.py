"""What ``sbconform certify`` writes besides the test run: the ``--junit-xml`` and ``--html`` files
and the ``--trace`` directory, checked before anything runs (a problem is one line: certify says
it and exits 2, with no report, never found after a run of many minutes); the run's description
(``run_info``, keys masked) and the report files, written from one masked report (``write_outputs``)."""

from __future__ import annotations

import contextlib
import re
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Sequence

#: the files certify writes in the report directory (``results.N.json`` per test process too)
REPORT_FILES = ("report.json", "report.md", "run.log", "results.json", "collected.json")


def output_problem(report_dir: Path, junit_xml: Path | str | None, html: Path | str | None,
                   trace_dir: Path | str | None, expectations: Path | str | None = None) -> str | None:
    """What is wrong with where certify is asked to write, else None."""
    outputs = [(flag, Path(path)) for flag, path in (("--junit-xml", junit_xml), ("--html", html)) if path is not None]
    for flag, path in outputs:
        if expectations is not None and path.absolute().resolve() == Path(expectations).absolute().resolve():
            return f"{flag} {path}: the --expectations file: writing it would replace the expectations"
        if path.is_dir():
            return f"{flag} {path}: is a directory; name the file to write"
        if any(p.exists() and not p.is_dir() for p in path.parents):
            return f"{flag} {path}: cannot create it: a parent is a file"
        where = path.absolute().resolve()
        if where.parent == report_dir.absolute().resolve() and (
                where.name in REPORT_FILES or (where.name.startswith("results.") and where.suffix == ".json")):
            return f"{flag} {path}: the same file as the report's own {where.name} in --report-dir: name another file"
    if len(outputs) == 2 and outputs[0][1].absolute().resolve() == outputs[1][1].absolute().resolve():
        return f"--junit-xml {outputs[0][1]} and --html {outputs[1][1]} name the same file: one would overwrite the other"
    if trace_dir is not None and Path(trace_dir).exists() and not Path(trace_dir).is_dir():
        return f"--trace {trace_dir}: is a file; name a directory (one JSON Lines trace per test goes in it)"
    return None


def run_info(target: str, options: Sequence[str], connection_string: str | None, expectations: Path | str | None,
             clauses: Sequence[str], jobs: int, shard_timeout: float | None, pytest_args: Sequence[str],
             hypothesis_profile: str | None = None) -> dict[str, Any]:
    """How a certification was run, for its report: what decides what was graded (not where the
    files went), every key and signature masked; of the connection string only its endpoint."""
    import re
    import shlex

    from .secrets import mask

    found = re.search(r"(?i)(?:^|;)\s*Endpoint\s*=\s*([^;]*)", connection_string or "")
    args = [*(a for c in clauses for a in ("--clause", c)), *(a for o in options for a in ("--option", o)),
            *(["--expectations", str(expectations)] if expectations else []), "--jobs", str(jobs),
            *(["--hypothesis-profile", hypothesis_profile] if hypothesis_profile else []),
            *(["--shard-timeout", f"{shard_timeout:g}"] if shard_timeout else []), *(["--", *pytest_args] if pytest_args else [])]
    return {"target": target, "endpoint": mask(found[1].strip()) if found else None, "options": [mask(o) for o in options],
            "clauses": list(clauses), "expectations": str(expectations) if expectations else None, "jobs": jobs,
            "shard_timeout": shard_timeout, "hypothesis_profile": hypothesis_profile, "test_args": [mask(a) for a in pytest_args],
            "arguments": mask(shlex.join(args))}


def secrets_of(connection_string: str | None, options: Sequence[str]) -> tuple[str, ...]:
    """The keys to mask verbatim in all certify writes: the connection string's and any an option
    carries (the sdk target's ``secondary=`` connection string)."""
    from .secrets import key_of

    return tuple(s for s in (key_of(connection_string), *(key_of(o) for o in options)) if s)


#: what XML 1.0 cannot hold (control characters but tab and line ends, U+FFFE, U+FFFF) and UTF-8 cannot
#: encode (lone surrogates)
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def printable(value: Any) -> Any:
    """Every text of a report with those characters written as escapes (``\\x00``, ``\\ud800``): a
    broker's error text in a reason made the JUnit file unparseable and report.md unwritable."""
    if isinstance(value, str):
        return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def write_outputs(report: dict[str, Any], catalog: Any, report_dir: Path, junit_xml: Path | str | None,
                  html: Path | str | None, secrets: tuple[str, ...] = ()) -> list[Path]:
    """report.json, report.md, and the --junit-xml and --html files asked for, from one report
    whose keys and signatures are masked (``sbconform.secrets``) before any file is written."""
    from .report import write_html, write_report
    from .secrets import mask_value

    report = printable(mask_value(report, secrets))
    written = list(write_report(report, catalog, report_dir))
    if junit_xml:
        written.append(write_junit(report, Path(junit_xml)))
    if html:
        written.append(write_html([report], catalog, Path(html)))
    return written


def write_junit(report: dict[str, Any], path: Path) -> Path:
    """JUnit XML for CI systems: one test suite per area, one test case per clause (a failing
    MUST is a failure; a failing SHOULD/MAY/INFO is reported in system-out, not failed;
    skipped and uncovered clauses are skipped, with the reason)."""
    import xml.etree.ElementTree as ET

    name = report["target"].get("name", "target")
    s = report["summary"]
    root = ET.Element("testsuites", name=f"sbconform {name}", tests=str(s["total"]),
                      failures=str(s.get("strict_fail", s["fail"])))
    kit, run = report.get("kit") or {}, report.get("run") or {}
    run_props = [(k, str(v)) for k, v in (("verdict", s.get("verdict")), ("sbconform", kit.get("sbconform")),
                 ("catalog", kit.get("catalog")), ("finished", report.get("finished")), ("run", run.get("arguments")))
                 if v is not None]  # in each suite (the schema has properties there): what a CI page shows of the run
    by_area: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for cid, entry in report["clauses"].items():
        by_area.setdefault(entry["area"], []).append((cid, entry))
    for area, entries in by_area.items():
        failures = sum(1 for _, e in entries if e.get("grade") == "strict")
        skipped = sum(1 for _, e in entries if e["status"] in ("skip", "uncovered"))
        suite = ET.SubElement(root, "testsuite", name=f"{name}.{area}", tests=str(len(entries)),
                              failures=str(failures), errors=str(sum(1 for _, e in entries if e.get("unexpected_pass"))),
                              skipped=str(skipped))
        props = ET.SubElement(suite, "properties")
        for key, value in run_props:
            ET.SubElement(props, "property", name=key, value=value)
        for cid, e in entries:
            case = ET.SubElement(suite, "testcase", classname=f"{name}.{area}", name=f"{cid} [{e['level']}]")
            reason = e.get("reason") or ""
            if e["status"] == "fail" and e.get("grade") == "strict":
                ET.SubElement(case, "failure", message=reason[:1000], type="MUST").text = reason
            elif e.get("unexpected_pass"):  # the expectations file's error, not the target's failure
                ET.SubElement(case, "error", message=reason[:1000], type="expectations").text = reason
            elif e["status"] == "fail":
                label = "expected failure" if e.get("expected") else f"{e.get('grade')} failure ({e['level']})"
                ET.SubElement(case, "system-out").text = f"{label}: {reason}"
            elif e["status"] in ("skip", "uncovered"):
                ET.SubElement(case, "skipped", message=(f"{e['status']}: {reason}")[:1000])
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


_unscoped: list = []
_held: ContextVar[list | None] = ContextVar("sbconform_certify_locks", default=None)


@contextlib.contextmanager
def report_dir_locks() -> Iterator[None]:
    """Releases, on leaving, the report directories :func:`lock_report_dir` took inside."""
    token = _held.set([])
    try:
        yield
    finally:
        for handle in _held.get() or []:
            handle.close()  # closing the file releases its lock
        _held.reset(token)


def lock_report_dir(report_dir: Path) -> str | None:
    """Takes the report directory for this run (a lock on its ``run.log``, held until
    :func:`report_dir_locks` ends): two certifications writing in one directory removed each
    other's results files, and one ended "the test run broke". A problem if another has it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return None
    try:
        handle = (report_dir / "run.log").open("a", encoding="utf-8")
    except OSError as error:
        return f"--report-dir {report_dir}: cannot write in it: {error.strerror}"
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return (f"--report-dir {report_dir}: another sbconform certify is writing its report there now: "
                f"wait for it to finish, or name another --report-dir")
    held = _held.get()
    if held is not None:  # else (no report_dir_locks around) released when the process ends
        held.append(handle)
    else:
        _unscoped.append(handle)
    return None


#: certify's exit status when Ctrl-C or SIGTERM stopped it
INTERRUPTED = 130


def exit_status(report: dict[str, Any], tests_ran: bool, interrupted: bool, incomplete: str | None,
                expectations: Any, target: str, written: list[Path]) -> int:
    """certify's exit status for its report, with the one line that says why when it is not 0:
    0 no MUST clause failed, 1 one did, 2 no verdict (nothing graded, a stale expectations file),
    130 interrupted."""
    s = report["summary"]
    if interrupted:
        print(f"sbconform certify: {incomplete}: the children were stopped; partial report marked incomplete",
              file=sys.stderr, flush=True)
        return INTERRUPTED
    if incomplete:
        print(f"sbconform certify: {incomplete}: report marked incomplete, not certified; raise --shard-timeout "
              f"if the tests need longer", file=sys.stderr, flush=True)
        # a MUST clause whose test timed out fails (as --help says); else nothing was graded that could fail
        return 1 if s["strict_fail"] else 2
    if not tests_ran:
        print("sbconform certify: no test ran; nothing is graded", file=sys.stderr, flush=True)
        return 2
    if not s["graded"]:  # every clause skipped: no verdict, never a pass (a full run says NOT CERTIFIED, a narrowed one NOTHING GRADED)
        chosen = f"{s['total'] - s['not_selected']} selected" if s["not_selected"] else f"catalog's {s['total']}"
        print(f"sbconform certify: nothing was graded: the {chosen} clauses were all skipped on target {target!r} "
              f"(the reasons are in {written[0]})", file=sys.stderr, flush=True)
        return 2
    if s["unexpected_pass"]:  # the user's file is wrong, not the target: 2 (1 only if a MUST clause also failed)
        stale = [cid for cid, e in report["clauses"].items() if e.get("unexpected_pass")]
        print(f"sbconform certify: --expectations {expectations}: out of date: {', '.join(stale)} "
              f"pass{'es' if len(stale) == 1 else ''} where it says fail or skip; update the file",
              file=sys.stderr, flush=True)
    return (2 if s["unexpected_pass"] else 0) if s["passed"] else 1
