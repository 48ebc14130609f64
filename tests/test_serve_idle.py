"""``sbconform serve`` and deletion on idle (SETTLE-IDLE-001..004): the REST API lists and gets what the
model holds once time has acted, the server detaches the links of an entity deleted on idle with
``amqp:not-found`` and wakes at the deletion's instant, and the ATOM feed's times and counts are the
model's. Virtual time: the server's clock is moved forward (``WallClock.shift``, as the ``$sbconform``
node's advance-time does), never waited for."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from azure.core.exceptions import ResourceNotFoundError  # noqa: E402

from sbreference import MINUTE, Namespace, VirtualClock  # noqa: E402
from sbconform.server.admin_api import AdminApi  # noqa: E402
from sbconform.server.admin_http import AdminHttp  # noqa: E402
from sbconform.server.atom import entry_xml  # noqa: E402
from sbconform.targets.proton_client import ControlClient  # noqa: E402

from serve_support import ATTACH, DETACH, KEY, KEY_NAME, attach, condition_of, flow  # noqa: E402
from test_admin_http import admin, broker  # noqa: E402,F401 (fixtures: a server with its REST API, its administration client)
from test_serve_security import InProcess, authorized_sender  # noqa: E402

IDLE = 5 * MINUTE


class _Clock(VirtualClock):
    epoch_ms = 1_700_000_000_000


class _Server:
    """What ``AdminApi`` reads of a server: its namespace and clock (a virtual one here)."""

    def __init__(self) -> None:
        self.clock = _Clock()
        self.namespace = Namespace(clock=self.clock)

    def _mark_all_dirty(self) -> None:
        pass

    def entities_deleted(self, keys) -> None:
        pass


# ------------------------------------------------------------ 1. lists and gets
def test_lists_and_gets_apply_deletion_on_idle_first() -> None:
    """An entity past its idle deadline was still listed (the REST API read ``ns.entities``), and the
    list failed as a whole with 404 when describing it deleted it; now what is due is applied first."""
    server = _Server()
    api, ns = AdminApi(server), server.namespace
    ns.create_queue("kept")
    ns.create_queue("idle-q", auto_delete_on_idle=IDLE)
    ns.create_topic("t")
    ns.create_subscription("t", "idle-s", auto_delete_on_idle=IDLE)
    ns.create_subscription("t", "kept-s")
    server.clock.advance(IDLE + 1)
    assert [q["path"] for q in api.list("queue", 0, 100)] == ["kept"]
    assert api.describe("idle-q") is None
    assert [s["path"] for s in api.list("subscription", 0, 100, topic="t")] == ["t/Subscriptions/kept-s"]
    assert api.describe("t/Subscriptions/idle-s") is None
    assert api.describe("t")["info"]["subscription_count"] == 1


def test_the_administration_client_sees_an_idle_queue_gone(broker, admin) -> None:
    server, _ = broker
    admin.create_queue("rest-idle", auto_delete_on_idle=dt.timedelta(minutes=5))
    admin.create_queue("rest-kept")
    assert admin.get_queue("rest-idle").auto_delete_on_idle == dt.timedelta(minutes=5)
    server.call_soon(lambda: server.clock.shift(IDLE + 1000))  # the clock alone: no request applies it
    names = [q.name for q in admin.list_queues()]
    assert "rest-idle" not in names and "rest-kept" in names
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue("rest-idle")
    admin.delete_queue("rest-kept")


# ------------------------------------------------------------ 2. links and the timer
IDLE_CONFIG = {"Name": "sec", "Queues": [{"Name": "open", "Properties": {}}]}


def _detached(c, name: str, wait: float = 5.0) -> str | None:
    """The condition of the server's DETACH of the link ``name`` (by its handle in our ATTACH)."""
    def handle_of(frames):
        ours = [p for p in frames.of(ATTACH) if p[2].value[0] == name]
        return ours[0][2].value[1] if ours else None

    def found(frames):
        handle = handle_of(frames)
        return [p for p in frames.of(DETACH) if handle is not None and p[2].value[0] == handle]

    c.read(wait, until=lambda f: bool(found(f)))
    hits = found(c.frames)
    return condition_of(hits[0][2]) if hits else None


