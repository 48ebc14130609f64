"""The pytest plugin: target selection, clause and capability markers, results.

- ``--sb-target NAME`` picks the broker under test (default ``sbreference``);
  ``--sb-connection-string`` (or ``$SBCONFORM_CONNECTION_STRING``, which keeps the key off the
  command line) and ``--sb-option KEY=VALUE`` configure it. A remote target is preflighted
  (``targets/preflight.py``): unreachable or refusing the key, the run stops with one line.
- Gherkin tags become markers: ``@SETTLE-LOCK-003`` -> ``clauses("SETTLE-LOCK-003")``,
  ``@needs:sessions`` -> ``needs("sessions")``. Python tests use the same markers.
- A test that needs a capability the target lacks is skipped, the reason naming both.
- A scenario that names no clause, or names a clause the catalog does not know, is a
  collection error: every scenario must trace back to the spec.
- ``--sb-clause PATTERN`` (repeatable; a clause id, a glob like ``SETTLE-LOCK-*``, or an area
  name like ``partitioning``) runs only the tests of matching clauses, test262 style; the
  others are deselected, and the report says the unselected clauses were not selected.
- ``--sb-report-json PATH`` writes every test's clauses, needs and outcome; ``sbconform
  certify`` turns that into the per-clause report.
- ``--sb-trace DIR`` records every target the session makes during a test (``sb_target``,
  ``sb_session.new()``) into ``DIR/<test>.jsonl``, one trace per test (``sbconform.trace``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from sbreference import ServiceBusError
from sbspec import CatalogError, load_catalog
from sbspec.catalog import CLAUSE_ID

from .report import clause_patterns, selects
from .results import Collected, Outcome, RunResults, TestMeta, TestResult, make_result
from .secrets import ENV as CONNECTION_STRING_ENV, mask
from .targets import Target, make_target, names, parse_options, takes_exported_namespace

#: pytest's outcome words -> the record's
OUTCOMES: dict[str, Outcome] = {"passed": "pass", "failed": "fail", "skipped": "skip", "xfail": "xfail", "xpass": "xpass"}
CLAUSE_TAG = CLAUSE_ID  # the one clause-id pattern (sbspec/catalog.py)
NEEDS_PREFIX = "needs:"

_CATALOG = None


def catalog():
    global _CATALOG
    if _CATALOG is None:
        try:
            _CATALOG = load_catalog()
        except CatalogError as error:
            raise pytest.UsageError(str(error)) from None
    return _CATALOG


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sbconform", "sbconform conformance kit")
    group.addoption("--sb-target", default="reference", help=f"target under test (one of: {', '.join(names())}; default reference)")
    group.addoption("--sb-connection-string", default=None,
                    help=f"connection string for targets that need one (default: ${CONNECTION_STRING_ENV}; "
                         "prefer the variable: a command line is visible to every user of the machine)")
    group.addoption(
        "--sb-option", action="append", default=[], metavar="KEY=VALUE", help="a target option (repeatable)"
    )
    group.addoption("--sb-report-json", default=None, metavar="PATH", help="write per-test clause results here")
    group.addoption(
        "--sb-clause", action="append", default=[], metavar="PATTERN",
        help="run only tests of these clauses: an id, a glob (SETTLE-LOCK-*) or an area name (repeatable)",
    )
    group.addoption(
        "--sb-trace", default=None, metavar="DIR",
        help="record every target a test makes: one JSON Lines trace per test in DIR (sbspec/trace-format.md)",
    )
    group.addoption(
        "--sb-certify", action="store_true", default=False,
        help="a certification run: only tests that name clauses run; the kit's own tests (naming none) are deselected",
    )


def clause_selection(config: pytest.Config) -> list[str]:
    """The --sb-clause patterns (commas split too); an unknown area or a pattern matching no
    clause is a usage error, so a typo never silently selects nothing."""
    patterns = clause_patterns(config.getoption("--sb-clause") or [])
    for pattern in patterns:
        if not any(selects(pattern, clause) for clause in catalog().clauses.values()):
            raise pytest.UsageError(f"--sb-clause {pattern!r} matches no clause of the catalog (ids, globs or areas: "
                                    f"{', '.join(sorted(catalog().areas))})")
    return patterns


def target_options(config: pytest.Config) -> dict[str, Any]:
    try:
        options = parse_options(config.getoption("--sb-option") or [])
    except ValueError as error:
        raise pytest.UsageError(f"--sb-option: {error}") from None
    connection_string = config.getoption("--sb-connection-string")
    if not connection_string and takes_exported_namespace(config.getoption("--sb-target"), options):
        # the exported namespace is a default for the one target that takes one, as certify has it:
        # `pytest --sb-target reference` in the shell README tells to export it must still run
        connection_string = os.environ.get(CONNECTION_STRING_ENV)
    if connection_string:
        options["connection_string"] = connection_string
    return options


class TargetSession:
    """One per pytest session: knows the target's name and capabilities, makes targets."""

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self.name = name
        self.options = options
        self._probe: Target | None = None
        self.trace = None  # the running test's TestTrace, with --sb-trace
        self.made = 0  # targets made since the running test started: did it exercise the target?

    @property
    def probe(self) -> Target:
        if self._probe is None:
            self._probe = make_target(self.name, **self.options)
        return self._probe

    @property
    def capabilities(self) -> frozenset[str]:
        return self.probe.capabilities

    def new(self) -> Target:
        target = make_target(self.name, **self.options)
        target.open()
        self.made += 1
        if self.trace is not None:
            target = self.trace.wrap(target)
        return target

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()


