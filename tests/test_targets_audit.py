"""Audit of the target adapters (sbconform/targets/*): what a target reports must be what the broker
said. Each test names the false verdict it guards against."""

from __future__ import annotations

import logging
import uuid

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")

from sbreference import ErrorCode, ServiceBusError  # noqa: E402
from sbreference.clock import MINUTE, SECOND, TIMESPAN_MAX  # noqa: E402

LOG = logging.getLogger("test_targets_audit")


def _sdk_error(amqp_error):
    """The exception the SDK raises for an AMQP error (its own translation, pyamqp transport)."""
    from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

    return PyamqpTransport.create_servicebus_exception(LOG, amqp_error)


@pytest.mark.parametrize("condition", [b"amqp:internal-error", b"amqp:unknown-error"])
def test_a_connection_error_the_sdk_raises_is_a_lost_connection_whatever_its_condition(condition) -> None:
    """A connection closed with a condition the codec does not know (Azure closes with
    amqp:internal-error) is, for the SDK, a ServiceBusConnectionError it retries; the target
    called it an invalid operation (not transient), a false verdict on any scenario that
    tells a connection loss from a refusal."""
    from azure.servicebus._pyamqp.error import AMQPConnectionError
    from azure.servicebus.exceptions import ServiceBusConnectionError

    from sbconform.targets.sdk_support import translate

    error = _sdk_error(AMQPConnectionError(condition, description="the service was unable to process the request"))
    assert isinstance(error, ServiceBusConnectionError)
    out = translate(error)
    assert out.code is ErrorCode.CONNECTION_LOST and out.transient is True
    assert out.condition == condition.decode()


def test_an_unknown_condition_the_sdk_retries_is_transient_and_one_it_does_not_is_a_refusal() -> None:
    from azure.servicebus._pyamqp.error import AMQPLinkError

    from sbconform.targets.sdk_support import translate

    internal = translate(_sdk_error(AMQPLinkError(b"amqp:internal-error", description="retry")))
    assert internal.code is ErrorCode.CONNECTION_LOST and internal.transient is True
    refused = translate(_sdk_error(AMQPLinkError(b"com.microsoft:precondition-failed", description="no")))
    assert refused.code is ErrorCode.INVALID_OPERATION and refused.transient is False
    # the codec's own conditions keep their codes
    assert translate(_sdk_error(AMQPLinkError(b"amqp:not-allowed", description="no"))).code is ErrorCode.INVALID_OPERATION
    assert translate(_sdk_error(AMQPLinkError(b"com.microsoft:server-busy", description="busy"))).code is ErrorCode.SERVER_BUSY


class _HttpResponseError(Exception):
    """Named as azure.core's (translation goes by class name), with its status code."""

    def __init__(self, status: int) -> None:
        super().__init__(f"Operation returned an invalid status code {status}")
        self.status_code = status


_HttpResponseError.__name__ = "HttpResponseError"


@pytest.mark.parametrize("status", [429, 500, 502, 504])
def test_a_throttled_or_failing_management_call_is_transient_not_an_argument_error(status) -> None:
    """Azure's management REST API answers 429 when throttled and 5xx when it fails: both ask for a
    retry. The admin provisioner called them argument errors (any HttpResponseError)."""
    from sbconform.targets.azure_admin import _translate

    out = _translate(_HttpResponseError(status))
    assert out.code is ErrorCode.SERVER_BUSY and out.transient is True
    assert _translate(_HttpResponseError(400)).code is ErrorCode.ARGUMENT_ERROR


# ------------------------------------------------ control=admin against sbconform serve's REST API
@pytest.fixture(scope="module")
def admin():
    """The admin provisioner (what a real Azure namespace gets: control=admin) with the SDK's
    ServiceBusAdministrationClient against sbconform serve's management REST API."""
    from sbconform.targets.sdk import SdkTarget, parse_connection_string
    from sbconform.targets.serve_process import shared_server

    server = shared_server()
    provisioner = SdkTarget(serve=True)._rest_admin(parse_connection_string(server.connection_string), server.http_port)
    yield provisioner
    provisioner.close()


def _name() -> str:
    return "audit-" + uuid.uuid4().hex[:8]


