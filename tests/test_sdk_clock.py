"""The SDK target's open poll (``sdk_clock.set_open_poll``, option ``open_poll_ms``): the SDK's 50 ms
sleep between looks at a handle it opens lasts what the option says, and nothing else changes."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("azure.servicebus")

import azure.servicebus._pyamqp.client as pyamqp_client  # noqa: E402
import azure.servicebus._servicebus_receiver as sdk_receiver  # noqa: E402
import azure.servicebus._servicebus_sender as sdk_sender  # noqa: E402

from sbconform.targets.sdk import SdkTarget  # noqa: E402
from sbconform.targets.sdk_clock import POLLING_MODULES, SDK_OPEN_POLL, set_open_poll  # noqa: E402


@pytest.fixture
def slept(monkeypatch):
    """What the SDK's modules ask the real time.sleep for."""
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", calls.append)
    yield calls
    set_open_poll(SDK_OPEN_POLL * 1000)


def test_the_open_poll_sleeps_what_the_option_says_and_nothing_else_changes(slept) -> None:
    assert set_open_poll(2) == list(POLLING_MODULES)
    for module in (sdk_receiver, sdk_sender, pyamqp_client):
        module.time.sleep(0.05)  # the SDK's open poll
        module.time.sleep(1)  # pyamqp's keep-alive step: the SDK's own
        module.time.sleep(0.2)  # a retry back-off: the SDK's own
    assert slept == [0.002, 1, 0.2] * 3
    assert abs(sdk_receiver.time.time() - time.time()) < 5  # the rest of the module is time's
    assert sdk_receiver.time.monotonic is time.monotonic


def test_set_again_it_changes_the_poll_and_50_is_the_sdks_own(slept) -> None:
    set_open_poll(2)
    set_open_poll(10)
    sdk_sender.time.sleep(0.05)
    assert set_open_poll(50) == []
    assert sdk_sender.time is time and sdk_receiver.time is time  # the SDK's own modules, untouched
    sdk_sender.time.sleep(0.05)
    assert slept == [0.01, 0.05]


def test_an_application_keeps_the_sdks_own_poll(monkeypatch) -> None:
    """PairedNamespaceSender and set_entity_available run in an application's process: the SDK
    there stays as it is."""
    from sbconform.paired.application import PairedNamespaceSender, set_entity_available

    polls: list[float] = []

    class Stop(Exception):
        pass

    def open_(self) -> None:
        polls.append(self.open_poll_ms)
        raise Stop

    monkeypatch.setattr(SdkTarget, "open", open_)
    cs = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    with pytest.raises(Stop):
        PairedNamespaceSender.from_connection_strings(cs, cs)
    with pytest.raises(Stop):
        set_entity_available(cs, "q", False)
    assert polls == [50, 50]


@pytest.mark.parametrize("value", ["fast", "-1", "5000", ""])
def test_an_open_poll_that_is_not_a_number_of_milliseconds_is_refused(value) -> None:
    with pytest.raises(ValueError, match="open_poll_ms"):
        SdkTarget(serve=True, open_poll_ms=value)


def test_the_target_says_its_open_poll() -> None:
    assert SdkTarget(serve=True).describe()["open_poll_ms"] == 2
    assert SdkTarget(serve=True, open_poll_ms="50").describe()["open_poll_ms"] == 50
