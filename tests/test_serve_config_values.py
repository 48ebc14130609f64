"""Config.json values Service Bus cannot hold are one line naming the JSON path, never accepted
and changed silently (the careless-user audit's inputs)."""

from __future__ import annotations

import pytest

pytest.importorskip("proton")

from sbconform.server import ConfigError, parse_config  # noqa: E402
from sbreference.clock import TIMESPAN_MAX  # noqa: E402


def config(queues: list, topics: list | None = None) -> dict:
    return {"UserConfig": {"Namespaces": [{"Name": "n", "Queues": queues, "Topics": topics or []}]}}


def test_a_count_past_int32_is_refused_where_service_bus_holds_an_int32() -> None:
    # QueueProperties.MaxDeliveryCount is an Int32: 10**30 was accepted and served back by the REST API
    with pytest.raises(ConfigError, match=r"Queues\[0\]\.Properties\.MaxDeliveryCount: .*2147483647"):
        parse_config(config([{"Name": "q", "Properties": {"MaxDeliveryCount": 10**30}}]), "Config.json")
    parse_config(config([{"Name": "q", "Properties": {"MaxDeliveryCount": 2**31 - 1}}]))


def test_a_duration_past_timespan_max_is_refused_and_timespan_max_itself_is_never() -> None:
    # "P99999999999D" was accepted and clamped without a word; .NET's TimeSpan cannot hold it
    with pytest.raises(ConfigError, match=r"Queues\[0\]\.Properties\.DefaultMessageTimeToLive: .*longer than TimeSpan\.MaxValue"):
        parse_config(config([{"Name": "q", "Properties": {"DefaultMessageTimeToLive": "P99999999999D"}}]), "Config.json")
    never = parse_config(config([{"Name": "q", "Properties": {"DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S"}}]))
    assert never.queues[0][1]["default_message_time_to_live"] == TIMESPAN_MAX


@pytest.mark.parametrize("queues, topics, at", [
    ([{"Name": "orders"}, {"Name": "Orders"}], [], r"Queues\[1\]\.Name: 'Orders' is already the name of Queues\[0\]"),
    ([{"Name": "orders"}], [{"Name": "ORDERS"}], r"Topics\[0\]\.Name: 'ORDERS' is already the name of Queues\[0\]"),
    ([], [{"Name": "t", "Subscriptions": [{"Name": "s"}, {"Name": "S"}]}],
     r"Topics\[0\]\.Subscriptions\[1\]\.Name: 'S' is already the name of Topics\[0\]\.Subscriptions\[0\]"),
])
def test_a_name_given_twice_is_named_where_it_is_given_the_second_time(queues, topics, at) -> None:
    # was "UserConfig.Namespaces[0]: The queue 'orders' already exists." (entity names are case-insensitive)
    with pytest.raises(ConfigError, match=at):
        parse_config(config(queues, topics), "Config.json")