def test_an_update_back_to_never_reaches_the_entity(admin) -> None:
    """``update`` with a duration of "never" (TIMESPAN_MAX) was left out of the request, as on a
    create where "never" is Azure's default: the entity kept its finite TTL and auto-delete."""
    name = _name()
    admin.call("create-queue", name=name, properties={"default_message_time_to_live": 5 * SECOND, "auto_delete_on_idle": 10 * MINUTE})
    admin.call("update", path=name, properties={"default_message_time_to_live": TIMESPAN_MAX, "auto_delete_on_idle": TIMESPAN_MAX})
    described = admin.call("describe", path=name)
    assert described["default_message_time_to_live"] == TIMESPAN_MAX
    assert described["auto_delete_on_idle"] == TIMESPAN_MAX
    admin.call("delete", path=name)


def test_forwarding_is_described_as_the_path_it_was_asked_with(admin) -> None:
    """The administration client sends ForwardTo as a full address (sb://<namespace>/<path>) and
    reads it back so: described through control=admin, forward_to was 'sb://host/dest' where the
    model (and the scenario) has 'dest'."""
    dest, source = _name(), _name()
    admin.call("create-queue", name=dest, properties={})
    admin.call("create-queue", name=source, properties={"forward_to": dest, "forward_dead_lettered_messages_to": dest})
    described = admin.call("describe", path=source)
    assert described["forward_to"] == dest
    assert described["forward_dead_lettered_messages_to"] == dest
    admin.call("update", path=source, properties={"lock_duration": 5 * SECOND})  # the rest is sent back unchanged
    assert admin.call("describe", path=source)["forward_to"] == dest
    for path in (source, dest):
        admin.call("delete", path=path)


def test_a_topic_this_provisioner_did_not_create_can_be_described_and_deleted(admin) -> None:
    """The provisioner tells a queue from a topic by asking for a queue first; for a topic the SDK's
    get_queue fails with AttributeError, not ResourceNotFoundError, so a topic created elsewhere
    (another target, the control node, a previous run's leftover) could be neither described nor
    deleted: a connection-lost error."""
    from sbconform.targets.azure_admin import AdminProvisioner

    name = _name()
    admin.call("create-topic", name=name, properties={"max_size_in_megabytes": 2048})
    other = AdminProvisioner("", client=admin.client)  # knows nothing of what `admin` made
    assert other.call("describe", path=name)["max_size_in_megabytes"] == 2048
    other.call("delete", path=name)
    with pytest.raises(ServiceBusError) as gone:
        other.call("describe", path=name)
    assert gone.value.code is ErrorCode.ENTITY_NOT_FOUND


class _Recorder:
    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list = []
        self.fail_on = fail_on

    def call(self, operation: str, **body):
        self.calls.append((operation, body.get("path")))
        if body.get("path") == self.fail_on:
            raise OSError("the control connection is gone")  # proton's errors are not ServiceBusErrors
        return {}

    def close(self) -> None:
        self.calls.append(("close", None))


def test_closing_the_sdk_target_deletes_every_entity_and_closes_everything_though_one_delete_fails() -> None:
    """A delete that failed with anything but a ServiceBusError (the control node's connection gone)
    ended close(): the entities after it were left for the next test to see, the SDK client and the
    control connection stayed open, and a pairing's lock on the secondary was never released (the
    next pairing on it waits)."""
    from sbconform.targets.sdk import SdkTarget

    target = SdkTarget(serve=True)
    control, client, lock = _Recorder(fail_on="b"), _Recorder(), _Recorder()
    target._opened, target.control, target.client, target.pairing_lock = True, control, client, lock
    target.created = ["a", "b", "c"]
    target.close()
    assert [path for op, path in control.calls if op == "delete"] == ["c", "b", "a"]
    assert ("close", None) in control.calls and client.calls == [("close", None)] and lock.calls == [("close", None)]
    assert target.control is None and target.pairing_lock is None


