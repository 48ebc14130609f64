"""What the SDK target measured decides what it declares it can grade, and scenarios are skipped up front.

The broker's clock (``sdk_offset``) and the namespace's tier (``sdk_tier``) used to be judged inside
the steps: the ``clock_tolerance`` property skipped the running test when the offset was known too
loosely, so a step comparing two broker times (a message's expiry and its enqueue time) was skipped
with it, the differential machine and the real-time profile choice were skipped whole, and the
schedule steps (which never read it) ran. Now the target declares the capabilities ``broker-clock``
and ``standard-namespace`` from what it measured, the scenarios that need them are tagged
``@needs:...`` and skipped with the plugin's "target 'sdk' lacks capability ..." reason, and
``clock_tolerance`` is a number with no side effect. No broker is needed here: the target is given
what it would have measured."""

from __future__ import annotations

import datetime as dt
import re
import types
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

pytest.importorskip("azure.servicebus")

from steps.common import received_expiry, schedule_message  # noqa: E402
from steps.world import CLOCK_STEPS, assert_locked_for  # noqa: E402

from sbconform.targets import make_target  # noqa: E402
from sbconform.targets.paired_sdk import share_clock  # noqa: E402
from sbconform.targets.sdk import SdkTarget  # noqa: E402
from sbconform.targets.sdk_offset import ClockOffset  # noqa: E402
from sbconform.targets.sdk_support import _EPOCH  # noqa: E402
from sbspec import load_catalog  # noqa: E402

LOCAL = "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
FEATURES = Path(__file__).resolve().parent.parent / "features"


def _measured(offset: int, uncertainty: int | None) -> SdkTarget:
    target = SdkTarget(connection_string=LOCAL, time="real")
    target.broker_clock = ClockOffset(offset, uncertainty, "measured from 4 probe messages")
    return target


def test_a_loosely_known_broker_clock_is_a_capability_lacked_not_a_skip_inside_a_property() -> None:
    loose = _measured(0, 2000)
    assert "broker-clock" not in loose.capabilities
    assert "± 2000 ms" in loose.lacking["broker-clock"] and "500 ms" in loose.lacking["broker-clock"]
    assert loose.clock_tolerance == 300 + 2000  # a number: reading it skips nothing (the differential machine runs)
    tight = _measured(40, 20)
    assert "broker-clock" in tight.capabilities and "broker-clock" not in tight.lacking
    assert tight.clock_tolerance == 300 + 20
    assert "broker-clock" in SdkTarget(serve="true").capabilities  # virtual time: the endpoint's clock is read exactly
    assert "broker-clock" in make_target("reference").capabilities


def test_steps_comparing_only_broker_times_run_on_a_loosely_known_clock() -> None:
    """SETTLE-TTL-001's expiry and enqueue time are both the broker's stamps: the offset cancels out."""
    world = types.SimpleNamespace(target=_measured(0, 2000))
    message = types.SimpleNamespace(expires_at=70_100, enqueued_time=10_000)
    world.message = lambda r, mid: message
    try:
        received_expiry(world, "A", "m1", "60")  # 60.1 s: within 300 ms, graded
    except pytest.skip.Exception as skipped:
        pytest.fail(f"a step comparing two broker times was skipped: {skipped}")
    message.expires_at = 71_000
    with pytest.raises(AssertionError, match="expires 61000 ms"):
        received_expiry(world, "A", "m1", "60")


def test_steps_comparing_the_brokers_clock_with_the_targets_share_one_rule() -> None:
    """Lock and schedule steps alike: the target must declare broker-clock (else the step is
    skipped with the plugin's reason; a scenario reaching it untagged is a kit error, linted below)."""
    loose = _measured(0, 2000)
    world = types.SimpleNamespace(target=loose)
    with pytest.raises(pytest.skip.Exception, match="target 'sdk' lacks capability 'broker-clock'"):
        assert_locked_for(world, 5000, 0, 10, "5", '"m1"', "it was received")
    scheduled = []
    world.attempt = lambda op, *args: scheduled.append(args)
    world.sender, world.build = (lambda entity: entity), (lambda mid, attrs: mid)
    with pytest.raises(pytest.skip.Exception, match="target 'sdk' lacks capability 'broker-clock'"):
        schedule_message(world, "later", "q", "10")
    assert scheduled == []  # skipped before it scheduled anything on a clock it cannot place


def _scenarios(path: Path):
    """(feature tags + scenario tags, steps incl. the Background's, line) of each scenario in a feature file."""
    feature_tags: set[str] = set()
    background: list[str] = []
    pending: set[str] = set()
    current = None
    in_background = False
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("@"):
            pending |= set(line.split())
        elif line.startswith("Feature:"):
            feature_tags, pending = pending, set()
        elif line.startswith("Background:"):
            in_background = True
        elif line.startswith(("Scenario:", "Scenario Outline:")):
            if current is not None:
                yield current
            in_background = False
            current = (feature_tags | pending, list(background), number)
            pending = set()
        elif line.split(" ", 1)[0] in ("Given", "When", "Then", "And", "But"):
            (background if in_background else current[1]).append(line.split(" ", 1)[1])
    if current is not None:
        yield current


