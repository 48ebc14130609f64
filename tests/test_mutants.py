"""The kit catches broken brokers: every mutant fails the differential machine and
at least one scenario of the clause it breaks.

These test the kit, not a target, so they name no clause: they are not evidence that
any target conforms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from sbconform.testing.stateful import Divergence, differential_machine

from mutants import MUTANTS

ROOT = Path(__file__).resolve().parent.parent

#: mutant -> a scenario (-k expression) that must fail on it
SCENARIO_FOR = {
    "mutant-delivery-count": "an_expired_lock_makes_the_message_available_again",
    "mutant-complete-ignored": "a_completed_message_is_gone_for_good",
    "mutant-only-holder-settles": "another_receiver_of_the_entity",
    "mutant-expired-lock-settles": "settling_or_renewing_an_expired_lock",
    "mutant-defer-loses": "any_receiver_can_take_a_deferred_message",
    "mutant-abandon-waits": "abandon_makes_the_message_available_at_once",
    "mutant-ignores-partition-key": "messages_with_one_partition_key_share_a_partition",
    "mutant-ignores-properties-to-modify": "set_the_properties_to_modify",
}


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_differential_machine_catches(mutant) -> None:
    # Detection, not a minimal example, is the point here: skip shrinking.
    # It stops at the first divergence, so a generous budget costs little when it works.
    quick = settings(database=None, derandomize=True, report_multiple_bugs=False, phases=[Phase.generate], max_examples=1000)
    with pytest.raises(Divergence):
        run_state_machine_as_test(differential_machine(mutant), settings=quick)


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", sorted(SCENARIO_FOR))
def test_features_catch(mutant: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_features.py"),
         "--sb-target", mutant, "-k", SCENARIO_FOR[mutant]],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert " failed" in result.stdout, f"no scenario failed on {mutant}:\n{result.stdout[-2000:]}"
    assert result.returncode == 1, result.stdout[-2000:]