@pytest.fixture
def srv():
    server = InProcess(link_credit=20, open_timeout=1.0, idle_timeout=30.0)
    yield server
    server.stop()


def _receiver(c, name: str, handle: int, path: str, credit: int) -> None:
    c.send(attach(name, handle, path, False), *([flow(handle, credit)] if credit else []))
    c.read(5, until=lambda f: any(p[2].value[0] == name for p in f.of(ATTACH)))


def test_links_on_an_entity_deleted_on_idle_are_detached_not_found(srv: InProcess) -> None:
    """A sender, a receiver waiting with credit and one without: each DETACHed ``amqp:not-found`` once
    time deletes their queue (advance-time on the control node), as a deleted entity's links are; the
    links of another entity stay."""
    srv.on_loop(lambda: srv.server.namespace.create_queue("temp", auto_delete_on_idle=IDLE))
    c = authorized_sender(srv.port, "temp", handle=5)
    assert c.put_token("open", 10) == 200
    c.send(attach("other", 12, "open", True))
    _receiver(c, "waiting", 6, "temp", credit=5)
    _receiver(c, "no-credit", 7, "temp", credit=0)
    control = ControlClient("127.0.0.1", srv.port, KEY_NAME, KEY)
    try:
        control.call("advance-time", ms=IDLE + 1000)
    finally:
        control.close()
    assert _detached(c, "send-5") == "amqp:not-found"
    assert _detached(c, "waiting") == "amqp:not-found"
    assert _detached(c, "no-credit") == "amqp:not-found"
    assert _detached(c, "other", wait=0.3) is None
    c.close()


def test_a_subscription_deleted_on_idle_detaches_its_receivers_not_its_topics_senders(srv: InProcess) -> None:
    def make() -> None:
        ns = srv.server.namespace
        ns.create_topic("tt")
        ns.create_subscription("tt", "gone", auto_delete_on_idle=IDLE)
    srv.on_loop(make)
    c = authorized_sender(srv.port, "tt", handle=5)
    assert c.put_token("tt/Subscriptions/gone", 10) == 200
    _receiver(c, "sub-receiver", 6, "tt/Subscriptions/gone", credit=0)
    srv.on_loop(lambda: srv.server.clock.shift(IDLE + 1000))  # the clock alone: the server's timer acts
    assert _detached(c, "sub-receiver") == "amqp:not-found"
    assert _detached(c, "send-5", wait=0.3) is None
    c.close()


def test_an_entity_a_request_deleted_on_idle_has_its_links_detached_too(srv: InProcess) -> None:
    """A request on any entity applies what is due (the model's ``_resolve``) without naming what it deleted:
    the server still finds the links of the entity gone once its deadline has passed."""
    srv.on_loop(lambda: srv.server.namespace.create_queue("swept", auto_delete_on_idle=IDLE))
    c = authorized_sender(srv.port, "swept", handle=5)
    srv.on_loop(lambda: (srv.server.clock.shift(IDLE + 1000), srv.server.namespace.exists("open")))
    assert _detached(c, "send-5") == "amqp:not-found"
    c.close()


def test_an_entity_deleted_through_management_detaches_its_links_too(srv: InProcess) -> None:
    """Through the REST API or the $sbconform node, as on idle: a sender (only a receiver with credit
    was closed, when served again) is detached with ``amqp:not-found``."""
    from test_admin_http import raw

    srv.on_loop(lambda: (srv.server.namespace.create_queue("by-rest"), srv.server.namespace.create_queue("by-node")))
    c = authorized_sender(srv.port, "by-rest", handle=5)
    assert c.put_token("by-node", 10) == 200
    c.send(attach("node-sender", 12, "by-node", True))
    http = AdminHttp(srv.server, "127.0.0.1", 0)
    http.start()
    control = ControlClient("127.0.0.1", srv.port, KEY_NAME, KEY)
    try:
        assert raw(http, "DELETE", "/by-rest")[0] == 200
        assert _detached(c, "send-5") == "amqp:not-found"
        control.call("delete", path="by-node")
        assert _detached(c, "node-sender") == "amqp:not-found"
    finally:
        control.close()
        http.stop()
        c.close()


