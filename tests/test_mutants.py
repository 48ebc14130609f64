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

from mutants import MATRIX, MUTANTS, NEW_MUTANTS, RESULTS, SCENARIO_MUTANTS, scenario_parts

ROOT = Path(__file__).resolve().parent.parent

#: mutant -> a part of the name of a scenario that must fail on it (or a tuple of them: each must fail)
SCENARIO_FOR = {
    "mutant-delivery-count": "an_expired_lock_makes_the_message_available_again",
    "mutant-complete-ignored": "a_completed_message_is_gone_for_good",
    "mutant-only-holder-settles": "another_receiver_of_the_entity",
    "mutant-expired-lock-settles": "settling_or_renewing_an_expired_lock",
    "mutant-defer-loses": "any_receiver_can_take_a_deferred_message",
    "mutant-abandon-waits": "abandon_makes_the_message_available_at_once",
    "mutant-ignores-partition-key": ("messages_with_one_partition_key_share_a_partition", "messages_with_one_partition_key_share_a_partition_and_keep_their_order"),
    "mutant-ignores-properties-to-modify": "set_the_properties_to_modify",
    # the mutation analysis of the MUST clauses (tests/mutants.py NEW_MUTANTS): scenarios only
    "mutant-lock-duration-ignored": "the_lock_lasts_the_entitys_lock_duration",
    "mutant-lock-duration-clamped": "outofrange_descriptions_are_refused",
    "mutant-max-delivery-count-ignored": "past_the_max_delivery_count_the_message_is_deadlettered",
    "mutant-duplicates-not-detected": "a_duplicate_within_the_window_is_accepted_but_dropped",
    "mutant-duplicate-window-forever": "after_the_window_the_same_id_is_a_new_message",
    "mutant-duplicates-always-detected": "without_duplicate_detection_both_copies_are_delivered",
    "mutant-default-ttl-ignored": "the_entity_default_caps_a_messages_time_to_live",
    "mutant-expiry-not-dead-lettered": "with_deadlettering_on_expiration_expired_messages_go_to_the_deadletter_subqueue",
    "mutant-forward-dead-lettered-ignored": "a_queue_forwarding_its_dead_letters_sends_them",
    "mutant-send-disabled-ignored": "a_queue_whose_sends_are_disabled_refuses_sends",
    "mutant-quota-ignored": "a_full_entity_rejects_further_sends_with_quotaexceeded",
    "mutant-renew-lock-pretends": "the_holder_renews_the_lock_counted_from_the_renewal",
    "mutant-drop-keeps-locks": "a_dropped_connection_loses_its_locks",
    "mutant-second-complete-accepted": "completing_twice_is_refused_not_ignored",
    "mutant-receive-and-delete-locks": "receiveanddelete_consumes_the_message_even_if_the_receiver_is_lost",
    "mutant-receives-newest-first": ("messages_are_received_in_the_order_they_were_accepted",
                                     "messages_with_one_partition_key_share_a_partition_and_keep_their_order"),
    "mutant-lockless-settle-accepted": "a_message_received_and_deleted_carries_no_lock_to_settle",
    "mutant-dead-letter-drops-reason": "deadlettering_keeps_the_receivers_reason_and_description",
    "mutant-dead-letter-twice-deletes": "a_deadlettered_message_cannot_be_deadlettered_again",
    "mutant-deferred-lookup-quiet": "asking_for_a_sequence_number_that_is_not_deferred_fails",
    "mutant-peek-ignores-start": "peek_starts_at_a_sequence_number_and_returns_at_most_the_count_asked_for",
    "mutant-peek-shows-only-active": "peek_shows_locked_deferred_and_scheduled_messages_each_with_its_state",
    "mutant-message-ttl-ignored": "an_expired_message_is_not_delivered",
    "mutant-schedule-sends-now": "a_scheduled_message_waits_for_its_time",
    "mutant-cancel-ignored": "a_cancelled_scheduled_message_is_never_delivered",
    "mutant-session-state-not-kept": "session_state_starts_empty_and_outlives_the_session_lock",
    "mutant-renew-session-lock-pretends": "renewing_the_session_lock_extends_it_an_expired_one_is_lost",
    "mutant-session-lock-shared": "a_session_is_locked_by_one_receiver_at_a_time",
    "mutant-oversized-session-state-ignored": "a_session_state_holds_at_most_one_messages_size",
    "mutant-sessionless-accepted": "a_session_queue_refuses_a_message_without_a_session_id",
    "mutant-send-to-missing-dropped": "sending_to_an_entity_that_does_not_exist_fails",
    "mutant-long-ids-truncated": "a_message_id_longer_than_128_characters_is_refused",
    "mutant-locked-message-expires": "a_locked_message_can_be_completed_after_its_expiry",
    "mutant-dead-letters-expire": "deadlettered_messages_do_not_expire",
    "mutant-peek-takes-a-delivery": "peeking_locks_nothing",
    "mutant-redelivery-new-id": "an_expired_lock_makes_the_message_available_again_counted_as_a_delivery",
    "mutant-closed-session-stays-locked": "closing_a_session_receiver_releases_its_messages_without_counting_a_delivery",
    "mutant-receive-disabled-ignored": "a_queue_whose_receives_are_disabled_takes_sends_and_keeps_every_message_but_gives_none_out",
    "mutant-oversized-body-truncated": "a_message_over_the_maximum_size_is_rejected_with_the_details_of_the_rejection",
    "mutant-rejections-without-details": "a_message_over_the_maximum_size_is_rejected_with_the_details_of_the_rejection",
    "mutant-session-key-mismatch-accepted": "a_partition_key_that_differs_from_the_session_id_is_refused",
    "mutant-unkeyed-to-one-partition": "unkeyed_messages_go_roundrobin_over_the_partitions",
    "mutant-keyed-send-redirected": "a_keyed_message_whose_partition_is_down_is_refused_not_placed_elsewhere",
    "mutant-duplicate-by-id-only": "on_a_partitioned_entity_a_duplicate_is_the_same_message_id_with_the_same_partition_key",
    "mutant-partitioning-change-ignored": "partitioning_cannot_be_changed_after_creation",
    "mutant-sql-is-null-only-missing": "is_null_is_true_for_a_missing_property_and_for_a_null_value",
    "mutant-sql-like-matches-prefix": "like_with__and___not_like_and_escape",
    "mutant-sql-not-in-unknown-true": "in_and_not_in_and_unknown_on_the_left",
    "mutant-sql-names-case-sensitive": "property_names_are_caseinsensitive",
    "mutant-correlation-ignores-case": "correlation_filters_compare_strings_casesensitively",
    "mutant-correlation-any-property": "every_property_a_correlation_filter_names_must_match",
    "mutant-no-default-rule": "a_new_subscription_has_the_default_rule_which_selects_every_message_unchanged",
    "mutant-rollback-commits": "a_rollback_applies_nothing_and_the_settled_message_is_redelivered_when_its_lock_expires",
    "mutant-transactional-sends-at-once": "messages_sent_in_a_transaction_appear_only_when_it_commits",
    "mutant-transactional-settles-at-once": "a_completion_in_a_transaction_takes_effect_at_the_commit_and_the_message_stays_locked_until_then",
    "mutant-unknown-transaction-ignored": "a_discharged_transaction_or_another_connections_is_unknown",
    "mutant-defer-acts-as-abandon": "a_deferred_message_is_not_returned_by_normal_receives",
    "mutant-abandon-not-counted": "abandon_makes_the_message_available_at_once",
    "mutant-session-batch-reversed": ("a_sessions_messages_come_in_order_an_abandoned_one_comes_first_again",
                                      "sessions_keep_their_order_and_state_on_a_partitioned_entity"),
    "mutant-reenable-loses-messages": "a_queue_whose_receives_are_disabled_takes_sends_and_keeps_every_message_but_gives_none_out",
    "mutant-forward-to-missing-accepted": "autoforwarding_needs_an_existing_destination_on_creation_and_on_update",
    "mutant-forwarding-receiver-gets-nothing": "a_queue_that_autoforwards_refuses_receivers_its_deadletter_subqueue_does_not",
    "mutant-short-auto-delete-clamped": "autodelete_on_idle_is_at_least_5_minutes",
    "mutant-foreign-properties-dropped": "a_topic_has_no_lock_duration_or_max_delivery_count_its_subscriptions_do",
    "mutant-large-max-message-size-clamped": "a_standard_queue_cannot_be_given_a_max_message_size_above_256_kb",
    "mutant-large-max-size-clamped": "a_standard_queue_cannot_be_larger_than_5_gb_unless_partitioned",
    "mutant-large-property-truncated": "a_property_over_32_kb_is_refused_and_nothing_is_stored",
    "mutant-partition-quota-ignored": "a_standard_namespace_holds_at_most_100_partitioned_queues_and_topics",
    "mutant-unkeyed-transaction-accepted": "a_transactional_message_needs_a_partition_key",
    "mutant-peek-newest-first": "a_peek_on_a_nonpartitioned_queue_returns_its_oldest_message",
    "mutant-rule-name-replaced": "a_rule_name_is_unique_in_its_subscription",
    "mutant-one-copy-per-matching-rule": "rules_without_actions_are_ored_into_a_single_copy",
    "mutant-false-filter-selects-all": "the_true_filter_selects_everything_the_false_filter_nothing",
    "mutant-sql-exists-false-for-null": "exists_tests_whether_the_message_has_the_property",
    "mutant-sql-true-division": "numbers_promote_as_in_c_long_compares_with_double_long_division_truncates",
    "mutant-rule-name-not-stamped": "five_matching_rules_two_with_actions_three_copies",
    "mutant-filter-errors-dropped": "a_filter_naming_a_system_property_that_does_not_exist_deadletters_the_message",
    "mutant-lock-outlives-its-duration": "the_lock_lasts_the_entitys_lock_duration",
    "mutant-expired-lock-dead-letters": "settling_or_renewing_an_expired_lock_fails_with_messagelocklost",
    "mutant-expired-lock-renews": "settling_or_renewing_an_expired_lock_fails_with_messagelocklost",
    "mutant-dead-letter-complete-ignored": "the_deadletter_subqueue_supports_peeklock_and_receiveanddelete",
    "mutant-deferred-complete-ignored": "completing_a_deferred_message_removes_it_abandoning_leaves_it_deferred",
    "mutant-long-ttl-not-capped": "the_entity_default_caps_a_messages_time_to_live",
    "mutant-schedule-returns-one-number": "scheduling_several_messages_returns_a_sequence_number_for_each",
    "mutant-session-state-cleared-on-release": "session_state_starts_empty_and_outlives_the_session_lock",
    "mutant-expired-session-settles": "renewing_the_session_lock_extends_it_an_expired_one_is_lost",
    "mutant-batch-keeps-first": "an_accepted_send_completes_silently_and_the_message_is_stored",
    "mutant-message-id-as-partition-key": "without_duplicate_detection_the_message_id_is_not_a_key",
    "mutant-partition-outage-stops-entity": ("with_a_partition_down_unkeyed_sends_still_succeed_and_other_partitions_still_deliver",
                                             "a_keyed_send_fails_only_when_its_own_partition_is_down"),
    "mutant-update-during-outage-applied": "while_a_partition_is_down_update_and_delete_fail_instead_of_applying_partly",
    "mutant-last-rule-removed-selects-all": "a_subscription_without_rules_receives_nothing_and_the_others_still_get_their_copies",
    "mutant-sql-greater-or-equal-strict": "relational_operators_on_user_properties_with_and_without_the_user_scope",
    "mutant-sql-missing-is-zero": ("unknown_in_and_or_and_not", "arithmetic_in_conditions"),
    "mutant-invalid-filter-accepted": "an_invalid_sql_filter_is_refused_when_the_rule_is_created_saying_where",
    "mutant-via-sends-at-once": "send_via_the_transfer_entity_receive_from_one_queue_and_send_to_another_in_one_transaction",
    "mutant-expired-lock-loses-message": "an_expired_lock_makes_the_message_available_again_counted_as_a_delivery",
    "mutant-scheduled-keeps-its-number": "at_its_time_a_scheduled_message_gets_a_new_sequence_number",
    "mutant-next-session-without-messages": "the_next_available_session_is_one_that_has_messages_and_is_not_locked",
    "mutant-counts-one-partition": "get_sums_the_partitions_and_reports_limited_availability_while_one_is_down",
    "mutant-always-available": "get_sums_the_partitions_and_reports_limited_availability_while_one_is_down",
    "mutant-transaction-keys-unified": "all_messages_of_a_transaction_share_one_partition_key",
    "mutant-one-session-per-transaction": "on_a_nonpartitioned_session_queue_one_transaction_can_reach_several_sessions",
    "mutant-forward-to-update-ignored": "autoforwarding_from_a_partitioned_queue_can_be_enabled_by_an_update",
    "mutant-timed-out-commit-quiet": "a_transaction_times_out_two_minutes_after_its_first_operation",
    "mutant-failed-commit-quiet": "a_commit_one_of_whose_operations_can_no_longer_succeed_applies_none_of_them",
    "mutant-cross-entity-send-outside": "a_transaction_works_against_one_entity",
    "mutant-partitioning-ignored": "a_standard_namespace_holds_partitioned_and_nonpartitioned_entities_side_by_side",
    "mutant-sequence-numbers-not-monotonic": ("sequence_numbers_are_unique_and_increase_in_acceptance_order",
                                              "messages_with_one_partition_key_share_a_partition_and_keep_their_order"),
    "mutant-basic-is-standard": ("a_basic_namespace_has_queues_only", "a_basic_namespace_has_no_transactions"),
    "mutant-premium-partition-count-ignored": "in_a_partitioned_premium_namespace_every_entity_is_partitioned_with_the_namespaces_count",
    "mutant-transaction-sessions-split": "one_transaction_cannot_reach_several_sessions_of_a_partitioned_entity",
    "mutant-sql-property-function-unknown": "propertyname_and_pname_read_a_property_named_by_an_expression",
    "mutant-sql-system-properties-null": "system_properties_are_named_with_sys",
    "mutant-sql-doubled-quote-kept": "constants_long_decimal_scientific_boolean_strings_with_doubled_quotes",
    "mutant-sql-delimited-names-unknown": "delimited_and_quoted_identifiers",
    "mutant-transaction-quota-ignored": "a_transaction_holds_at_most_100_messages",
    "mutant-pipelined-sends-lost": "pipelined_sends_each_complete_and_every_message_is_stored",
    "mutant-duplicates-spread-over-partitions": "with_duplicate_detection_the_message_id_is_the_key_so_a_copy_meets_its_original",
    "mutant-action-system-properties-ignored": "actions_set_system_properties_and_compute_from_the_messages_properties",
    "mutant-correlation-user-properties-ignored": "a_correlation_filter_on_user_properties_of_several_types",
    "mutant-lock-not-exclusive": ("while_the_only_message_is_locked_a_competing_receiver_gets_nothing",
                                  "a_locked_message_is_invisible_to_a_competing_receiver_which_gets_the_next_one"),
    "mutant-one-subscription-gets-the-message": "every_subscription_gets_its_own_copy_settled_independently",
    "mutant-rule-change-empties-subscription": "rules_decide_on_arrival_changing_them_leaves_stored_messages_alone",
    "mutant-expired-deferred-dropped": "a_deferred_message_asked_for_after_its_expiry_is_deadlettered_not_returned",
}


