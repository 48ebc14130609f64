"""The paired-namespace area through the real azure-servicebus SDK, against two ``sbconform
serve`` endpoints (the primary, and a secondary the SDK target starts), in real time.

``make test`` certifies the area in virtual time (``tests/test_sdk_certify.py``, the default with
serve=true); this opt-in run shows the paired client on timers that run in seconds. Runs
``sbconform certify --target sdk --option serve=true --option time=real --clause paired --jobs N --trace DIR``:
every paired clause passes except those whose every scenario waits minutes or days (the
15-minute syphon poll, 30-day figures), skipped for the lack of virtual time; the traces recorded
meanwhile replay without a violation (pieces the checker cannot decide, sends without a sequence
number, which the SDK does not report, are "unknown", not violations). About three minutes with 8
jobs; ``SBCONFORM_SDK_JOBS`` sets the number of processes. Skipped without the sdk extra.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
if not os.environ.get("SBCONFORM_HEAVY"):  # about 4 minutes of real-time pings and syphon polls
    pytest.skip("the paired area through the SDK runs with SBCONFORM_HEAVY=1 (about 4 minutes in real time)",
                allow_module_level=True)

from sbconform.certify import certify  # noqa: E402

#: paired clauses whose every scenario needs minutes or days of virtual time
NEED_VIRTUAL_TIME = {"PAIR-SYPH-004", "PAIR-SYPH-005"}


def test_the_paired_area_through_the_sdk_against_two_endpoints(tmp_path) -> None:
    traces = tmp_path / "traces"
    code = certify(
        "sdk", tmp_path / "report", options=["serve=true", "time=real"], clauses=["paired"],
        jobs=int(os.environ.get("SBCONFORM_SDK_JOBS", "8")),
        shard_timeout=float(os.environ.get("SBCONFORM_SDK_SHARD_TIMEOUT", "300")),
        trace_dir=traces,
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    paired = {cid: c for cid, c in report["clauses"].items() if c["area"] == "paired"}
    not_passing = {cid: (c["status"], c["reason"]) for cid, c in paired.items() if c["status"] != "pass" and cid not in NEED_VIRTUAL_TIME}
    assert not not_passing, f"paired clauses not passing through the SDK: {not_passing}"
    for cid in NEED_VIRTUAL_TIME:
        assert paired[cid]["status"] == "skip" and "virtual-time" in paired[cid]["reason"], paired[cid]
    assert code == 0, report["summary"]

    from sbconform.trace.replay import replay_local

    files = sorted(traces.glob("*.jsonl"))
    assert files, "no trace was recorded"
    statuses: dict[str, int] = {}
    for path in files:  # one trace per test: each replayed on its own
        for piece in replay_local([str(path)]):
            statuses[piece["status"]] = statuses.get(piece["status"], 0) + 1
            assert piece["status"] in ("valid", "unknown"), (path.name, piece)
    assert statuses.get("valid", 0) > 0, statuses
