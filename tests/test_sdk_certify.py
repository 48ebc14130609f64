"""Settlement and partitioning, through the real azure-servicebus SDK, against ``sbconform serve``.

Runs ``sbconform certify --target sdk --option serve=true --clause settlement --clause
partitioning --jobs N``: each pytest shard starts its own ``sbconform serve`` on a free port,
and every scenario of those areas runs once through the SDK target, in real time (5-second
locks). About two minutes. ``SBCONFORM_SDK_FULL=1`` certifies every area instead.
Skipped without the sdk extra.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")

from sbconform.certify import certify  # noqa: E402


def test_settlement_partitioning_transactions_and_rules_through_the_sdk(tmp_path) -> None:
    full = bool(os.environ.get("SBCONFORM_SDK_FULL"))
    code = certify(
        "sdk", tmp_path, options=["serve=true", "time=virtual"],
        clauses=() if full else ["settlement", "partitioning", "transactions", "rules"],
        jobs=int(os.environ.get("SBCONFORM_SDK_JOBS", "12")),
        shard_timeout=float(os.environ.get("SBCONFORM_SDK_SHARD_TIMEOUT", "240")),  # a hang fails, never stalls CI
    )
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    clauses = report["clauses"]
    settlement = {cid: c for cid, c in clauses.items() if c["area"] == "settlement"}
    # Every settlement clause passes, except those the catalog declares model-level (they need
    # model-internals: a Basic or non-partitioned Premium namespace no target offers yet).
    from sbspec import load_catalog

    model_level = {cid for cid, c in load_catalog().clauses.items() if "model-internals" in c.needs}
    not_passing = {cid: (c["status"], c["reason"]) for cid, c in settlement.items()
                   if c["status"] != "pass" and not (cid in model_level and c["status"] == "skip")}
    assert not not_passing, f"settlement clauses not passing through the SDK: {not_passing}"
    # partitioning: every scenario the SDK can express passes; the rest say what the SDK lacks
    partitioning = {cid: c for cid, c in clauses.items() if c["area"] == "partitioning"}
    passed = [cid for cid, c in partitioning.items() if c["status"] == "pass"]
    unexplained = {cid: (c["status"], c["reason"]) for cid, c in partitioning.items()
                   if c["status"] != "pass" and not (c["status"] == "skip" and ("lacks capability" in c["reason"] or "model-level" in c["reason"]))}
    assert not unexplained, f"partitioning clauses neither passing nor skipped for a stated lack: {unexplained}"
    assert len(passed) >= 32, passed
    # transactions (the coordinator in serve, a proton transactional client; a Basic namespace is a
    # second sbconform serve for TXN-TIER-001) and rules: every clause passes
    for area in ("transactions", "rules"):
        not_passing = {cid: (c["status"], c["reason"]) for cid, c in clauses.items() if c["area"] == area and c["status"] != "pass"}
        assert not not_passing, f"{area} clauses not passing through the SDK: {not_passing}"
    assert code == 0, report["summary"]
    for clause in clauses.values():  # every skip says why
        if clause["status"] == "skip" and clause.get("scenarios"):
            assert all(s["reason"] for s in clause["scenarios"] if s["outcome"] == "skip"), clause
