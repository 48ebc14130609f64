"""The SDK target in real time against a broker whose clock is not the client's.

Without virtual time the SDK target compares times the broker stamps (a lock's locked-until, a
message's enqueued time) with the client's wall clock. Here ``sbconform serve``'s clock is moved
1.5 s ahead of this machine's (its ``$sbconform`` node's ``advance-time``, through
``LocalServiceBus.advance``), and the target is given the connection string with ``time=real``:
no virtual time, so it sees the broker as it would see a real Azure namespace."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("azure.servicebus")
pytest.importorskip("proton")

from sbreference import Message  # noqa: E402
from steps.world import assert_locked_for  # noqa: E402

from sbconform.local import LocalServiceBus  # noqa: E402
from sbconform.targets.sdk import SdkTarget  # noqa: E402
from sbconform.targets.sdk_offset import ClockOffset, offset_from  # noqa: E402

AHEAD_S = 1.5  # how far the broker's clock runs ahead of the client's


@pytest.fixture(scope="module")
def bus_ahead():
    with LocalServiceBus() as bus:
        bus.advance(AHEAD_S)
        yield bus


def test_a_lock_is_graded_on_the_brokers_clock(bus_ahead) -> None:
    """SETTLE-LOCK-002's step, '"m1" is locked until 5 seconds after it was received': before the
    offset was measured the lock read as 6.5 s (the broker's clock 1.5 s ahead), a false failure."""
    target = SdkTarget(connection_string=bus_ahead.connection_string, time="real")
    target.open()
    try:
        assert not target.time_control  # real time: the lock is read from the broker's stamps
        clock = target.broker_clock
        assert clock.uncertainty is not None and abs(clock.offset - AHEAD_S * 1000) <= clock.uncertainty + 1
        assert clock.uncertainty < 100, clock  # a loopback round trip: tens of milliseconds at most
        queue = target.create_queue("q", lock_duration=5000)
        target.send(target.sender(queue), [Message(body=b"m1", message_id="m1")])
        receiver = target.receiver(queue)
        began = target.now()
        [got] = target.receive(receiver, 1, 2000)
        ended = target.now()
        world = types.SimpleNamespace(target=target)
        assert_locked_for(world, got.locked_until, began, ended, "5", '"m1"', "it was received")
        described = target.describe()["broker clock"]
        assert f"{clock.offset:+d} ms" in described and f"± {clock.uncertainty} ms" in described
    finally:
        target.close()


def test_the_offset_is_where_every_probe_allows() -> None:
    """Each probe bounds the offset by its round trip: the broker stamped it between the client's
    send and its settlement. The intersection is the tightest bound; the midpoint the offset."""
    # a broker 1000 ms ahead; round trips of 40, 10 and 60 ms, stamped at different points in them
    samples = [(0.0, 40.0, 1030), (100.0, 110.0, 1102), (200.0, 260.0, 1210)]
    clock = offset_from(samples)
    # from the three: offset in [1030-40, 1030] ∩ [1102-110, 1102-100] ∩ [1210-260, 1210-200] = [992, 1002]
    assert (clock.offset, clock.uncertainty) == (997, 5 + 1)  # + 1: the broker's stamp is whole milliseconds
    # probes that contradict each other (the clock stepped between them): the tightest alone
    clock = offset_from([(0.0, 40.0, 1030), (100.0, 110.0, 5102)])
    assert (clock.offset, clock.uncertainty) == (4997, 5 + 1)


def test_an_offset_known_too_loosely_leaves_timing_ungraded() -> None:
    """A lock compared with the client's clock within ± 2 s says nothing of a 5 s lock: the target
    lacks the capability broker-clock, so the scenarios comparing the clocks are skipped up front
    (not graded), never failed; the tolerance itself is a number, read without side effects."""
    target = SdkTarget(connection_string="Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true")
    target.broker_clock = ClockOffset(0, 2000, "measured from 4 probe messages")
    assert "broker-clock" not in target.capabilities and target.clock_tolerance == 300 + 2000
    target.broker_clock = ClockOffset(40, 20, "measured from 4 probe messages")
    assert "broker-clock" in target.capabilities and target.clock_tolerance == 300 + 20
    azure = SdkTarget(connection_string="Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
                      tier="Standard")
    azure.broker_clock = ClockOffset(0, None, "not measured: the probe queue was refused")
    assert "broker-clock" not in azure.capabilities and "offset unknown" in azure.lacking["broker-clock"]


def test_the_plugins_probe_measures_the_clock_when_asked_for_broker_clock(bus_ahead, monkeypatch) -> None:
    """The plugin asks a target it never opens (its probe) which capabilities it has, before the
    first test: reading the attribute does nothing (pytest_configure reads it, before preflight, and
    collection alone must not reach the broker); asking for broker-clock measures, once per endpoint."""
    from sbconform.targets import sdk_offset

    monkeypatch.setattr(sdk_offset, "_MEASURED", {})  # nothing measured yet in this process
    probe = SdkTarget(connection_string=bus_ahead.connection_string, time="real")
    capabilities = probe.capabilities
    assert probe.broker_clock.how == "not measured yet"
    assert "broker-clock" in capabilities
    clock = probe.broker_clock
    assert clock.uncertainty is not None and abs(clock.offset - AHEAD_S * 1000) <= clock.uncertainty + 1
    assert not probe._opened and probe.client is None or not probe._opened  # opened to measure, closed again
    again = SdkTarget(connection_string=bus_ahead.connection_string, time="real")
    monkeypatch.setattr(again, "open", lambda: pytest.fail("measured again"))
    assert "broker-clock" in again.capabilities and again.broker_clock == clock  # the process's measurement
    monkeypatch.setattr(sdk_offset, "_MEASURED", {})
    loose = SdkTarget(connection_string=bus_ahead.connection_string, time="real")
    monkeypatch.setattr(loose, "_probe_clock", lambda: ClockOffset(1500, 900, "measured from 4 probe messages"))
    assert "broker-clock" not in loose.capabilities and "± 900 ms" in loose.lacking["broker-clock"]
