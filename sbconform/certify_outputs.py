"""What ``sbconform certify`` writes besides the test run, checked before anything runs: the
``--junit-xml`` and ``--html`` files and the ``--trace`` directory. A problem is one line
(certify says it and exits 2, with no report), never found after a run of many minutes."""

from __future__ import annotations

from pathlib import Path

#: the files certify writes in the report directory (``results.N.json`` per test process too)
REPORT_FILES = ("report.json", "report.md", "run.log", "results.json", "collected.json")


def output_problem(report_dir: Path, junit_xml: Path | str | None, html: Path | str | None,
                   trace_dir: Path | str | None) -> str | None:
    """What is wrong with where certify is asked to write, else None."""
    outputs = [(flag, Path(path)) for flag, path in (("--junit-xml", junit_xml), ("--html", html)) if path is not None]
    for flag, path in outputs:
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
