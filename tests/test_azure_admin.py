"""Provisioning on Azure (``control=admin``): the administration client's calls, checked
against a recording stand-in, since no Azure namespace is reachable from CI."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from sbreference import ErrorCode, ServiceBusError
from sbreference.clock import MINUTE, SECOND, TIMESPAN_MAX
from sbconform.targets.azure_admin import AdminProvisioner, admin_arguments, description_of

AZURE = "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=abc="


class ResourceNotFoundError(Exception):
    """Named as azure.core's: translation goes by class name."""


class ResourceExistsError(Exception):
    pass


class FakeAdmin:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.queues: dict[str, SimpleNamespace] = {}

    def create_queue(self, name, **kwargs):
        self.calls.append(("create_queue", name, kwargs))
        if name in self.queues:
            raise ResourceExistsError(f"queue {name} exists")
        self.queues[name] = SimpleNamespace(lock_duration=kwargs.get("lock_duration", dt.timedelta(minutes=1)),
                                            max_delivery_count=kwargs.get("max_delivery_count", 10),
                                            default_message_time_to_live=None, availability_status=SimpleNamespace(value="Available"))

    def create_subscription(self, topic, name, **kwargs):
        self.calls.append(("create_subscription", topic, name, kwargs))

    def get_queue(self, name):
        if name not in self.queues:
            raise ResourceNotFoundError(name)
        return self.queues[name]

    def get_topic(self, name):
        raise ResourceNotFoundError(name)

    def update_queue(self, props):
        self.calls.append(("update_queue", props))

    def delete_queue(self, name):
        self.calls.append(("delete_queue", name))
        del self.queues[name]

    def get_queue_runtime_properties(self, name):
        return SimpleNamespace(active_message_count=3, dead_letter_message_count=1, scheduled_message_count=2,
                               transfer_message_count=0, transfer_dead_letter_message_count=0, total_message_count=8,
                               size_in_bytes=400)


def test_durations_become_timespans_and_never_is_left_to_azure():
    args = admin_arguments("queue", {"lock_duration": 5 * SECOND, "default_message_time_to_live": TIMESPAN_MAX,
                                     "max_delivery_count": 3, "max_message_size": 1024 * 1024})
    assert args == {"lock_duration": dt.timedelta(seconds=5), "max_delivery_count": 3, "max_message_size_in_kilobytes": 1024}


def test_a_property_the_kind_does_not_take_is_an_argument_error_naming_it():
    with pytest.raises(ServiceBusError) as caught:
        admin_arguments("topic", {"lock_duration": 5 * SECOND})
    assert caught.value.code is ErrorCode.ARGUMENT_ERROR and "lock_duration" in str(caught.value)


def test_the_control_operations_map_to_the_administration_client():
    fake = FakeAdmin()
    admin = AdminProvisioner("", client=fake)
    assert admin.call("create-queue", name="q-1", properties={"lock_duration": 5 * SECOND}) == {"path": "q-1"}
    assert fake.calls[0] == ("create_queue", "q-1", {"lock_duration": dt.timedelta(seconds=5)})
    assert admin.call("create-subscription", topic="t", name="s", properties={"max_delivery_count": 2}) == {"path": "t/Subscriptions/s"}
    assert admin.call("describe", path="q-1")["lock_duration"] == 5 * SECOND
    assert admin.call("describe", path="q-1")["default_message_time_to_live"] == TIMESPAN_MAX
    counts = admin.call("runtime-info", path="q-1")
    assert counts == {"active": 3, "deferred": 2, "dead_letter": 1, "scheduled": 2, "size_bytes": 400, "availability_status": "available"}
    admin.call("update", path="q-1", properties={"max_delivery_count": 7})
    assert fake.calls[-1][0] == "update_queue" and fake.calls[-1][1].max_delivery_count == 7
    admin.call("delete", path="q-1")
    assert fake.calls[-1] == ("delete_queue", "q-1")


def test_azure_errors_and_fault_injection_are_service_bus_errors():
    admin = AdminProvisioner("", client=FakeAdmin())
    admin.call("create-queue", name="q", properties={})
    with pytest.raises(ServiceBusError) as exists:
        admin.call("create-queue", name="q", properties={})
    assert exists.value.code is ErrorCode.ENTITY_ALREADY_EXISTS
    with pytest.raises(ServiceBusError) as missing:
        admin.call("describe", path="nope")
    assert missing.value.code is ErrorCode.ENTITY_NOT_FOUND
    with pytest.raises(ServiceBusError) as refused:
        admin.call("partition", path="q", partition=0, available=False)
    assert refused.value.code is ErrorCode.INVALID_OPERATION and "fault injection" in str(refused.value)


def test_a_real_namespace_is_provisioned_with_the_admin_client_and_declares_no_fault_injection():
    pytest.importorskip("azure.servicebus")
    from sbconform.targets.sdk import SdkTarget

    target = SdkTarget(connection_string=AZURE)
    assert target.control_mode == "admin"
    assert not {"partition-outage", "entity-outage", "small-quota"} & target.capabilities
    assert "cannot take a partition down" in target.lacking["partition-outage"]
    emulator = SdkTarget(connection_string="Endpoint=sb://localhost:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;")
    assert emulator.control_mode == "auto" and "partition-outage" in emulator.capabilities