# What the plugin keeps for a run, in the config's stash (never attributes hung on the config)
SESSION = pytest.StashKey[TargetSession]()  # the target under test
META = pytest.StashKey[dict[str, TestMeta]]()  # node id -> what the test checks
RESULTS = pytest.StashKey[list[TestResult]]()  # every phase's outcome so far
SELECTION = pytest.StashKey[list[str]]()  # the --sb-clause patterns


def target_session(config: pytest.Config) -> TargetSession | None:
    """The run's ``TargetSession`` (None before ``pytest_configure`` made it)."""
    return config.stash.get(SESSION, None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clauses(*ids): the spec clauses this test checks")
    config.addinivalue_line("markers", "needs(*capabilities): target capabilities this test requires")
    config.addinivalue_line("markers", "local_service_bus(config): the Config.json (a path or a dict) of the local_service_bus fixture")
    try:
        session = config.stash[SESSION] = TargetSession(config.getoption("--sb-target"), target_options(config))
        session.capabilities  # fail early on an unknown target
    except ValueError as error:
        raise pytest.UsageError(mask(str(error))) from None
    if not os.environ.get("SBCONFORM_CERTIFY_CHILD") and getattr(config, "workerinput", None) is None \
            and not config.getoption("--collect-only"):
        # certify preflights once, in the parent; a plain pytest run does it here
        from .targets.preflight import PreflightError, check

        try:
            check(session.name, session.options)
        except PreflightError as error:
            raise pytest.UsageError(f"target {session.name!r}: {error}") from None
    config.stash[RESULTS] = []
    config.stash[META] = {}


def pytest_unconfigure(config: pytest.Config) -> None:
    session = target_session(config)
    if session is not None:
        session.close()


@pytest.hookimpl(tryfirst=True)
def pytest_bdd_apply_tag(tag: str, function: Any) -> Any:
    if CLAUSE_TAG.match(tag):
        return pytest.mark.clauses(tag)(function)
    if tag.startswith(NEEDS_PREFIX):
        return pytest.mark.needs(tag[len(NEEDS_PREFIX):])(function)
    return None  # other tags: pytest-bdd's default (a marker of that name)


def _marker_args(item: pytest.Item, name: str) -> list[str]:
    out: list[str] = []
    for mark in item.iter_markers(name):
        for arg in mark.args:
            out.extend(arg if isinstance(arg, (list, tuple)) else [arg])
    return out


def _scenario_of(item: pytest.Item) -> str | None:
    """'Feature: Scenario [example]  (features/x.feature:12)' for pytest-bdd items, else None."""
    try:
        from pytest_bdd.scenario import scenario_wrapper_template_registry as registry
    except ImportError:  # pragma: no cover - older or newer pytest-bdd
        registry = {}
    template = registry.get(getattr(item, "obj", None))
    if template is None:
        return item.name if "_pytest_bdd_example" in getattr(item, "fixturenames", ()) else None
    name = template.name
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        name += f" [{callspec.id}]"
    feature = template.feature
    try:
        where = str(Path(feature.filename).resolve().relative_to(Path(str(item.config.rootpath)).resolve()))
    except ValueError:
        where = feature.filename
    return f"{feature.name}: {name} ({where}:{template.line_number})"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    known = catalog().clauses
    metas = config.stash[META]
    problems = []
    for item in items:
        clauses = sorted(set(_marker_args(item, "clauses")))
        needs = sorted(set(_marker_args(item, "needs")))
        scenario = _scenario_of(item)
        is_scenario = scenario is not None
        for cid in clauses:
            if cid not in known:
                problems.append(f"{item.nodeid}: names unknown clause {cid}")
        for cap in needs:
            if cap not in catalog().capabilities:
                problems.append(f"{item.nodeid}: needs unknown capability {cap!r}")
        if is_scenario and not clauses:
            problems.append(f"{item.nodeid}: scenario names no clause (tag it like @SETTLE-LOCK-003)")
        # a clause's own capabilities are needed by every test of it
        for cid in clauses:
            if cid in known:
                needs = sorted(set(needs) | set(known[cid].needs))
        metas[item.nodeid] = TestMeta(
            title=scenario or item.nodeid,
            clauses=clauses,
            needs=needs,
            kind="scenario" if is_scenario else "test",
            # scenarios request ``sb_target`` from their steps, at run time; whether a test really
            # made a target is known once it ran (``TargetSession.made``), this is the guess before
            uses_target=is_scenario or "sb_target" in getattr(item, "fixturenames", ()),
        )
    if problems:
        raise pytest.UsageError("sbconform: tests do not trace to the catalog:\n  " + "\n  ".join(problems))
    patterns = clause_selection(config)
    config.stash[SELECTION] = patterns
    certifying = config.getoption("--sb-certify")
    if patterns or certifying:
        keep, drop = [], []
        for item in items:
            clauses = [known[c] for c in metas[item.nodeid]["clauses"] if c in known]
            if patterns:
                chosen = any(selects(p, clause) for clause in clauses for p in patterns)
            else:  # a certification run grades clauses: the kit's own tests (they name none) are not part of it
                chosen = bool(clauses)
            (keep if chosen else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    path = config.getoption("--sb-report-json")
    if path and getattr(config, "workerinput", None) is None:
        Path(str(path) + ".partial").unlink(missing_ok=True)
        for item in items:  # what each test checks, should the run be killed before it reports
            _append_partial(config, Collected(collected=item.nodeid, **metas[item.nodeid]))


def pytest_runtest_setup(item: pytest.Item) -> None:
    meta = item.config.stash[META].get(item.nodeid)
    if not meta:
        return
    sb = item.config.stash[SESSION]
    missing = [cap for cap in meta["needs"] if cap not in sb.capabilities]
    if missing:
        lacking = getattr(sb.probe, "lacking", {}) or {}
        # one capability's reason alone; several, each named (the names are already in the line)
        why = "; ".join(lacking[m] if len(missing) == 1 else f"{m}: {lacking[m]}" for m in missing if m in lacking)
        pytest.skip(f"target {sb.name!r} lacks capability {', '.join(repr(m) for m in missing)}" + (f" ({why})" if why else ""))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
    """With --sb-trace, the targets made during the test (setup to teardown) are recorded."""
    directory = item.config.getoption("--sb-trace")
    sb = target_session(item.config)
    if sb is not None:
        sb.made = 0
    _append_partial(item.config, {"started": item.nodeid})  # a test stopped past this point had begun
    if not directory or sb is None:
        return (yield)
    from .trace.recorder import TestTrace

    sb.trace = TestTrace(directory, item.nodeid, test=item.nodeid)
    try:
        return (yield)
    finally:
        sb.trace.close()
        sb.trace = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    report = yield
    meta = item.config.stash[META].get(item.nodeid)
    if meta is None:
        return report
    outcome = None
    if report.when == "call":
        outcome = "xfail" if hasattr(report, "wasxfail") and report.skipped else (
            "xpass" if hasattr(report, "wasxfail") and report.passed else report.outcome
        )
    elif report.failed:
        outcome = "failed"  # setup or teardown error
    elif report.skipped and report.when == "setup":
        outcome = "skipped"
    if outcome is not None:
        reason = ""
        if report.skipped:
            reason = getattr(report, "wasxfail", "") or _skip_reason(report)
        elif report.failed:
            reason = _failure_reason(report)
        result = make_result(item.nodeid, meta, report.when,
                             OUTCOMES[outcome],
                             mask(reason), report.duration)
        if report.when == "call":
            result["uses_target"] = item.config.stash[SESSION].made > 0
        item.config.stash[RESULTS].append(result)
        _append_partial(item.config, result)
    return report


def _append_partial(config: pytest.Config, result: TestResult | Collected | dict) -> None:
    """Each result also goes, as it happens, to ``<report-json>.partial`` (JSON Lines): if the run
    is killed (``certify --jobs`` stops a stuck shard) the results so far survive."""
    path = config.getoption("--sb-report-json")
    if not path or getattr(config, "workerinput", None) is not None:
        return
    partial = Path(str(path) + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("a", encoding="utf-8") as out:
        out.write(json.dumps(result, default=str) + "\n")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _failure_reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0][:500] if crash.message else "failed"
    return str(report.longrepr).strip().splitlines()[-1][:500] if report.longrepr else "failed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    path = config.getoption("--sb-report-json")
    if not path or getattr(config, "workerinput", None) is not None:
        return
    if config.option.collectonly:  # certify's collection step reads what each test checks from the .partial
        return
    sb = config.stash[SESSION]
    data = RunResults(
        target=sb.probe.describe(),
        finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        exitstatus=int(exitstatus),
        selection=config.stash.get(SELECTION, []),
        tests=config.stash[RESULTS],
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    Path(str(path) + ".partial").unlink(missing_ok=True)


# ------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def sb_session(pytestconfig: pytest.Config) -> TargetSession:
    """The target under test, as chosen with --sb-target."""
    return pytestconfig.stash[SESSION]


@pytest.fixture
def sb_target(sb_session: TargetSession) -> Iterator[Target]:
    """A fresh, open target for one test (its own namespace or its own entity names)."""
    target = sb_session.new()
    try:
        yield target
    finally:
        target.close()


@pytest.fixture
def local_service_bus(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``sbconform serve`` for one test of an application (``sbconform.local.LocalServiceBus``): its
    entities from ``@pytest.mark.local_service_bus(config=...)`` (a Config.json path, or a dict in
    its schema), else queue.1 and topic.1 with subscription.1; stopped after the test."""
    from .local import LocalServiceBus, LocalServiceBusError

    marker = request.node.get_closest_marker("local_service_bus")
    config = None if marker is None else marker.kwargs.get("config", marker.args[0] if marker.args else None)
    problem = None
    try:
        bus = LocalServiceBus(config=config).start()
    except (LocalServiceBusError, TypeError) as error:
        problem = f"local_service_bus: {error}"
    if problem is not None:  # one line, outside the handler: no chained traceback
        pytest.fail(problem, pytrace=False)
    try:
        yield bus
    finally:
        bus.stop()


__all__ = ["ServiceBusError", "TargetSession", "catalog"]
