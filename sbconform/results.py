"""The per-test result record, defined once: written by the pytest plugin, merged and
completed by ``certify`` (shards, timeouts, interruptions), read by ``report.build_report``.

A run writes ``results.json`` (:class:`RunResults`) at its end and, as it goes,
``results.json.partial`` (JSON Lines): first one :class:`Collected` line per selected test
(what it checks, should the run die before it reports), then one :class:`TestResult` line
per test phase that produced an outcome.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, TypedDict

Outcome = Literal["pass", "fail", "skip", "xfail", "xpass"]


class TestMeta(TypedDict):
    """What a collected test checks (from its markers, before it runs)."""

    title: str  # "Feature: Scenario (features/x.feature:12)" or the node id
    clauses: list[str]
    needs: list[str]
    kind: Literal["scenario", "test"]
    uses_target: bool  # did (or, before it ran: will) it exercise the target under test?


class TestResult(TestMeta):
    """One test's outcome in one phase (setup, call or teardown)."""

    nodeid: str
    name: str
    phase: str
    outcome: Outcome
    reason: str
    duration: float


class Collected(TestMeta):
    collected: str  # the node id


class RunResults(TypedDict):
    target: dict[str, Any]  # Target.describe()
    finished: str | None
    exitstatus: int
    selection: list[str]  # the --clause patterns
    tests: list[TestResult]


def make_result(nodeid: str, meta: TestMeta, phase: str, outcome: Outcome, reason: str = "",
                duration: float = 0.0) -> TestResult:
    """The one constructor of a :class:`TestResult`."""
    return TestResult(nodeid=nodeid, name=meta["title"], phase=phase, outcome=outcome, reason=reason,
                      duration=round(duration, 4), title=meta["title"], clauses=list(meta["clauses"]),
                      needs=list(meta["needs"]), kind=meta["kind"], uses_target=meta["uses_target"])


def default_meta(nodeid: str) -> TestMeta:
    return TestMeta(title=nodeid, clauses=[], needs=[], kind="test", uses_target=True)


def _records(path: Path) -> Iterator[dict]:
    """The records of a ``.partial`` file (JSON Lines; a line cut by a killed writer is ignored)."""
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def read_partial(path: Path) -> tuple[dict[str, TestMeta], list[TestResult]]:
    """The collected tests and the results so far of a ``.partial`` file."""
    metas: dict[str, TestMeta] = {}
    tests: list[TestResult] = []
    for record in _records(path):
        if "collected" in record:
            nodeid = record.pop("collected")
            metas[nodeid] = record
        elif "nodeid" in record:
            tests.append(record)
    return metas, tests


def read_started(path: Path) -> set[str]:
    """The tests a ``.partial`` file says were started."""
    return {record["started"] for record in _records(path) if "started" in record}


def empty_run(tests: Iterable[TestResult] = (), target: dict[str, Any] | None = None) -> RunResults:
    return RunResults(target=target or {}, finished=None, exitstatus=1, selection=[], tests=list(tests))


def merge_runs(parts: list[RunResults]) -> RunResults:
    """The results of one certification's test processes (``--jobs``) as one run."""
    merged = RunResults(target={}, finished=None, exitstatus=0, selection=[], tests=[])
    for part in parts:
        merged["tests"] += part["tests"]
        merged["target"] = merged["target"] or part.get("target") or {}
        merged["selection"] = merged["selection"] or part.get("selection") or []
        merged["finished"] = part.get("finished") or merged["finished"]
        merged["exitstatus"] = max(merged["exitstatus"], part.get("exitstatus", 0))
    return merged
