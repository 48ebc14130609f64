"""Subscription rules through the real azure-servicebus SDK against ``sbconform serve``.

Runs ``sbconform certify --target sdk --option serve=true --clause rules --jobs N`` (N from
``SBCONFORM_SDK_JOBS``, default 4): every rules scenario runs once through the SDK target, whose
rule operations travel as com.microsoft:add-rule / remove-rule / enumerate-rules on the
subscription's $management node. About a minute. Skipped without the sdk extra.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")

from sbconform.certify import certify  # noqa: E402


def test_rules_through_the_sdk(tmp_path) -> None:
    code = certify(
        "sdk", tmp_path, options=["serve=true"], clauses=["rules"],
        jobs=int(os.environ.get("SBCONFORM_SDK_JOBS", "4")),
        shard_timeout=float(os.environ.get("SBCONFORM_SDK_SHARD_TIMEOUT", "240")),
    )
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    rules = {cid: c for cid, c in report["clauses"].items() if c["area"] == "rules"}
    assert len(rules) >= 30
    not_passing = {cid: (c["status"], c["reason"]) for cid, c in rules.items() if c["status"] != "pass"}
    assert not not_passing, f"rules clauses not passing through the SDK: {not_passing}"
    assert code == 0, report["summary"]