def test_the_admin_description_is_the_whole_description_as_the_control_node_gives_it(admin) -> None:
    """describe_entity through control=admin (a secondary namespace on Azure: paired_sdk) gave only the
    fields the administration client has for the kind: the paired step 'backlog queue i has these
    properties, and the QueueDescription defaults for all others' compares every EntityDescription
    field, and read None for a queue's support_ordering and dead_lettering_on_filter_evaluation_exceptions."""
    from sbconform.targets.sdk import ControlClient
    from sbconform.targets.serve_process import shared_server

    server = shared_server()
    from sbconform.targets.sdk import parse_connection_string

    parts = parse_connection_string(server.connection_string)
    host_port = parts["endpoint"].split("://", 1)[-1].strip("/")
    node = ControlClient("127.0.0.1", int(host_port.rpartition(":")[2]), parts["sharedaccesskeyname"], parts["sharedaccesskey"])
    try:
        queue, topic = _name(), _name()
        admin.call("create-queue", name=queue, properties={"lock_duration": 5 * SECOND, "max_delivery_count": 3})
        admin.call("create-topic", name=topic, properties={})
        sub = admin.call("create-subscription", topic=topic, name="s", properties={"requires_session": True})["path"]
        for path in (queue, topic, sub):
            assert admin.call("describe", path=path) == dict(node.call("describe", path=path)), path
        for path in (queue, topic):
            admin.call("delete", path=path)
    finally:
        node.close()



def test_preflight_of_an_emulator_connection_string_without_a_control_node_is_one_line(monkeypatch) -> None:
    """--target sdk with control=auto on a UseDevelopmentEmulator=true endpoint that has no $sbconform
    node (Microsoft's emulator) passed preflight; the target then kept its entity-management
    capability with nothing to manage entities through, and every scenario that creates an entity
    failed with 'this endpoint cannot be managed' (false failures). Preflight now says so in one line."""
    import socket
    import threading

    from sbconform.targets import preflight

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]

    def refuse() -> None:  # a broker that takes the connection and has nothing to say to it
        for _ in range(4):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    monkeypatch.setattr(preflight, "_authenticate", lambda *a, **k: None)  # as the emulator: the key is right
    text = f"Endpoint=sb://localhost:{port};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    try:
        with pytest.raises(preflight.PreflightError) as caught:
            preflight.check_connection_string(text, "auto", timeout=5)
        message = str(caught.value)
        assert "\n" not in message and "$sbconform" in message and "--target emulator" in message and "control=none" in message
        preflight.check_connection_string(text, "none", timeout=5)  # entities from its config: nothing to ask for
    finally:
        listener.close()


def test_a_pairing_on_a_secondary_given_by_connection_string_starts_without_a_dead_runs_backlog_queues() -> None:
    """Backlog queues live at fixed paths (PAIR-BACKLOG-001) and are deleted when the secondary's
    target closes; a run killed before that left them (with their messages) on a secondary given
    by connection string, and the next pairing found them, left them as they were
    (PAIR-BACKLOG-003) and syphoned the dead run's messages. Once the pairing holds the lock on
    those paths no live pairing uses them: what is there is a dead run's, and goes."""
    from sbreference import Message
    from sbreference.paired.backlog import backlog_path

    from sbconform.targets.sdk import SdkTarget
    from sbconform.targets.serve_process import shared_server

    cs = shared_server().connection_string
    dead = SdkTarget(connection_string=cs, control="amqp")
    dead.open()
    leftovers = [backlog_path("localhost", i) for i in (0, 1, 2)]
    for path in leftovers:
        dead._control().call("create-queue", name=path, properties={})
    sender = dead.sender(leftovers[0])
    dead.send(sender, [Message(body=b"from a dead run")])
    dead.close_handle(sender)
    dead.control.close()  # killed: nothing deleted
    dead.control, dead.created = None, []
    dead.close()

    primary = SdkTarget(connection_string=cs, control="amqp", secondary=cs)
    primary.open()
    secondary = primary.paired_namespace()
    try:
        for path in leftovers:
            with pytest.raises(ServiceBusError) as gone:
                secondary.entity_counts(path)
            assert gone.value.code is ErrorCode.ENTITY_NOT_FOUND, path
    finally:
        secondary.close()
        primary.close()


