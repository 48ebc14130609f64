"""Every settlement clause, through the real azure-servicebus SDK, against ``sbconform serve``.

Runs ``sbconform certify --target sdk --option serve=true --clause settlement --jobs N``:
each pytest shard starts its own ``sbconform serve`` on a free port, and every settlement
scenario runs once through the SDK target, in real time (5-second locks). About two
minutes. ``SBCONFORM_SDK_FULL=1`` certifies every area instead (partitioning too: slower).
Skipped inside a certification run (no recursion) and without the sdk extra.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")

from sbconform.certify import certify  # noqa: E402


@pytest.mark.skipif(bool(os.environ.get("SBCONFORM_CERTIFY_CHILD")), reason="inside a certification run")
def test_every_settlement_clause_passes_through_the_sdk(tmp_path) -> None:
    full = bool(os.environ.get("SBCONFORM_SDK_FULL"))
    code = certify(
        "sdk", tmp_path, options=["serve=true"], clauses=() if full else ["settlement"],
        jobs=int(os.environ.get("SBCONFORM_SDK_JOBS", "8")),
        shard_timeout=float(os.environ.get("SBCONFORM_SDK_SHARD_TIMEOUT", "240")),  # a hang fails, never stalls CI
    )
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    settlement = {cid: c for cid, c in report["clauses"].items() if c["area"] == "settlement"}
    not_passing = {cid: (c["status"], c["reason"]) for cid, c in settlement.items() if c["status"] != "pass"}
    assert not not_passing, f"settlement clauses not passing through the SDK: {not_passing}"
    assert code == 0, report["summary"]
    for clause in report["clauses"].values():  # every skip says why
        if clause["status"] == "skip" and clause.get("scenarios"):
            assert all(s["reason"] for s in clause["scenarios"] if s["outcome"] == "skip"), clause