def test_every_mutant_names_a_scenario_that_must_catch_it() -> None:
    # the paired and rules mutants are caught in tests/test_paired_*.py and tests/test_rules_config.py
    unnamed = [m.name for m in MUTANTS + SCENARIO_MUTANTS + NEW_MUTANTS if m.name not in SCENARIO_FOR]
    assert not unnamed, f"mutants no scenario is required to catch: {unnamed}"


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_differential_machine_catches(mutant) -> None:
    # Detection, not a minimal example, is the point here: skip shrinking.
    # It stops at the first divergence, so a generous budget costs little when it works.
    quick = settings(database=None, derandomize=True, report_multiple_bugs=False, phases=[Phase.generate], max_examples=1000)
    with pytest.raises(Divergence):
        run_state_machine_as_test(differential_machine(mutant), settings=quick)


@pytest.fixture(scope="module")
def scenario_outcomes(tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """mutant -> (test, outcome) of each phase of its scenarios, from one pytest run for all mutants."""
    results = tmp_path_factory.mktemp("mutants") / "results.jsonl"
    env = {**os.environ, MATRIX: json.dumps(SCENARIO_FOR), RESULTS: str(results),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    parts = sorted({p for m in SCENARIO_FOR for p in scenario_parts(SCENARIO_FOR[m])})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", "mutants", str(ROOT / "tests" / "test_features.py"),
         "-k", " or ".join(parts)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    outcomes: dict[str, list[tuple[str, str]]] = {m: [] for m in SCENARIO_FOR}
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        row = json.loads(line)
        outcomes[row["mutant"]].append((row["test"], row["outcome"]))
    outcomes["<stdout>"] = [("", result.stdout[-3000:])]
    return outcomes


@pytest.mark.needs("model-internals")
@pytest.mark.parametrize("mutant", sorted(SCENARIO_FOR))
def test_features_catch(mutant: str, scenario_outcomes) -> None:
    for part in scenario_parts(SCENARIO_FOR[mutant]):  # each scenario named must fail on the mutant
        assert any(part in test and outcome == "failed" for test, outcome in scenario_outcomes[mutant]), \
            f"no scenario {part!r} failed on {mutant}: {scenario_outcomes[mutant]}\n{scenario_outcomes['<stdout>'][0][1]}"
