"""The SDK target's provisioning (``sbconform/targets/sdk_provision.py``): with ``serve=true``
entities and rules go through ``sbconform serve``'s management REST API, the ``$sbconform``
control node only for what no real broker offers; ``control=amqp`` keeps the control node and
the AMQP rule operations. Rules convert both ways between the model and the administration client."""

from __future__ import annotations

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from sbreference import CorrelationFilter, ErrorCode, FalseFilter, Message, Rule, ServiceBusError, SqlFilter, SqlRuleAction, TrueFilter  # noqa: E402
from sbconform.targets import make_target  # noqa: E402
from sbconform.targets.azure_admin import model_rule, sdk_rule  # noqa: E402
from sbconform.targets.sdk_provision import RestProvisioner  # noqa: E402

RULES = [
    Rule("$Default", TrueFilter()),
    Rule("none", FalseFilter()),
    Rule("big", SqlFilter("qty > @n AND sys.Label LIKE 'o%'", {"@n": 5}), SqlRuleAction("SET tier = @t", {"@t": "gold"})),
    Rule("corr", CorrelationFilter(correlation_id="c", subject="L", reply_to_session_id="r", properties={"k": 1, "d": 1.5, "b": True, "s": "v"})),
]


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_rules_convert_to_the_administration_client_and_back(rule: Rule) -> None:
    from azure.servicebus.management import RuleProperties

    rule_filter, action = sdk_rule(rule)
    assert model_rule(RuleProperties(rule.name, filter=rule_filter, action=action, created_at_utc=None)) == rule


