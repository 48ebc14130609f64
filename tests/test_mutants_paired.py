"""The paired scenarios catch broken paired clients: every mutant of tests/mutants_paired.py
(and the broker mutant of PAIR-PING-002 in tests/mutants.py) fails each scenario it names.

Like tests/test_mutants.py, these test the kit, not a target, so they name no clause. All
the scenario runs share one pytest process (its start-up and the collection of the features
are paid once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutants import MATRIX, RESULTS, scenario_parts
from mutants_paired import PAIRED_BROKER_MUTANTS, PAIRED_CLIENT_MUTANTS

ROOT = Path(__file__).resolve().parent.parent

#: mutant -> a part of the name of a scenario that must fail on it (or a tuple of them: each must fail)
SCENARIO_FOR = {
    "mutant-pings-delivered": ("the_broker_never_delivers_a_ping_in_either_receive_mode", "no_subscription_delivers_a_ping",
                               "the_pings_of_a_failedover_entity_never_reach_its_receivers"),
    "mutant-session-pings-delivered": "a_primary_queue_requiring_sessions_accepts_the_pings_never_delivers_them_and_fails_back",
    "mutant-pings-refused": ("the_first_successful_ping_sends_new_messages_to_the_primary_at_once_for_every_sender",
                             "a_primary_queue_requiring_sessions_accepts_the_pings_never_delivers_them_and_fails_back",
                             "a_ping_the_broker_accepts_is_billed_as_one_send_like_any_message"),
    "mutant-paired-never-pings": ("pairing_engages_the_five_automatic_behaviours", "pairing_engages_the_five_automatic_behaviours_in_seconds"),
    "mutant-paired-backlog-count-unchecked": "a_pairing_with_fewer_than_one_backlog_queue_is_refused",
    "mutant-paired-one-backlog-queue-by-default": "ten_backlog_queues_by_default",
    "mutant-paired-failover-interval-ignored": ("failures_are_accepted_for_the_failover_interval_then_the_entity_fails_over",
                                                "a_nontransient_failure_or_a_timeout_starts_the_failover_timer"),
    "mutant-paired-syphon-always": ("only_a_pairing_that_runs_the_syphon_receives_from_the_backlog_queues",
                                    "a_pairing_without_the_syphon_never_receives_from_the_backlog_queues_one_with_it_moves_them"),
    "mutant-paired-backlog-paths-from-one": "the_backlog_queues_are_named_after_the_primary_namespace",
    "mutant-paired-backlog-created-with-defaults": "a_backlog_queue_the_pairing_creates_has_the_documented_description",
    "mutant-paired-backlog-recreated": "pairing_creates_only_the_missing_backlog_queues_and_keeps_what_the_others_hold",
    "mutant-paired-extra-backlog-used": "extra_backlog_queues_are_left_in_place_and_never_used",
    "mutant-paired-extra-backlog-deleted": "extra_backlog_queues_are_left_in_place_and_never_used",
    "mutant-paired-backlog-updated": "a_backlog_queue_described_differently_is_used_as_it_is",
    "mutant-paired-mirrors-to-backlog": ("while_the_primary_is_healthy_nothing_changes", "while_the_primary_is_healthy_nothing_changes_whatever_time_passes"),
    "mutant-paired-timeout-not-counted": "a_nontransient_failure_or_a_timeout_starts_the_failover_timer[timeout]",
    "mutant-paired-every-failure-counts": tuple(f"transient_errors_and_client_errors_never_fail_the_entity_over[{code}]" for code in
                                                ("server-busy", "connection-lost", "unauthorized", "argument-error", "invalid-operation")),
    "mutant-paired-failover-at-next-send": "failover_engages_once_the_interval_has_passed_with_no_successful_send",
    "mutant-paired-engaging-send-fails": ("with_a_failover_interval_of_zero_the_first_failure_that_counts_fails_the_entity_over", "failover_is_per_entity"),
    "mutant-paired-success-keeps-timer": "a_successful_send_within_the_interval_stops_the_timer",
    "mutant-paired-namespace-wide-failover": "failover_is_per_entity",
    "mutant-paired-tries-primary-first": "after_failover_nothing_is_sent_to_the_primary_until_a_ping_succeeds",
    "mutant-paired-ping-task-starts-late": ("after_failover_nothing_is_sent_to_the_primary_until_a_ping_succeeds",
                                            "a_ping_is_an_empty_message_with_the_ping_content_type_and_one_second_to_live",
                                            "every_failedover_entity_of_every_factory_is_pinged_and_only_those"),
    "mutant-paired-failed-over-dropped": "failedover_messages_wait_in_a_backlog_queue_not_in_the_primary_entity",
    "mutant-paired-backlog-failure-not-retried": "a_failing_backlog_queue_is_pulled_from_the_rotation_for_every_sender_of_the_factory",
    "mutant-paired-queue-skipped-not-pulled": "a_failing_backlog_queue_is_pulled_from_the_rotation_for_every_sender_of_the_factory",
    "mutant-paired-no-queue-left-quiet": "with_no_backlog_queue_left_in_the_rotation_the_caller_gets_the_error",
    "mutant-paired-failover-per-client": "once_an_entity_has_failed_over_every_sender_of_the_factory_sends_to_the_backlog",
    "mutant-paired-pick-per-message": "each_client_keeps_one_random_backlog_queue_and_the_picks_spread_over_all_of_them",
    "mutant-paired-everyone-picks-first": "each_client_keeps_one_random_backlog_queue_and_the_picks_spread_over_all_of_them",
    "mutant-paired-session-id-kept": "the_session_id_moves_to_xmssessionid",
    "mutant-paired-time-to-live-kept": ("the_time_to_live_moves_to_xmstimetolive_and_the_backlog_copy_does_not_expire",
                                        "the_time_to_live_moves_to_xmstimetolive_and_the_backlog_copy_outlives_it"),
    "mutant-paired-no-destination": "messages_for_several_entities_share_a_backlog_queue_each_naming_its_destination",
    "mutant-paired-oversize-pulls-queue": "a_message_that_fits_the_primary_but_not_the_backlog_fails_with_a_size_error_and_nothing_is_lost",
    "mutant-paired-ping-lives-long": "a_ping_is_an_empty_message_with_the_ping_content_type_and_one_second_to_live",
    "mutant-paired-pings-at-failover": ("by_default_a_failedover_entity_is_pinged_once_a_minute",
                                        "every_failedover_entity_of_every_factory_is_pinged_and_only_those"),
    "mutant-paired-one-pinger-per-entity": "every_failedover_entity_of_every_factory_is_pinged_and_only_those",
    "mutant-paired-ping-interval-ignored": "every_failedover_entity_of_every_factory_is_pinged_and_only_those",
    "mutant-paired-pings-healthy-entities": ("while_the_primary_is_healthy_nothing_changes", "pings_stop_once_the_entity_is_available_again_in_seconds"),
    "mutant-paired-fails-back-for-new-clients": "the_first_successful_ping_sends_new_messages_to_the_primary_at_once_for_every_sender",
    "mutant-paired-pings-never-stop": ("pings_stop_once_the_entity_is_available_again_in_seconds", "pings_stop_once_the_entity_is_available_again"),
    "mutant-paired-drains-on-fail-back": ("without_a_syphon_failedover_messages_stay_in_the_backlog_queues",
                                          "without_a_syphon_failedover_messages_stay_in_the_backlog_queues_past_their_time_to_live"),
    "mutant-paired-syphon-loses-refused": ("the_syphon_delivers_each_message_to_its_own_destination_once_that_is_available",
                                           "each_message_reaches_its_own_destination_once_that_is_available_exactly_once"),
    "mutant-paired-syphon-one-batch-per-poll": "the_syphon_empties_a_backlog_queue_holding_more_messages_than_one_receive_returns",
    "mutant-paired-syphon-head-of-line": ("the_syphon_delivers_each_message_to_its_own_destination_once_that_is_available",
                                          "each_message_reaches_its_own_destination_once_that_is_available_exactly_once"),
    "mutant-paired-syphon-no-translation": ("the_syphon_translates_the_properties_back", "the_syphon_translates_the_properties_back_and_each_message_arrives_once"),
    "mutant-paired-syphon-short-poll": "each_syphon_receive_is_a_15minute_long_poll_that_ends_early_only_when_a_message_arrives",
    "mutant-paired-no-grace": "a_partner_that_closes_within_5_seconds_ends_closed_not_faulted",
    "mutant-paired-faults-without-syphon": "without_the_syphon_in_the_process_nothing_is_faulted",
    "mutant-paired-partner-never-faulted": "the_syphon_faults_the_partner_still_open_5_seconds_later",
    # caught since the reference's secondary namespace has a name of its own (it was the primary's)
    "mutant-paired-backlog-named-after-secondary": "the_backlog_queues_are_named_after_the_primary_namespace",
}

#: mutants no scenario can catch today, and why: each must still pass the scenario named (strict
#: xfail), so that the day it is caught it moves to SCENARIO_FOR
SURVIVORS: dict[str, str] = {}


def test_every_paired_mutant_names_a_scenario_that_must_catch_it() -> None:
    unnamed = [m.name for m in PAIRED_BROKER_MUTANTS + PAIRED_CLIENT_MUTANTS if m.name not in {**SCENARIO_FOR, **SURVIVORS}]
    assert not unnamed, f"paired mutants no scenario is required to catch: {unnamed}"


@pytest.fixture(scope="module")
def scenario_outcomes(tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """mutant -> (test, outcome) of each phase of its scenarios, from one pytest run for all mutants."""
    results = tmp_path_factory.mktemp("paired-mutants") / "results.jsonl"
    # the matrix names scenarios (an outline's examples all run; the check below picks one out)
    matrix = {m: sorted({p.split("[")[0] for p in scenario_parts(parts)}) for m, parts in {**SCENARIO_FOR, **SURVIVORS}.items()}
    env = {**os.environ, MATRIX: json.dumps(matrix), RESULTS: str(results),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    parts = sorted({p for names in matrix.values() for p in names})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", "mutants", "-p", "mutants_paired",
         str(ROOT / "tests" / "test_features.py"), "-k", " or ".join(parts)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    outcomes: dict[str, list[tuple[str, str]]] = {m: [] for m in matrix}
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        row = json.loads(line)
        if row["when"] == "call":  # caught by the scenario's steps, not by an error setting it up or tearing it down
            outcomes[row["mutant"]].append((row["test"], row["outcome"]))
    outcomes["<stdout>"] = [("", result.stdout[-3000:])]
    return outcomes


class NotCaught(AssertionError):
    """A scenario a mutant names passed on it."""


def _caught(mutant: str, parts, scenario_outcomes) -> None:
    ran = [test for test, _ in scenario_outcomes[mutant]]
    assert ran, f"no scenario ran on {mutant}: {scenario_outcomes['<stdout>'][0][1]}"
    for part in scenario_parts(parts):  # each scenario named must fail on the mutant
        if not any(_names(test, part) and outcome == "failed" for test, outcome in scenario_outcomes[mutant]):
            raise NotCaught(f"no scenario {part!r} failed on {mutant}: {scenario_outcomes[mutant]}\n{scenario_outcomes['<stdout>'][0][1]}")


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", sorted(SCENARIO_FOR))
def test_paired_scenarios_catch(mutant: str, scenario_outcomes) -> None:
    _caught(mutant, SCENARIO_FOR[mutant], scenario_outcomes)


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", sorted(SURVIVORS) or [pytest.param(None, marks=pytest.mark.skip(reason="no known survivor"))])
@pytest.mark.xfail(strict=True, raises=NotCaught, reason="a known hole (SURVIVORS): its scenario cannot see this mutant yet")
def test_known_survivors_still_survive(mutant: str, scenario_outcomes) -> None:
    _caught(mutant, SURVIVORS[mutant], scenario_outcomes)


def _names(test: str, part: str) -> bool:
    """``test`` (a node id with its mutant parameter) is the scenario ``part`` names: ``part[example]``
    names one example of an outline."""
    if "[" not in part:
        return part in test
    name, example = part[:-1].split("[", 1)
    return name in test and test.endswith(f"-{example}]")