def test_every_scenario_comparing_clocks_needs_broker_clock() -> None:
    patterns = [re.compile(p) for p in CLOCK_STEPS]
    assert len(patterns) >= 5, CLOCK_STEPS  # locks (three steps), session locks, schedules (two steps)
    comparing, untagged = 0, []
    for path in sorted(FEATURES.rglob("*.feature")):
        for tags, steps, line in _scenarios(path):
            if any(p.fullmatch(s) for p in patterns for s in steps):
                comparing += 1
                if "@needs:broker-clock" not in tags:
                    untagged.append(f"{path.relative_to(FEATURES)}:{line}")
    assert comparing >= 12 and untagged == [], untagged


def test_the_standard_limit_scenarios_need_a_standard_namespace() -> None:
    assert "standard-namespace" in load_catalog().capabilities and "broker-clock" in load_catalog().capabilities
    tier = [(tags, line) for tags, _, line in _scenarios(FEATURES / "settlement" / "entities.feature")
            if tags & {"@SETTLE-TIER-001", "@SETTLE-TIER-004"}]
    assert len(tier) == 3 and all("@needs:standard-namespace" in tags for tags, _ in tier), tier


def test_a_pairing_converts_each_namespaces_times_with_its_own_offset() -> None:
    """share_clock copied the primary's t0_epoch_ms (the client's wall clock at t0 plus the PRIMARY
    broker's offset) to the secondary, whose broker may be elsewhere: its stamps were then read off
    by the difference of the two offsets."""
    primary, secondary = _measured(1500, 5), _measured(-200, 8)
    primary.t0, primary.t0_epoch_ms, primary.skew = 123.0, 1_000_000 + 1500, 0
    share_clock(secondary, primary)
    assert secondary.t0 == primary.t0
    assert secondary.t0_epoch_ms == 1_000_000 - 200  # the client's wall clock at t0 plus its own broker's offset
    # an instant stamped by both brokers reads the same to the client
    client_ms = 1_000_000 + 4000
    stamp = lambda ms: _EPOCH + dt.timedelta(milliseconds=ms)  # noqa: E731
    assert primary._local(stamp(client_ms + 1500)) == secondary._local(stamp(client_ms - 200)) == 4000


def test_the_paired_application_reads_each_brokers_stamps_on_the_clients_unix_clock(monkeypatch) -> None:
    """PairedNamespaceSender counts in the client's Unix milliseconds (t0_epoch_ms was 0), so a broker
    1.5 s ahead had its stamps (a backlog lock's end) read 1.5 s late: its own offset is applied now."""
    from sbconform.paired.application import PairedNamespaceSender

    offsets = {"primary": 1500, "secondary": -200}

    def fake_open(self) -> None:  # what open measures, without a broker
        self.broker_clock = ClockOffset(offsets[self.connection_string.split(";")[0].rsplit("/", 1)[-1]], 5, "measured")

    class Made(PairedNamespaceSender):
        def __init__(self, primary, secondary, options=None) -> None:
            self.made = (primary, secondary)

    monkeypatch.setattr(SdkTarget, "open", fake_open)
    made = Made.from_connection_strings(*(f"{LOCAL.split(';')[0]}/{name};SharedAccessKeyName=k;SharedAccessKey=v;"
                                          "UseDevelopmentEmulator=true" for name in offsets))
    client_ms = 1_800_000_000_000
    stamp = lambda ms: _EPOCH + dt.timedelta(milliseconds=ms)  # noqa: E731
    primary, secondary = made.made
    assert primary._local(stamp(client_ms + 1500)) == secondary._local(stamp(client_ms - 200)) == client_ms


def test_a_lacked_capabilitys_reason_is_given_once_without_repeating_its_name(pytester, monkeypatch) -> None:
    # "lacks capability 'broker-clock' (broker-clock: ...)" named the capability twice
    from sbconform.targets.reference import ReferenceTarget

    monkeypatch.setattr(ReferenceTarget, "capabilities", frozenset(ReferenceTarget.capabilities) - {"sessions", "topics"})
    monkeypatch.setattr(ReferenceTarget, "lacking", {"sessions": "no sessions here", "topics": "no topics here"}, raising=False)
    pytester.makepyfile(test_needs='''
        import pytest

        @pytest.mark.needs("sessions")
        def test_one(sb_target):
            pass

        @pytest.mark.needs("sessions", "topics")
        def test_two(sb_target):
            pass
    ''')
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider", "--sb-target", "reference")
    out = result.stdout.str()
    assert "lacks capability 'sessions' (no sessions here)" in out, out
    assert "lacks capability 'sessions', 'topics' (sessions: no sessions here; topics: no topics here)" in out, out
