"""The JavaScript SDK (``@azure/service-bus`` from npm, rhea underneath) against ``sbconform serve``.

``clients/js/flows.test.mjs`` runs with Node's own test runner: send, batch, schedule and cancel,
both receive modes, every settlement, deferral, renew and auto lock renewal, peek, the dead-letter
queue, sessions and their state, topics, duplicate detection, errors. Skipped (with the reason)
when node or npm is missing; ``npm ci`` installs the locked packages on first use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from serve_support import Serve

JS = Path(__file__).resolve().parents[1] / "clients" / "js"

QUEUES = {
    "js-send": {}, "js-batch": {}, "js-schedule": {}, "js-rad": {}, "js-settle": {}, "js-defer": {},
    "js-renew": {"LockDuration": "PT2S"}, "js-sessions": {"RequiresSession": True},
    "js-empty-sessions": {"RequiresSession": True}, "js-dup": {"RequiresDuplicateDetection": True}, "js-errors": {},
}
CONFIG = {"UserConfig": {"Namespaces": [{
    "Name": "js",
    "Queues": [{"Name": name, "Properties": props} for name, props in QUEUES.items()],
    "Topics": [{"Name": "js-topic", "Properties": {}, "Subscriptions": [{"Name": "s1", "Properties": {}}, {"Name": "s2", "Properties": {}}]}],
}]}}


def _node() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed for the JavaScript SDK's flows (apt-get install nodejs npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"node {version} is too old for @azure/service-bus and node --test (18 or later)")
    return node, npm


def test_javascript_sdk_flows() -> None:
    node, npm = _node()
    if not (JS / "node_modules" / "@azure" / "service-bus").is_dir():
        installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True, timeout=600)
        if installed.returncode != 0:
            pytest.skip(f"npm ci could not install @azure/service-bus (no registry?): {installed.stderr.strip()[-300:]}")
    serve = Serve(CONFIG)
    try:
        run = subprocess.run(
            [node, "--test", "--test-reporter=spec", "flows.test.mjs"], cwd=JS, capture_output=True, text=True, timeout=600,
            env={**os.environ, "SB_CONNECTION_STRING": serve.connection_string},
        )
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
        assert "fail 0" in run.stdout, run.stdout[-3000:]
        assert serve.alive()
    finally:
        serve.stop()
    assert not any("Traceback" in line for line in serve.output), "".join(serve.output)