class _Recording:
    """Records which side of a RestProvisioner answered."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def call(self, operation: str, **body):
        self.log.append((self.name, operation))
        if operation == "runtime-info" and self.name == "rest" and body["path"] == "topic":
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, "a topic")
        return {"path": body.get("name", ""), "from": self.name, **({"partition_count": 4} if self.name == "node" else {})}

    def close(self) -> None:
        self.log.append((self.name, "close"))


def test_the_rest_api_carries_entities_and_rules_and_the_control_node_the_rest() -> None:
    log: list = []
    p = RestProvisioner(_Recording("rest", log), _Recording("node", log))
    p.call("create-queue", name="q", properties={"lock_duration": 5000, "max_delivery_count": 3})
    p.call("create-subscription", topic="t", name="s", properties={"dead_lettering_on_filter_evaluation_exceptions": False})
    p.call("add-rule", path="t/Subscriptions/s", rule=RULES[1])
    p.call("delete", path="q")
    assert [who for who, _ in log] == ["rest"] * 4
    log.clear()
    p.call("create-queue", name="q", properties={"dead_lettering_on_filter_evaluation_exceptions": True})  # not a queue's: the node answers as the model does
    p.call("partition", path="q", partition=0, available=False)
    p.call("advance-time", ms=10)
    p.call("update", path="q", properties={"lock_duration": 1000})
    assert [who for who, _ in log] == ["node"] * 4
    log.clear()
    assert p.call("describe", path="q")["from"] == "rest" and p.call("runtime-info", path="q") == {"path": "", "from": "rest", "partition_count": 4}
    assert p.call("runtime-info", path="topic")["from"] == "node"  # the REST API counts per subscription


def test_serve_provisions_through_the_rest_api_and_rules_filter_amqp_sends() -> None:
    target = make_target("sdk", serve="true")
    target.open()
    try:
        assert isinstance(target.control, RestProvisioner)
        topic = target.create_topic("t")
        sub = target.create_subscription(topic, "s", max_delivery_count=3)
        assert target.describe_entity(sub)["max_delivery_count"] == 3
        target.remove_rule(sub, "$Default")
        target.add_rule(sub, Rule("big", SqlFilter("qty > 5"), SqlRuleAction("SET tier = 'gold'")))
        with pytest.raises(ServiceBusError) as bad:
            target.add_rule(sub, Rule("bad", SqlFilter.unchecked("qty = = (")))
        assert bad.value.code is ErrorCode.ARGUMENT_ERROR and "position" in str(bad.value)
        with pytest.raises(ServiceBusError) as exists:
            target.add_rule(sub, Rule("BIG", TrueFilter()))
        assert exists.value.code is ErrorCode.ENTITY_ALREADY_EXISTS
        assert [r.name for r in target.list_rules(sub)] == ["big"]
        sender, receiver = target.sender(topic), target.receiver(sub)
        target.send(sender, [Message(body=b"1", message_id="small", application_properties={"qty": 1}),
                             Message(body=b"9", message_id="large", application_properties={"qty": 9})])
        got = target.receive(receiver, max_count=2, max_wait=2000)
        assert [(m.message_id, m.application_properties.get("tier")) for m in got] == [("large", "gold")]
        assert target.entity_counts(sub)["active"] == 1  # locked, still counted active
        target.complete(receiver, got[0])
        assert target.entity_counts(sub)["active"] == 0
    finally:
        target.close()


def test_control_amqp_keeps_the_control_node_and_amqp_rule_operations() -> None:
    target = make_target("sdk", serve="true", control="amqp")
    target.open()
    try:
        assert not isinstance(target.control, RestProvisioner) and not getattr(target.control, "rules", False)
        topic = target.create_topic("t")
        sub = target.create_subscription(topic, "s")
        target.add_rule(sub, RULES[3])
        assert target.list_rules(sub) == [RULES[0], RULES[3]]
    finally:
        target.close()


def test_the_paired_secondary_is_provisioned_through_its_rest_api_too() -> None:
    """The paired secondary is an sbconform serve the target started: its backlog queues (nested
    names, <namespace>/x-servicebus-transfer/<i>) go through its management REST API, as on any
    Service Bus, not only through the control node."""
    target = make_target("sdk", serve="true")
    target.open()
    others = []
    try:
        others = [target.paired_namespace()]
        assert isinstance(others[0].control, RestProvisioner), type(others[0].control)
        secondary = others[0]
        path = secondary.create_queue_at("backlog-rest-check", max_delivery_count=3)
        assert secondary.describe_entity(path)["max_delivery_count"] == 3
    finally:
        for other in others:
            other.close()
        target.close()


def test_the_control_node_counts_what_a_receive_could_be_given_and_refuses_what_a_receive_would() -> None:
    """``available`` (asked by the SDK target before a receive in virtual time): locked and
    scheduled messages are not counted; a missing path, a topic, an unknown entity and a caller
    with a wrong key are refused, and the node keeps answering."""
    from sbconform.targets.proton_client import ControlClient

    target = make_target("sdk", serve="true")
    target.open()
    try:
        node = target._node()
        queue, topic = target.create_queue("q", lock_duration=60_000), target.create_topic("t")
        sender, receiver = target.sender(queue), target.receiver(queue)
        target.send(sender, [Message(b"a", message_id="a"), Message(b"b", message_id="b")])
        target.schedule(sender, [Message(b"later", message_id="later")], target.now() + 600_000)
        assert node.call("available", path=queue) == {"count": 2}
        assert [m.message_id for m in target.receive(receiver, 1)] == ["a"]
        assert node.call("available", path=queue) == {"count": 1}
        for body, code in (({}, ErrorCode.ARGUMENT_ERROR), ({"path": topic}, ErrorCode.INVALID_OPERATION),
                           ({"path": "nowhere"}, ErrorCode.ENTITY_NOT_FOUND)):
            with pytest.raises(ServiceBusError) as refused:
                node.call("available", **body)
            assert refused.value.code is code, (body, refused.value)
        stranger = ControlClient("127.0.0.1", target.port, "RootManageSharedAccessKey", "not-the-key")
        try:
            with pytest.raises(ServiceBusError) as unauthorised:
                stranger.call("available", path=queue)
            assert unauthorised.value.code is ErrorCode.UNAUTHORIZED
        finally:
            stranger.close()
        assert node.call("available", path=queue) == {"count": 1}
    finally:
        target.close()
