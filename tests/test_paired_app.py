"""The README's paired-namespace example, run as written against two `sbconform serve`
endpoints: the primary queue is taken down and brought back while it sends, and every message
arrives exactly once at the primary queue (issue 17)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("azure.servicebus")

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- paired-example -->\s*```python\n(.*?)```\s*<!-- /paired-example -->", text, re.S)
    assert found, "README.md has no paired-example block"
    return found[1]


@pytest.fixture
def endpoints():
    from sbconform.targets.sdk import ServeProcess, SdkTarget

    servers = [ServeProcess(), ServeProcess()]
    try:
        admin = SdkTarget(connection_string=servers[0].connection_string, control="amqp")
        admin.open()
        admin.create_queue_at("orders")
        admin.created.clear()  # the application's queue stays when this admin connection closes
        admin.close()
        yield servers[0].connection_string, servers[1].connection_string
    finally:
        for server in servers:
            server.stop()


def test_the_readme_example_sends_through_an_outage_and_every_message_arrives_once(endpoints, monkeypatch) -> None:
    primary, secondary = endpoints
    monkeypatch.setenv("PRIMARY_CONNECTION_STRING", primary)
    monkeypatch.setenv("SECONDARY_CONNECTION_STRING", secondary)
    out = io.StringIO()
    namespace: dict = {"__name__": "readme_example"}
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), "README.md:paired-example", "exec"), namespace)  # noqa: S102
    went, received = namespace["went"], namespace["received"]
    # orders 3..5 went to a backlog queue in the secondary namespace, the others to the primary
    assert [w == "orders" for w in went] == [True] * 3 + [False] * 3 + [True] * 3, went
    assert all(re.fullmatch(r"localhost/x-servicebus-transfer/[01]", w) for w in went[3:6]), went
    # exactly once each, at the destination
    assert sorted(received) == [f"order-{i}" for i in range(9)], received


def test_options_have_the_seeds_defaults() -> None:
    import datetime as dt

    from sbconform.paired import SendAvailabilityPairedNamespaceOptions

    o = SendAvailabilityPairedNamespaceOptions()
    assert (o.backlog_queue_count, o.failover_interval, o.ping_primary_interval, o.enable_syphon) == (
        10, dt.timedelta(minutes=1), dt.timedelta(minutes=1), False)
    assert o.model().failover_interval == 60_000
