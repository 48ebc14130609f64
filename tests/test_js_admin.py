"""The management REST API as the JavaScript ``ServiceBusAdministrationClient`` (``@azure/service-bus``)
parses it (``clients/js/admin2.test.mjs``; the basic operations are ``admin.test.mjs``, run by
``test_js_flows``): the error statuses and the codes the client makes of them (401, 404, 409, 400),
UserMetadata's limit (the client does not check it), runtime counts (a topic's scheduled messages are
not its subscriptions'), paging by maxPageSize and continuation token, forwarding and nested names,
an update that stops forwarding and disables sends. One serve, one node process. Skipped, as
``test_js_flows``, when node or its packages are missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from serve_support import connection_string
from test_js_flows import JS, _installed, _Serve


def test_javascript_administration_client(tmp_path: Path) -> None:
    node, _ = _installed()
    serve = _Serve(tmp_path)
    try:
        run = subprocess.run(
            [node, "--test", "--test-reporter=spec", "admin2.test.mjs"], cwd=JS, capture_output=True, text=True, timeout=300,
            env={**os.environ, "SB_CONNECTION_STRING": connection_string(serve.port),
                 "SB_ADMIN_CONNECTION_STRING": connection_string(serve.http_port)},
        )
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
        assert "fail 0" in run.stdout, run.stdout[-3000:]
        assert serve.process.poll() is None
    finally:
        serve.stop()
    assert not any("Traceback" in line for line in serve.output), "".join(serve.output)
