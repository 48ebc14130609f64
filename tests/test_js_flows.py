"""The JavaScript SDK (``@azure/service-bus`` from npm, rhea underneath) against ``sbconform serve``.

``clients/js/flows.test.mjs`` runs with Node's own test runner (``admin.test.mjs``: the management
REST API through the JavaScript ``ServiceBusAdministrationClient``): send, batch, schedule and cancel,
both receive modes, every settlement, deferral, renew and auto lock renewal, peek, the dead-letter
queue, sessions and their state, topics, duplicate detection, errors. Skipped (with the reason)
when node or npm is missing; ``npm ci`` installs the locked packages on first use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sbconform.processes import stop_process
from serve_support import connection_string

JS = Path(__file__).resolve().parents[1] / "clients" / "js"

QUEUES = {
    "js-send": {}, "js-batch": {}, "js-schedule": {}, "js-rad": {}, "js-settle": {}, "js-defer": {}, "js-modify": {},
    "js-renew": {"LockDuration": "PT5S"}, "js-sessions": {"RequiresSession": True},
    "js-empty-sessions": {"RequiresSession": True}, "js-dup": {"RequiresDuplicateDetection": True}, "js-errors": {},
}
CONFIG = {"UserConfig": {"Namespaces": [{
    "Name": "js",
    "Queues": [{"Name": name, "Properties": props} for name, props in QUEUES.items()],
    "Topics": [{"Name": "js-topic", "Properties": {}, "Subscriptions": [{"Name": "s1", "Properties": {}}, {"Name": "s2", "Properties": {}}]}],
}]}}


def _unavailable(why: str) -> None:
    """Skip for want of node or its packages; fail instead where CI said they are there
    (``SBCONFORM_REQUIRE_JS``, set by .ci/run when node and npm are installed)."""
    if os.environ.get("SBCONFORM_REQUIRE_JS"):
        pytest.fail(f"{why} (SBCONFORM_REQUIRE_JS is set: the JavaScript suites must run)")
    pytest.skip(why)


def _node() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _unavailable("node and npm are needed for the JavaScript SDK's flows (apt-get install nodejs npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        _unavailable(f"node {version} is too old for @azure/service-bus and node --test (18 or later)")
    return node, npm


class _Serve:
    """``sbconform serve --port 0 --config <CONFIG>``: the AMQP port and the management API's."""

    def __init__(self, tmp: Path) -> None:
        config = tmp / "Config.json"
        config.write_text(json.dumps(CONFIG), encoding="utf-8")
        self.process = subprocess.Popen([sys.executable, "-m", "sbconform.cli", "serve", "--port", "0", "--config", str(config)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = self.process.stdout.readline()
        found = re.search(r"listening on [^:]+:(\d+).*management API on http://[^:]+:(\d+)", first)
        assert found, first
        self.port, self.http_port = int(found[1]), int(found[2])
        self.process.stdout.readline()
        self.output: list[str] = []
        threading.Thread(target=lambda: self.output.extend(self.process.stdout), daemon=True).start()

    def stop(self) -> None:
        stop_process(self.process)


def _installed() -> tuple[str, str]:
    """node and npm, clients/js's packages installed once: under a lock, since `make test`'s two
    processes (and another run on this machine) may both get here first."""
    import fcntl
    import tempfile

    node, npm = _node()
    with open(Path(tempfile.gettempdir()) / "sbconform-tests-clients-js.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (JS / "node_modules" / "@azure" / "service-bus").is_dir():
            installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True, timeout=600)
            if installed.returncode != 0:
                _unavailable(f"npm ci could not install @azure/service-bus (no registry?): {installed.stderr.strip()[-300:]}")
    return node, npm


# admin2.test.mjs: the management REST API as the JavaScript ServiceBusAdministrationClient parses it:
# error statuses and the codes the client makes of them (401, 404, 409, 400), UserMetadata's limit,
# runtime counts, paging by maxPageSize and continuation token, forwarding, nested names, an update that
# stops forwarding and disables sends
@pytest.mark.parametrize("suite", ["flows.test.mjs", "admin.test.mjs", "admin2.test.mjs"])
def test_javascript_sdk(suite: str, tmp_path: Path) -> None:
    node, _ = _installed()
    serve = _Serve(tmp_path)
    try:
        run = subprocess.run(
            [node, "--test", "--test-reporter=spec", suite], cwd=JS, capture_output=True, text=True, timeout=600,
            env={**os.environ, "SB_CONNECTION_STRING": connection_string(serve.port),
                 "SB_ADMIN_CONNECTION_STRING": connection_string(serve.http_port)},
        )
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
        assert "fail 0" in run.stdout, run.stdout[-3000:]
        assert serve.process.poll() is None
    finally:
        serve.stop()
    assert not any("Traceback" in line for line in serve.output), "".join(serve.output)
