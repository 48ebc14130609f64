"""``sbconform certify``: run the kit against a target and write its report.

The features and the tests run in child pytest processes (a clean interpreter per run,
each in its own process group), with the sbconform plugin writing every test's clauses and
outcome (``sbconform.results``); those results are then folded into ``report.json``,
``report.md`` and, on request, JUnit XML and HTML (see ``report.py``).

What the user gets wrong is said before anything runs, in one line, exit 2 (:class:`CertifyError`):
a report directory that is a file, a missing expectations file, an unknown target or option,
a clause pattern that matches nothing, and (preflight, ``targets/preflight.py``) a target that
cannot be reached or refuses the key. The connection string goes to the children through the
environment, never on a command line; the children's output goes, masked, to ``run.log``.
Ctrl-C or SIGTERM stops every child (their process groups), writes the report of what
finished, marked incomplete, and exits 130.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Sequence, TextIO

from sbspec import load_catalog

from .certify_outputs import exit_status, lock_report_dir, output_problem, report_dir_locks, run_info, secrets_of, write_outputs
from .coverage import collection_paths, kit_root
from .report import area_line, build_report, clause_patterns, load_expectations, selects, summary_line
from .progress import LiveLine
from .results import RunResults, TestMeta, TestResult, default_meta, make_result, merge_runs, read_partial, read_started
from .secrets import ENV as CONNECTION_STRING_ENV, mask, mask_value

TRAILER = ("rootdir:", "inifile:", "configfile:")  # pytest's lines after its error: not what broke
#: pytest's exit status when nothing was collected (``-- -k typo``)
NO_TESTS_COLLECTED = 5
NOTHING_SELECTED = "no test of the kit was selected (by the test arguments after --, or --clause)"


class CertifyError(Exception):
    """A mistake in what certify was asked to do: one line, exit 2, no report."""


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def certify(
    target: str,
    report_dir: Path,
    options: Sequence[str] = (),
    connection_string: str | None = None,
    expectations: Path | None = None,
    hypothesis_profile: str = "ci",
    pytest_args: Sequence[str] = (),
    clauses: Sequence[str] = (),
    trace_dir: Path | None = None,
    jobs: int = 1,
    shard_timeout: float | None = None,
    junit_xml: Path | None = None,
    html: Path | None = None,
    progress: bool | None = None,
    out: TextIO | None = None,
) -> int:
    """Returns 0 if no MUST clause fails unexpectedly, 1 if one does, 2 if the run could not be
    made (bad input, unreachable target, a broken test run), 130 if interrupted.

    ``jobs > 1`` splits the selected tests into that many pytest processes run side by
    side (each with its own target, so a real-time target's waits overlap); their
    results are merged into one report. ``shard_timeout`` (seconds) stops a shard still
    running after that long: its results so far are kept and each of its tests without a
    result is reported as failed, "timed out"."""
    out = out or sys.stdout
    try:
        with report_dir_locks():  # the report directory is this run's until it ends
            return _certify(target, Path(report_dir), options, connection_string, expectations, hypothesis_profile,
                            pytest_args, clauses, trace_dir, jobs, shard_timeout, junit_xml, html, progress, out)
    except CertifyError as error:
        print(f"sbconform certify: {mask(str(error))}", file=sys.stderr, flush=True)
        return 2


def _validate(target: str, report_dir: Path, options: Sequence[str], connection_string: str | None,
              expectations: Path | None, clauses: Sequence[str], jobs: int) -> tuple[dict, dict]:
    from .targets import make_target, names, parse_options
    from .targets.preflight import PreflightError, check

    if report_dir.exists() and not report_dir.is_dir():
        raise CertifyError(f"--report-dir {report_dir}: is a file, not a directory")
    if jobs < 1:
        raise CertifyError(f"--jobs {jobs}: must be at least 1")
    if expectations is not None and not Path(expectations).is_file():
        raise CertifyError(f"--expectations {expectations}: " + ("a directory" if Path(expectations).is_dir() else "not a regular "
                           "file" if Path(expectations).exists() else "no such file"))
    try:
        expected = load_expectations(expectations)
    except ValueError as error:
        raise CertifyError(str(error)) from None
    catalog = load_catalog()
    unknown = sorted(set(expected) - set(catalog.clauses))
    if unknown:
        raise CertifyError(f"--expectations {expectations}: unknown clauses {', '.join(unknown)}")
    for arg in clauses:
        if not arg.replace(",", "").strip():  # `--clause "$UNSET"`: selecting nothing, it ran every clause
            raise CertifyError(f"--clause {arg!r}: an empty pattern; name an id, a glob like PART-KEY-*, "
                               f"or an area: {', '.join(sorted(catalog.areas))}")
        for pattern in (p.strip() for p in arg.split(",") if p.strip()):
            if not any(selects(pattern, c) for c in catalog.clauses.values()):
                raise CertifyError(f"--clause {pattern!r} matches no clause (an id, a glob like PART-KEY-*, "
                                   f"or an area: {', '.join(sorted(catalog.areas))})")
    try:
        parsed = parse_options(list(options))
    except ValueError as error:
        raise CertifyError(f"--option: {error}") from None
    if connection_string:
        parsed["connection_string"] = connection_string
    if target in names(include_test_only=True):
        try:
            make_target(target, **parsed)  # options are checked by the target's constructor
        except ValueError as error:
            raise CertifyError(f"--target {target}: {error}") from None
        try:
            check(target, parsed)
        except PreflightError as error:
            raise CertifyError(f"target {target!r}: {error}") from None
    elif not target.startswith("mutant-"):  # the kit's own broken targets are registered by its tests
        raise CertifyError(f"unknown target {target!r}; known targets: {', '.join(names())}")
    return expected, parsed


def _sweep_session(session: str) -> None:
    try:
        from .containers import sweep
        sweep(session=session)
    except Exception as error:  # never hides the report; says what may be left
        print(f"sbconform certify: could not remove the containers of session {session}: {error} "
              "(sbconform container sweep removes them)", file=sys.stderr, flush=True)


def _certify(target, report_dir, options, connection_string, expectations, hypothesis_profile, pytest_args, clauses,
             trace_dir, jobs, shard_timeout, junit_xml, html, progress, out) -> int:
    if not connection_string and _takes_exported(target, options):
        connection_string = os.environ.get(CONNECTION_STRING_ENV)  # a default: for the one target that takes one, unless
    connection_string = connection_string or None  # it starts its own server (the others refused it, never given)
    report_dir = Path(report_dir).absolute()  # the test processes run in the kit's root, not the caller's directory
    expected, _ = _validate(target, report_dir, options, connection_string, expectations, clauses, jobs)
    if problem := output_problem(report_dir, junit_xml, html, trace_dir, expectations):  # said now, not after the run
        raise CertifyError(problem)
    catalog = load_catalog()
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CertifyError(f"--report-dir {report_dir}: cannot create it: {error.strerror}") from None
    if busy := lock_report_dir(report_dir):  # before the first writes: two runs clobbered each other
        raise CertifyError(busy)
    raw_path = report_dir / "results.json"
    try:  # the first writes, before anything runs: a directory certify cannot write in is the user's to fix
        (report_dir / "run.log").open("w", encoding="utf-8").close()
        for stale in (raw_path, report_dir / "report.json", report_dir / "report.md"):  # an earlier run's, beside
            stale.unlink(missing_ok=True)  # this run's log, read as this run's verdict if this one writes none
    except OSError as error:
        raise CertifyError(f"--report-dir {report_dir}: cannot write in it: {error.strerror}") from None
    for flag, named in ((f, n) for f, n in (("--junit-xml", junit_xml), ("--html", html)) if n is not None):
        try:
            Path(named).unlink(missing_ok=True)
        except OSError as error:
            raise CertifyError(f"{flag} {named}: cannot replace it: {error.strerror}") from None
    root = kit_root()
    # test arguments naming files or tests narrow the run to them; else every test of the kit
    options_only = _options_only(list(pytest_args), root)
    tests = [] if len(options_only) < len(pytest_args) else collection_paths(root, clauses, catalog)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        *(["-c", str(root / "pytest.ini")] if (root / "pytest.ini").exists() else []),
        "--rootdir", str(root), *tests,
        "--sb-target", target, "--sb-report-json", str(raw_path), "--sb-certify",
    ]
    for option in options:
        command += ["--sb-option", option]
    for pattern in clauses:
        command += ["--sb-clause", pattern]
    if trace_dir is not None:
        command += [f"--sb-trace={Path(trace_dir).resolve()}"]  # one word: an existing path moves pytest's ini search
    # a shard names its tests itself: it takes the test arguments that are not paths
    base = [c for c in command if c not in tests] + options_only
    command += list(pytest_args)
    env = {**os.environ, "HYPOTHESIS_PROFILE": hypothesis_profile, "SBCONFORM_CERTIFY_CHILD": "1"}
    env["SBCONFORM_SESSION"] = session = uuid.uuid4().hex[:12]  # labels the containers its tests start
    env.pop(CONNECTION_STRING_ENV, None)
    if connection_string:
        env[CONNECTION_STRING_ENV] = connection_string  # never on the command line (ps shows it)
    secrets = secrets_of(connection_string, options)
    log_path = report_dir / "run.log"
    interactive = out.isatty() if progress is None else progress
    print(f"sbconform: certifying target {target!r}" + (f" with {jobs} jobs" if jobs > 1 else "")
          + (f", clauses {' '.join(clauses)}" if clauses else "") + f"; test output in {log_path}", file=out, flush=True)
    run = _Run(command, base, raw_path, env, root, log_path, secrets, catalog, out if interactive else None)
    previous = {s: signal.signal(s, run.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    incomplete = interrupted = None
    try:
        raw = run.execute(jobs, shard_timeout)
    except Interrupted as stop:
        incomplete = interrupted = f"interrupted by {stop}"
        raw = run.partial_results()
    finally:
        run.stop_all()
        if target in ("emulator", "container"):  # what its killed test processes left running
            _sweep_session(session)
        for s, handler in previous.items():
            signal.signal(s, handler)
        run.close()
    if raw is None:
        print(f"sbconform certify: {run.broke}; no report written; full output in {log_path}",
              file=sys.stderr, flush=True)
        return 2
    patterns = clause_patterns(clauses)
    raw["selection"] = raw.get("selection") or patterns  # a run killed before it said so is still narrowed
    if run.timed_out and not incomplete:  # the user's time limit stopped tests: nothing is certified
        incomplete = (f"{run.timed_out} test process{'es' if run.timed_out > 1 else ''} stopped by --shard-timeout "
                      f"{shard_timeout:g} s before finishing; {len(run.stuck)} test(s) did not finish")
    covered = None
    if pytest_args:  # narrowed by pytest arguments: what it did not run is not thereby uncovered
        from .coverage import check

        covered = {use.clause for use in check(root, catalog=catalog).uses}
    report = build_report(raw, catalog, expected, covered, narrowed=bool(pytest_args), incomplete=incomplete,
                          run=run_info(target, options, connection_string, expectations, clauses, jobs, shard_timeout, pytest_args,
                                       hypothesis_profile))
    try:  # checked before the run; this is the disk filling or the permissions changing since
        written = write_outputs(report, catalog, report_dir, junit_xml, html, secrets)
    except OSError as error:
        raise CertifyError(f"cannot write the report: {error.filename}: {error.strerror}") from None
    s = report["summary"]
    if not interactive:
        for area, counts in s["by_area"].items():
            print(area_line(area, counts), file=out)
    print(summary_line(report["target"].get("name", target), s) + "\n" + "\n".join(f"  {p}" for p in written),
          file=out, flush=True)
    return exit_status(report, bool(raw["tests"]), bool(interrupted), incomplete, expectations, target, written)


class _Run:
    """The child pytest processes of one certification, their logs, progress and stopping."""

    def __init__(self, command, base, raw_path: Path, env, root: Path, log_path: Path, secrets, catalog, progress_out) -> None:
        self.command, self.base, self.raw_path, self.env, self.root = command, base, raw_path, env, root
        self.secrets, self.catalog = secrets, catalog
        self.log = log_path.open("w", encoding="utf-8")
        self.log_lock = threading.Lock()
        self.processes: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.shards: list[tuple[Path, list[str] | None, subprocess.Popen]] = []
        self.broke = ""
        self.progress_out = progress_out
        self.started = time.monotonic()
        self.stopping = False
        self.timed_out = 0  # test processes stopped by the shard timeout
        self.stuck: list[str] = []  # their unfinished tests
        self.collected: dict[str, TestMeta] = {}  # what each test checks, from the collection step
        # the clauses --clause selected (None: all): the live line counts these, as the report grades them
        patterns = clause_patterns([command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "--sb-clause"])
        self.selected = None if not patterns else {
            cid for cid, clause in catalog.clauses.items() if any(selects(p, clause) for p in patterns)}

    def on_signal(self, signum, frame) -> None:
        if not self.stopping:
            self.stopping = True
            raise Interrupted(signum)

    # ------------------------------------------------------------ children
    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        process = subprocess.Popen(args, cwd=self.root, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", start_new_session=True)
        self.processes.append(process)
        thread = threading.Thread(target=self._pump, args=(process, name), daemon=True)
        thread.start()
        self.threads.append(thread)
        return process

    def _pump(self, process: subprocess.Popen, name: str) -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            text = mask(line)
            for secret in self.secrets:
                text = text.replace(secret, "***")
            with self.log_lock:
                self.log.write(f"[{name}] {text}")
                self.log.flush()
            self.last_line = getattr(self, "last_line", "") if text.isspace() or text.strip().startswith(TRAILER) else text.strip()

    def stop_all(self, grace: float = 5.0) -> None:
        """SIGTERM every child's process group (the tests and what they started), SIGKILL after ``grace``."""
        alive = [p for p in self.processes if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in alive:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.processes:
            try:  # the group may outlive its leader (a server the tests started)
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        for thread in self.threads:
            thread.join(2)
        self.log.close()

    # ------------------------------------------------------------ running
    def execute(self, jobs: int, timeout: float | None) -> RunResults | None:
        if jobs > 1 or timeout is not None:  # with a time limit, what each test checks is known before
            ids = self._collect()
            if ids is None:
                return None
        shards = [ids[i::jobs] for i in range(jobs) if ids[i::jobs]] if jobs > 1 else [None]
        base = self.base
        for i, shard in enumerate(shards):
            path = self.raw_path if shard is None else self.raw_path.with_name(f"results.{i}.json")
            path.unlink(missing_ok=True)
            Path(str(path) + ".partial").unlink(missing_ok=True)
            args = self.command if shard is None else [c if c != str(self.raw_path) else str(path) for c in base] + shard
            self.shards.append((path, shard, self._spawn(args, f"job {i + 1}" if shard is not None else "tests")))
        deadline = None if timeout is None else time.monotonic() + timeout
        parts: list[RunResults] = []
        for path, shard, process in self.shards:
            while True:
                self._show_progress()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0 and process.poll() is None:
                    parts.append(self._stop_shard(process, path, shard, timeout))
                    break
                try:
                    code = process.wait(0.5 if remaining is None else max(0.01, min(0.5, remaining)))
                except subprocess.TimeoutExpired:
                    continue
                if code == NO_TESTS_COLLECTED:  # pytest's: the user's selection, not a broken run
                    self.broke = NOTHING_SELECTED
                    break
                if not path.exists() or code not in (0, 1):
                    self.broke = f"the test run broke (test process exit status {code}: {getattr(self, 'last_line', '') or 'no output'})"
                    break
                parts.append(json.loads(path.read_text(encoding="utf-8")))
                if shard is not None:
                    path.unlink()
                break
        if self.broke or not parts:
            self._show_progress(final=True)
            self.broke = self.broke or "the test run broke (no results)"
            return None
        merged = merge_runs(parts)
        self._show_progress(final=True, finished=merged["tests"])
        self._write_raw(merged)
        return merged

    def _collect(self) -> list[str] | None:
        collected = self.raw_path.with_name("collected.json")
        collect = [c if c != str(self.raw_path) else str(collected) for c in self.command]
        partial = Path(str(collected) + ".partial")
        partial.unlink(missing_ok=True)
        listing = subprocess.run(collect + ["--collect-only"], cwd=self.root, env=self.env, capture_output=True, text=True)
        self.collected = read_partial(partial)[0]
        partial.unlink(missing_ok=True)
        with self.log_lock:
            self.log.write(mask(listing.stdout[-20000:] + listing.stderr[-5000:]))
        if listing.returncode not in (0, 5):
            lines = [line for line in (listing.stdout + listing.stderr).splitlines() if line.strip() and not line.strip().startswith(TRAILER)]
            self.broke = f"the test run broke (collecting the tests failed: {mask(lines[-1]) if lines else 'no output'})"
            return None
        ids = [line.strip() for line in listing.stdout.splitlines() if "::" in line and not line.startswith(" ")]
        if not ids:
            self.broke = NOTHING_SELECTED
            return None
        return ids

    def _write_raw(self, merged: RunResults) -> None:
        """results.json stays in the report directory: masked as the reports are (the test processes mask by pattern only)."""
        self.raw_path.write_text(json.dumps(mask_value(merged, self.secrets), indent=2, default=str), encoding="utf-8")

    def partial_results(self) -> RunResults:
        """What the shards finished before they were stopped; unfinished tests are not graded."""
        parts: list[RunResults] = []
        for path, shard, process in self.shards:
            if path.exists():
                try:
                    parts.append(json.loads(path.read_text(encoding="utf-8")))
                    continue
                except ValueError:
                    pass
            _, tests = read_partial(Path(str(path) + ".partial"))
            parts.append(RunResults(target={}, finished=None, exitstatus=2, selection=[], tests=tests))
        merged = merge_runs(parts) if parts else RunResults(target={}, finished=None, exitstatus=2, selection=[], tests=[])
        if not merged["target"]:
            merged["target"] = {"name": self.command[self.command.index("--sb-target") + 1]}
        self._write_raw(merged)
        return merged

    def _stop_shard(self, process: subprocess.Popen, path: Path, shard: list[str] | None, timeout: float | None) -> RunResults:
        """Kill a shard that outran the timeout; keep its results so far, fail its unfinished tests."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        partial = Path(str(path) + ".partial")
        metas, tests = read_partial(partial)
        metas = {**self.collected, **metas}
        started = read_started(partial)
        partial.unlink(missing_ok=True)
        done = {t["nodeid"] for t in tests}
        reason = (f"timed out: stopped by --shard-timeout {timeout:g} s (the command's time limit) before it "
                  f"finished; not a verdict of the target's behaviour unless the target hung")
        not_run = (f"not run: its test process was stopped by --shard-timeout {timeout:g} s (the command's time "
                   f"limit) before it reached this test")
        stuck = [nodeid for nodeid in (shard or list(metas)) if nodeid not in done]
        self.timed_out += 1
        self.stuck += stuck
        print(f"sbconform certify: --shard-timeout {timeout:g} s: a test process was still running and was stopped; "
              f"{len(stuck)} test(s) not finished ({sum(n not in started for n in stuck)} never started)" + (f": {', '.join(stuck[:5])}" if stuck else "")
              + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""), file=sys.stderr, flush=True)
        for nodeid in stuck:  # begun and stopped: a failure (the target may have hung); never begun: not run
            meta: TestMeta = metas.get(nodeid) or default_meta(nodeid)
            tests.append(make_result(nodeid, meta, "call", *(("fail", reason) if nodeid in started else ("skip", not_run))))
        return RunResults(target={}, exitstatus=1, finished=None, selection=[], tests=tests)

    # ------------------------------------------------------------ progress
    def _show_progress(self, final: bool = False, finished: list[TestResult] | None = None) -> None:
        """A live line: clauses done/total, the clause being run, elapsed (a terminal only)."""
        if self.progress_out is None:
            return
        seen = self.__dict__.setdefault("_seen", {})
        for path, _, _ in self.shards:
            partial = Path(str(path) + ".partial")
            if partial.exists():  # a finished shard removes it: keep what was last read
                seen[path] = read_partial(partial)
        metas: dict[str, TestMeta] = {}
        results: list[TestResult] = []
        for m, r in seen.values():
            metas.update(m)
            results += r
        if finished is not None:  # the run is over: its final results say everything
            results = finished
            for r in finished:
                metas.setdefault(r["nodeid"], r)
        def graded(clauses: list[str]) -> list[str]:
            return [c for c in clauses if self.selected is None or c in self.selected]

        tests_of: dict[str, set[str]] = {}
        for nodeid, meta in metas.items():
            for cid in graded(meta["clauses"]):
                tests_of.setdefault(cid, set()).add(nodeid)
        finished = {r["nodeid"] for r in results if r["phase"] in ("call", "setup") and
                    (r["phase"] == "call" or r["outcome"] != "pass")}
        failed = {c for r in results if r["outcome"] in ("fail", "xpass") for c in graded(r["clauses"])}
        done = [c for c, ids in tests_of.items() if ids <= finished]
        current = next(iter(graded(results[-1]["clauses"])), "") if results else ""
        elapsed = time.monotonic() - self.started
        line = (f"  {len(done)}/{len(tests_of) or '?'} clauses, {len(finished)}/{len(metas) or '?'} tests"
                f"{f', {len(failed)} failing' if failed else ''}  {current:<18} {elapsed:5.0f} s")
        live = self.__dict__.setdefault("_line", LiveLine(self.progress_out, live=True, started=self.started))
        live.show(line, force=True)
        if final:
            live.finish(keep=True)


def _takes_exported(target: str, options: Sequence[str]) -> bool:
    """``takes_exported_namespace`` of the ``--option`` items (malformed ones: the target's check says so)."""
    from .targets import parse_options, takes_exported_namespace

    try:
        return takes_exported_namespace(target, parse_options(list(options)))
    except ValueError:
        return target == "sdk"


def _options_only(args: list[str], root: Path) -> list[str]:
    out: list[str] = []
    for i, arg in enumerate(args):
        takes_value = i > 0 and args[i - 1] in ("-k", "-m", "-p", "-o", "--deselect", "--ignore")
        if not arg.startswith("-") and not takes_value and (root / arg.split("::")[0]).exists():
            continue
        out.append(arg)
    return out