@pytest.mark.parametrize("prefix", ["my test", "ci:", "-ci", "ci//", "x" * 201])
def test_a_prefix_no_entity_name_can_start_with_is_a_one_line_option_error(prefix) -> None:
    """--option prefix=... that cannot begin an entity name (a space, a colon, a leading dash) made
    every create fail with argument-error: every scenario that creates an entity failed (exit 1,
    MUST failures) instead of one line about the option (exit 2)."""
    from sbconform.targets import make_target

    with pytest.raises(ValueError) as caught:
        make_target("sdk", serve="true", prefix=prefix)
    assert "prefix=" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("prefix", ["", "ci-", "ci.", "team_a-", "ci/", "a/b-"])
def test_a_prefix_that_begins_a_valid_entity_name_is_taken(prefix) -> None:
    from sbconform.targets import make_target

    assert make_target("sdk", serve="true", prefix=prefix).prefix == prefix


def test_a_subscription_can_be_updated_through_the_administration_client(admin) -> None:
    """update on a subscription called update_subscription(props): the SDK's signature is
    update_subscription(topic_name, subscription), so every subscription update through control=admin
    (Azure) was a TypeError, reported as connection-lost (SETTLE-STATUS: a disabled subscription)."""
    topic = _name()
    admin.call("create-topic", name=topic, properties={})
    sub = admin.call("create-subscription", topic=topic, name="s", properties={})["path"]
    admin.call("update", path=sub, properties={"status": "ReceiveDisabled", "max_delivery_count": 4})
    described = admin.call("describe", path=sub)
    assert (described["status"], described["max_delivery_count"]) == ("ReceiveDisabled", 4)
    admin.call("delete", path=topic)


def test_a_binary_application_property_that_is_not_text_is_received_as_bytes() -> None:
    """pyamqp gives AMQP strings and binaries alike as bytes; the target decodes them as text, and a
    binary property that is not UTF-8 (b'\\xff') made received() raise UnicodeDecodeError: the
    scenario errored in the adapter instead of seeing the message."""
    import datetime as dt
    from types import SimpleNamespace

    from sbconform.targets.sdk import SdkTarget

    target = SdkTarget(serve=True)
    now = dt.datetime.now(dt.timezone.utc)
    raw = SimpleNamespace(body=b"x", state=None, time_to_live=None, delivery_count=0, application_properties={b"k": b"\xff\x00", b"s": b"text"},
                          _receiver=None, lock_token=None, message_id="m", sequence_number=1, enqueued_time_utc=now,
                          locked_until_utc=None, expires_at_utc=None, session_id=None, partition_key=None, dead_letter_reason=None,
                          dead_letter_error_description=None, dead_letter_source=None, content_type=None, scheduled_enqueue_time_utc=None,
                          correlation_id=None, subject=None, to=None, reply_to=None, reply_to_session_id=None)
    got = target.received(raw, "peek")
    assert got.application_properties == {"k": b"\xff\x00", "s": "text"}


def test_a_fault_of_the_adapter_itself_is_not_reported_as_a_lost_connection() -> None:
    """Any exception in the admin provisioner became connection-lost (transient): the
    update_subscription call with the wrong arguments (a TypeError of the kit's own) read as the
    broker dropping the connection. Now only Azure's exceptions and network errors are translated;
    a TypeError is the kit's fault and stays one, and a ValueError (the client refusing an
    argument) is an argument error."""
    from sbconform.targets.azure_admin import AdminProvisioner

    class Client:
        def get_subscription(self, topic, name):
            raise TypeError("get_subscription() got an unexpected keyword argument")

        def create_queue(self, name, **kwargs):
            raise ValueError("queue_name must be a non-empty str")

        def delete_queue(self, name):
            raise ConnectionResetError("reset by peer")

    admin = AdminProvisioner("", client=Client())
    with pytest.raises(TypeError):
        admin.call("describe", path="t/Subscriptions/s")
    with pytest.raises(ServiceBusError) as argument:
        admin.call("create-queue", name="", properties={})
    assert argument.value.code is ErrorCode.ARGUMENT_ERROR
    admin.kinds["q"] = "queue"
    with pytest.raises(ServiceBusError) as lost:
        admin.call("delete", path="q")
    assert lost.value.code is ErrorCode.CONNECTION_LOST
