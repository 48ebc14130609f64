"""Rules from Config.json (Microsoft's emulator schema), served by ``sbconform serve`` and seen
through the azure-servicebus SDK: each message reaches exactly the subscriptions whose rules
select it, and an action changes only the copy it makes (RULES-RULE-003, RULES-CORR-*,
RULES-SQL-*, RULES-ACT-001/002)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("proton")  # sbconform.server needs the sdk extra; make certify installs only the test extra

from sbreference import CorrelationFilter, FalseFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter
from sbconform.server.config import ConfigError, config_json, parse_config
from sbconform.server.rules import add_rule_body, config_rules, rule_description, rule_from_add_request

CONFIG = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [],
                "Topics": [
                    {
                        "Name": "orders",
                        "Properties": {},
                        "Subscriptions": [
                            {"Name": "all", "Properties": {"LockDuration": "PT5S"}},
                            {
                                "Name": "correlated",
                                "Properties": {},
                                "Rules": [
                                    {
                                        "Name": "app-prop-filter-1",
                                        "Properties": {
                                            "FilterType": "Correlation",
                                            "CorrelationFilter": {"ContentType": "application/text", "Label": "subject1", "Properties": {"region": "eu"}},
                                        },
                                    }
                                ],
                            },
                            {
                                "Name": "sql",
                                "Properties": {},
                                "Rules": [
                                    {
                                        "Name": "sql-filter-1",
                                        "Properties": {
                                            "FilterType": "Sql",
                                            "SqlFilter": {"SqlExpression": "sys.MessageId LIKE 'order-%' AND qty > 5"},
                                            "Action": {"SqlExpression": "SET qty = qty * 2; SET sys.To = 'big-orders'; REMOVE secret"},
                                        },
                                    }
                                ],
                            },
                            {
                                "Name": "nothing",
                                "Properties": {},
                                "Rules": [{"Name": "$Default", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=0"}}}],
                            },
                        ],
                    }
                ],
            }
        ],
        "Logging": {"Type": "Console"},
    }
}


def test_config_rules_replace_default_and_round_trip():
    config = parse_config(CONFIG, "Config.json")
    ns = config.build()
    assert [r.name for r in ns.list_rules("orders/Subscriptions/all")] == ["$Default"]
    assert [r.name for r in ns.list_rules("orders/Subscriptions/correlated")] == ["app-prop-filter-1"]
    sql = ns.list_rules("orders/Subscriptions/sql")[0]
    assert sql.filter == SqlFilter("sys.MessageId LIKE 'order-%' AND qty > 5")
    assert sql.action == SqlRuleAction("SET qty = qty * 2; SET sys.To = 'big-orders'; REMOVE secret")
    again = parse_config(json.loads(json.dumps(config_json(config))), "again")
    assert again.rules == config.rules


@pytest.mark.parametrize(
    "rules, where",
    [
        ([{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "a = = 1"}}}], "Rules[0]: The SQL filter expression is not valid"),
        ([{"Name": "r", "Properties": {"FilterType": "Bogus"}}], "Rules[0].Properties.FilterType"),
        ([{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Colour": "x"}}}], "Rules[0].Properties.CorrelationFilter.Colour"),
        ([{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {}}}], "Rules[0]: A correlation filter must name at least one property"),
        ([{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "a=1"}, "Action": {"SqlExpression": "SET"}}}], "Rules[0]: The SQL rule action expression is not valid"),
        ([{"Properties": {}}], "Rules[0].Name"),
        ([{"Name": "r", "Filter": {}, "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}], "Rules[0].Filter: unknown key"),
        ([{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFiltre": {"SqlExpression": "1=1"}}}], "Rules[0].Properties.SqlFiltre: unknown key"),
        ([{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpresion": "1=1"}}}], "Rules[0].Properties.SqlFilter.SqlExpresion: unknown key"),
        ([{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"Expression": "SET a=1"}}}], "Rules[0].Properties.Action.Expression: unknown key"),
        ("nope", "Rules: expected a list"),
    ],
)
def test_bad_rules_name_the_json_path(rules, where):
    data = json.loads(json.dumps(CONFIG))
    data["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][0]["Rules"] = rules
    with pytest.raises(ConfigError) as info:
        parse_config(data, "Config.json")
    text = str(info.value)
    assert text.startswith("Config.json: UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules"), text
    assert where in text, text


def test_add_rule_request_round_trip():
    """What the SDK target sends is what the server reads, for every kind of filter."""
    for rule in [
        Rule("t", TrueFilter()),
        Rule("f", FalseFilter()),
        Rule("s", SqlFilter("a = 1"), SqlRuleAction("SET b = 2")),
        Rule("p", SqlFilter("a = @x", {"@x": 3}), SqlRuleAction("SET b = @y", {"@y": "z"})),
        Rule("c", CorrelationFilter(correlation_id="x", subject="l", reply_to_session_id="r", properties={"n": 5, "ok": True})),
    ]:
        assert rule_from_add_request(add_rule_body(rule)) == rule
        desc = rule_description(rule)
        assert desc.descriptor == 0x0000013700000004 and desc.value[2] == rule.name
    assert config_rules(None, "x") is None


def test_config_rules_through_the_sdk():
    pytest.importorskip("azure.servicebus")
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    from sbconform.server.server import serve_in_thread

    server, _ = serve_in_thread(parse_config(CONFIG, "Config.json"))
    port = server.port
    try:
        conn = (
            f"Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
        )
        with ServiceBusClient.from_connection_string(conn) as client:
            with client.get_topic_sender("orders") as sender:
                sender.send_messages([
                    ServiceBusMessage(b"1", message_id="order-1", application_properties={"qty": 10, "secret": "s"}),
                    ServiceBusMessage(b"2", message_id="order-2", application_properties={"qty": 1}),
                    ServiceBusMessage(b"3", message_id="eu", content_type="application/text", subject="subject1",
                                      application_properties={"region": "eu"}),
                    ServiceBusMessage(b"4", message_id="us", content_type="application/text", subject="subject1",
                                      application_properties={"region": "us"}),
                ])

            def peek(sub):
                with client.get_subscription_receiver("orders", sub) as receiver:
                    return receiver.peek_messages(max_message_count=20)

            assert [m.message_id for m in peek("all")] == ["order-1", "order-2", "eu", "us"]
            assert [m.message_id for m in peek("correlated")] == ["eu"]
            assert peek("nothing") == []
            (copy,) = peek("sql")
            props = {(k.decode() if isinstance(k, bytes) else k): v for k, v in copy.application_properties.items()}
            props = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in props.items()}
            assert copy.message_id == "order-1" and copy.to == "big-orders"
            assert props == {"qty": 20, "RuleName": "sql-filter-1"}
            (original,) = [m for m in peek("all") if m.message_id == "order-1"]
            original_props = {(k.decode() if isinstance(k, bytes) else k): v for k, v in original.application_properties.items()}
            assert original.to is None and original_props["qty"] == 10 and "secret" in original_props
    finally:
        server.stop()


@pytest.mark.parametrize(
    "mutant, scenario",
    [("mutant-rule-actions-ignored", "five_matching_rules_two_with_actions"), ("mutant-two-valued-sql", "unknown_in_and_or_and_not")],
)
def test_rules_features_catch_broken_brokers(mutant: str, scenario: str) -> None:
    """The kit catches a broker that gets rules wrong (tests the kit, names no clause)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests" / "test_features.py"),
         "--sb-target", mutant, "-k", scenario],
        cwd=root, capture_output=True, text=True, timeout=300,
    )
    assert " failed" in result.stdout and result.returncode == 1, f"no scenario failed on {mutant}:\n{result.stdout[-2000:]}"
