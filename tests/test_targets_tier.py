"""The SDK target reads its namespace's tier from the service (``get_namespace_properties``).

The scenarios grade the namespace under test as Standard. Given a connection string the target took
every namespace for a Standard one: on a Premium namespace SETTLE-TIER-001's "A Standard queue cannot
be given a max message size above 256 KB" failed (Premium rightly creates it), and on a Basic one
every scenario needing a topic failed. Here ``sbconform serve`` runs with Sku Premium or Basic in
its config; its management REST API answers ``GET /$namespaceinfo`` with that SKU."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("azure.servicebus")
pytest.importorskip("proton")

from sbreference import Message, ServiceBusError  # noqa: E402

from sbconform.local import LocalServiceBus  # noqa: E402
from sbconform.targets.sdk import SdkTarget  # noqa: E402


def _config(sku: str) -> dict:
    return {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Sku": sku, "Queues": [], "Topics": []}]}}


@pytest.fixture(scope="module")
def premium():
    with LocalServiceBus(_config("Premium")) as bus:
        yield bus


def test_a_premium_namespace_is_not_graded_with_standard_limits(premium) -> None:
    target = SdkTarget(connection_string=premium.connection_string, admin_connection_string=premium.admin_connection_string)
    assert (target.tier, target.tier_how) == ("Premium", "get_namespace_properties")
    assert "Premium (get_namespace_properties)" in target.describe()["tier"]
    # the PART-* scenarios partition entities of a Standard namespace; on Premium partitions are the namespace's
    assert "partitions" not in target.capabilities and "on Premium partitioning is the namespace's" in target.lacking["partitions"]
    # SETTLE-TIER-001/004's scenarios grade Standard limits: skipped up front, as the plugin skips any capability lacked
    assert "standard-namespace" not in target.capabilities
    assert target.lacking["standard-namespace"].startswith("the namespace is Premium (get_namespace_properties)")
    target.open()
    try:
        # SETTLE-TIER-001: 100 MB is refused on Standard, created on Premium: not graded, never failed
        with pytest.raises(pytest.skip.Exception, match="target 'sdk' lacks capability 'standard-namespace' for this operation \\(the namespace is Premium.*refused \\(argument-error\\) on Standard"):
            target.create_queue("big", max_message_size=102400 * 1024)
        # the same answer on both tiers: graded as before
        with pytest.raises(ServiceBusError):
            target.create_queue("huge", max_message_size=200 * 1024 * 1024)  # above Premium's 100 MB too
        queue = target.create_queue("q")
        sender = target.sender(queue)
        with pytest.raises(pytest.skip.Exception, match="lacks capability 'standard-namespace' for this operation.*1000000 bytes"):  # Standard refuses it, Premium takes it
            target.send(sender, [Message(body=b"x" * 1_000_000, message_id="huge")])
        target.send(sender, [Message(body=b"small", message_id="small")])  # 5 bytes: graded
        assert [m.message_id for m in target.peek(target.receiver(queue), 5)] == ["small"]
    finally:
        target.close()


def test_a_basic_namespace_lacks_what_basic_lacks_and_a_refused_read_falls_back_to_the_option() -> None:
    with LocalServiceBus(_config("Basic")) as bus:
        # a key without the right to read it (here: a wrong one, 401): the tier is unknown, or the user's word
        wrong_key = re.sub(r"SharedAccessKey=[^;]*", "SharedAccessKey=d3Jvbmc=", bus.admin_connection_string)
        unknown = SdkTarget(connection_string=bus.connection_string, admin_connection_string=wrong_key)
        given = SdkTarget(connection_string=bus.connection_string, admin_connection_string=wrong_key, tier="Premium")
        target = SdkTarget(connection_string=bus.connection_string, admin_connection_string=bus.admin_connection_string)
    assert unknown.tier is None and "refused (401" in unknown.tier_how
    assert unknown.describe()["tier"].startswith("unknown (get_namespace_properties refused (401")
    assert "topics" in unknown.capabilities  # not known to be Basic: its scenarios run (and fail if it is)
    with pytest.raises(pytest.skip.Exception, match="lacks capability 'standard-namespace' for this operation \\(the namespace is unknown"):
        unknown._tier_guard_entity("queue", {"max_message_size": 102400 * 1024})  # Premium would create it
    unknown._tier_guard_entity("queue", {"lock_duration": 5000})  # the same on every tier: graded
    assert given.tier == "Premium" and given.tier_how.startswith("tier=Premium given; get_namespace_properties refused (401")
    assert target.tier == "Basic"
    for capability in ("topics", "rules", "sessions", "duplicate-detection", "auto-forward", "transactions"):
        assert capability not in target.capabilities
        assert target.lacking[capability].startswith("the namespace is Basic (get_namespace_properties)")
    assert {"deferral", "dead-letter", "scheduling"} <= target.capabilities
    assert "standard-namespace" not in target.capabilities and "standard-namespace" not in unknown.capabilities
    assert "the namespace is unknown (get_namespace_properties refused (401" in unknown.lacking["standard-namespace"]


def test_a_tier_that_is_none_is_refused() -> None:
    with pytest.raises(ValueError, match="tier='Gold'"):
        SdkTarget(connection_string="Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
                  tier="Gold")


def test_a_development_endpoint_without_its_management_api_is_taken_as_standard_and_says_so(premium) -> None:
    target = SdkTarget(connection_string=premium.connection_string)
    assert target.tier == "Standard"
    assert "standard-namespace" in target.capabilities and "standard-namespace" not in target.lacking
    assert "assumed" in target.describe()["tier"] and "admin_connection_string" in target.describe()["tier"]