def test_the_timer_wakes_at_the_idle_deadline() -> None:
    """With nothing waiting and no connection, the loop slept until a request came: an idle entity
    was deleted only when something asked."""
    server = InProcess()
    try:
        server.on_loop(lambda: server.server.namespace.create_queue("sleepy", auto_delete_on_idle=IDLE))
        server.on_loop(lambda: server.server.clock.shift(IDLE - 300))
        timeout = server.on_loop(server.server._next_timer)
        assert timeout is not None and timeout <= 0.35, timeout
    finally:
        server.stop()


# ------------------------------------------------------------ 3. the ATOM feed's times and counts
def _element(xml: bytes, name: str) -> str:
    root = ET.fromstring(xml)
    return next(e.text for e in root.iter() if e.tag.rsplit("}", 1)[-1] == name)


def test_created_updated_accessed_and_subscription_count_are_the_models() -> None:
    server = _Server()
    api, ns = AdminApi(server), server.namespace
    server.clock.advance(1000)
    ns.create_topic("topic")
    ns.create_subscription("topic", "a")
    ns.create_subscription("topic", "b")
    ns.create_queue("q")
    fresh = entry_xml(api.describe("q"), "localhost")
    assert _element(fresh, "AccessedAt") == "0001-01-01T00:00:00Z"  # never sent to nor received from
    server.clock.advance(2500)
    conn = ns.connect()
    ns.send(conn, "q", ns_message())
    ns.send(conn, "topic", ns_message())
    ns.delete("topic/Subscriptions/b")
    queue = entry_xml(api.describe("q"), "localhost")
    assert _element(queue, "CreatedAt") == "2023-11-14T22:13:21Z"  # epoch + 1 s, trailing zeros trimmed
    assert _element(queue, "AccessedAt") == "2023-11-14T22:13:23.5Z"  # the send, 2.5 s later
    topic = entry_xml(api.describe("topic"), "localhost")
    assert _element(topic, "AccessedAt") == "2023-11-14T22:13:23.5Z"
    assert _element(topic, "SubscriptionCount") == "1"
    ns.update("q", max_delivery_count=7)
    assert _element(entry_xml(api.describe("q"), "localhost"), "UpdatedAt") == "2023-11-14T22:13:23.5Z"


def ns_message():
    from sbreference import Message

    return Message(body=b"x")


def test_the_administration_client_reads_the_models_times_and_counts(broker, admin) -> None:
    admin.create_topic("rest-times")
    admin.create_subscription("rest-times", "one")
    admin.create_queue("rest-fresh")
    fresh = admin.get_queue_runtime_properties("rest-fresh")
    assert fresh.accessed_at_utc.year == 1  # never accessed: DateTime.MinValue
    assert fresh.created_at_utc == fresh.updated_at_utc
    topic = admin.get_topic_runtime_properties("rest-times")
    assert topic.subscription_count == 1 and topic.accessed_at_utc.year == 1
    admin.delete_topic("rest-times")
    admin.delete_queue("rest-fresh")


# ------------------------------------------------------------ 4. Config.json
def test_config_json_accepts_auto_delete_on_idle_without_applying_it() -> None:
    """The emulator's Config.json schema has no AutoDeleteOnIdle: accepted (as before) and not applied."""
    from sbconform.server import parse_config
    from sbreference import TIMESPAN_MAX

    config = parse_config({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": "q", "Properties": {"AutoDeleteOnIdle": "PT5M"}}]}]}})
    assert config.build().describe("q").auto_delete_on_idle == TIMESPAN_MAX


def test_an_entity_made_temporary_over_the_control_node_is_deleted_when_the_clock_moves_on(srv: InProcess) -> None:
    """The server keeps the model's next idle deadline (asking costs a look at every temporary entity): one
    made after it, nearer, is still deleted when advance-time passes it."""
    srv.on_loop(lambda: srv.server.namespace.create_queue("far", auto_delete_on_idle=24 * 60 * MINUTE))
    control = ControlClient("127.0.0.1", srv.port, KEY_NAME, KEY)
    try:
        c = authorized_sender(srv.port, "open", handle=5)  # (a connection: the loop turns once a second)
        control.call("create-queue", name="near", properties={"auto_delete_on_idle": IDLE})
        control.call("advance-time", ms=IDLE + 1000)
        assert not srv.on_loop(lambda: "near" in srv.server.namespace.entities)
        c.close()
    finally:
        control.close()
