"""The wire as the JavaScript SDK (``@azure/service-bus``, rhea underneath) sees it through
``sbconform serve`` (``clients/js/wire2.test.mjs``): what a sender sent comes back exactly as sent
(every section of an annotated message, message-id and correlation-id types, body types,
application property types) and what the broker sets (sequence number, enqueued time, lock,
lock token as the delivery tag, delivery count, partition key, state) is set as Service Bus does.
Skipped, as ``test_js_flows``, when node or its packages are missing."""

from __future__ import annotations

import os
import subprocess

import pytest

from serve_support import Serve, connection_string
from test_js_flows import JS, _installed

QUEUES = ("w-sections", "w-ids", "w-bodies", "w-props", "w-broker", "w-peek")
CONFIG = {"UserConfig": {"Namespaces": [{"Name": "jswire", "Queues": [{"Name": name, "Properties": {}} for name in QUEUES]}]}}


def test_javascript_sdk_wire() -> None:
    node, _ = _installed()
    serve = Serve(CONFIG)
    try:
        run = subprocess.run([node, "--test", "--test-reporter=spec", "wire2.test.mjs"], cwd=JS, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "SB_CONNECTION_STRING": connection_string(serve.port)})
        assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
        assert "fail 0" in run.stdout, run.stdout[-3000:]
        assert serve.alive()
    finally:
        serve.stop()
    assert not any("Traceback" in line for line in serve.output), "".join(serve.output)
