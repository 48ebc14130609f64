"""The kit catches broken brokers: every mutant fails the differential machine and
at least one scenario of the clause it breaks.

These test the kit, not a target, so they name no clause: they are not evidence that
any target conforms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from sbconform.testing.stateful import Divergence, differential_machine

from mutants import MATRIX, MUTANTS, RESULTS

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


@pytest.fixture(scope="module")
def scenario_outcomes(tmp_path_factory) -> dict[str, set[str]]:
    """mutant -> the outcomes of its scenario's phases, from one pytest run for all mutants."""
    results = tmp_path_factory.mktemp("mutants") / "results.jsonl"
    env = {**os.environ, MATRIX: json.dumps(SCENARIO_FOR), RESULTS: str(results),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutants", str(ROOT / "tests" / "test_features.py"),
         "-k", " or ".join(sorted(set(SCENARIO_FOR.values())))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    outcomes: dict[str, set[str]] = {m: set() for m in SCENARIO_FOR}
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        row = json.loads(line)
        outcomes[row["mutant"]].add(row["outcome"])
    outcomes["<stdout>"] = {result.stdout[-3000:]}
    return outcomes


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", sorted(SCENARIO_FOR))
def test_features_catch(mutant: str, scenario_outcomes) -> None:
    assert "failed" in scenario_outcomes[mutant], \
        f"no scenario {SCENARIO_FOR[mutant]!r} failed on {mutant}: {scenario_outcomes[mutant]}\n{scenario_outcomes['<stdout>']}"
