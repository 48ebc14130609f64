"""The JavaScript SDK (``@azure/service-bus`` from npm, rhea underneath) through the recording
proxy against ``sbconform serve``: its recording replays valid; against a broker that keeps
completed messages, replay names SETTLE-COMP-001. ``clients/js-proxy/flow.mjs`` is the flow.
Skipped (with the reason) when node or npm is missing; ``npm ci`` installs the locked
package on first use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("proton")

from sbconform.proxy.run import ProxyThread  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from proxy_support import UPSTREAM_KEY, UPSTREAM_KEY_NAME, connection_string, served  # noqa: E402
from test_proxy import CompleteIgnored, events_of, replay  # noqa: E402

JS = Path(__file__).resolve().parents[1] / "clients" / "js-proxy"


def _unavailable(why: str) -> None:
    """Skip for want of node or its packages; fail instead where CI said they are there
    (``SBCONFORM_REQUIRE_JS``, set by .ci/run when node and npm are installed)."""
    if os.environ.get("SBCONFORM_REQUIRE_JS"):
        pytest.fail(f"{why} (SBCONFORM_REQUIRE_JS is set: the JavaScript suites must run)")
    pytest.skip(why)


def _node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _unavailable("node and npm are needed for the JavaScript SDK's flow (apt-get install nodejs npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        _unavailable(f"node {version} is too old for @azure/service-bus (18 or later)")
    if not (JS / "node_modules" / "@azure" / "service-bus").is_dir():
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            _unavailable(f"npm ci could not install @azure/service-bus (no registry?): {done.stderr.strip()[-300:]}")
    return node


def _run(tmp_path: Path, mode: str, namespace_class=None) -> tuple[dict, Path, ProxyThread]:
    node = _node()
    with served(namespace_class) as server:
        proxy = ProxyThread(connection_string(server.port, UPSTREAM_KEY_NAME, UPSTREAM_KEY), tmp_path / "trace")
        port = proxy.start()
        try:
            done = subprocess.run([node, "flow.mjs", mode], cwd=JS, capture_output=True, text=True, timeout=180,
                                  env={**os.environ, "SB_CONNECTION_STRING": connection_string(port)})
        finally:
            proxy.stop()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), tmp_path / "trace", proxy


def test_javascript_sdk_flow_through_the_proxy_replays_valid(tmp_path):
    seen, out, proxy = _run(tmp_path, "everyday")
    assert seen["first"] == ["j1", "j2", "j3", "j4", "j5"]
    assert seen["again"] == [["j2", 1]] and seen["deferred"] == ["j3"] and seen["dead"] == [["j4", "bad"]]
    assert seen["stage"] == ["retried"]  # abandoned with a property to modify (SETTLE-MOD-001), relayed unchanged
    assert seen["session"] == ["js1", "js2"] and seen["state"] == "state-1"
    events = events_of(out)
    ops = {(e["op"], e["phase"]) for e in events}
    for expected in [("send", "ok"), ("receive", "ok"), ("complete", "ok"), ("abandon", "ok"), ("defer", "ok"),
                     ("dead-letter", "ok"), ("renew-lock", "ok"), ("receive-deferred", "ok"), ("accept-session", "ok"),
                     ("set-session-state", "ok"), ("get-session-state", "ok"), ("renew-session-lock", "ok")]:
        assert expected in ops, expected
    assert proxy.proxy.stats.interpreter_errors == 0, proxy.proxy.stats.errors
    abandons = [e for e in events if e["op"] == "abandon" and e["phase"] == "invoke"]
    assert any((json.loads(e["args"]) if isinstance(e.get("args"), str) else e.get("args") or {}).get("properties") == {"stage": "retried"}
               for e in abandons), abandons  # recorded with its properties to modify
    result = replay(out)
    assert result["summary"]["violations"] == 0 and result["summary"]["unknown"] == 0, result["results"]


def test_javascript_sdk_against_a_broker_keeping_completed_messages_is_named_by_replay(tmp_path):
    seen, out, _ = _run(tmp_path, "redeliver", CompleteIgnored)
    assert seen["again"] == ["js-done-once"]
    bad = [r for r in replay(out)["results"] if r["status"] == "violation"]
    assert [(r["piece"], r["clause"], r["message_id"]) for r in bad] == [("short", "SETTLE-COMP-001", "js-done-once")]
