"""Deliberately broken targets. The kit must catch every one of them.

Each mutant is the reference target with one documented behaviour broken, the way a
real broker or emulator might get it wrong: a ``TargetWrapper`` around a
``ReferenceTarget`` that overrides only what it breaks. ``tests/test_mutants.py`` runs the
differential machine and the features against each and requires a failure: a check
that cannot fail on these is not checking anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from sbreference import PING_CONTENT_TYPE, ErrorCode, ServiceBusError

from sbconform.targets import TargetWrapper, register
from sbconform.targets.reference import ReferenceTarget


class Mutant(TargetWrapper):
    """The reference target, with what a subclass overrides broken."""

    def __init__(self) -> None:
        super().__init__(ReferenceTarget())


class DeliveryCountAlwaysOne(Mutant):
    """Reports every delivery as the first (SETTLE-LOCK-010)."""

    name = "mutant-delivery-count"

    def receive(self, receiver, max_count=1, max_wait=None):
        return [replace(m, delivery_count=1) for m in super().receive(receiver, max_count, max_wait)]


class CompleteIgnored(Mutant):
    """Acknowledges complete but keeps the message (SETTLE-COMP-001)."""

    name = "mutant-complete-ignored"

    def complete(self, receiver, message):
        self.namespace.renew_lock(receiver.private, receiver.path, self._token(message))


class OnlyHolderSettles(Mutant):
    """Refuses a lock token from any receiver but the one that took the message, with
    message-lock-lost, as if the lock belonged to the receiver and not to the entity
    (SETTLE-LOCK-011: the reading the catalog held before issue 14)."""

    name = "mutant-only-holder-settles"

    def _refuse_others(self, receiver, message) -> None:
        store = self.namespace.receiving_store(receiver.path)
        lock = store.locks.get(self._token(message))
        if lock is not None and lock.holder != receiver.private:
            raise ServiceBusError(
                ErrorCode.MESSAGE_LOCK_LOST,
                "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.",
            )

    def complete(self, receiver, message):
        self._refuse_others(receiver, message)
        super().complete(receiver, message)

    def abandon(self, receiver, message, properties=None):
        self._refuse_others(receiver, message)
        super().abandon(receiver, message, properties)

    def defer(self, receiver, message, properties=None):
        self._refuse_others(receiver, message)
        super().defer(receiver, message, properties)

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        self._refuse_others(receiver, message)
        super().dead_letter(receiver, message, reason, description, properties)

    def renew_lock(self, receiver, message):
        self._refuse_others(receiver, message)
        return super().renew_lock(receiver, message)


class ExpiredLockSettles(Mutant):
    """Claims success when completing a lost lock (SETTLE-LOCK-008)."""

    name = "mutant-expired-lock-settles"

    def complete(self, receiver, message):
        try:
            super().complete(receiver, message)
        except ServiceBusError as error:
            if error.code is not ErrorCode.MESSAGE_LOCK_LOST:
                raise


class DeferLosesMessage(Mutant):
    """Defer deletes the message (SETTLE-DEFR-001)."""

    name = "mutant-defer-loses"

    def defer(self, receiver, message, properties=None):
        self.namespace.complete(receiver.private, receiver.path, self._token(message))


class AbandonWaitsForExpiry(Mutant):
    """Abandon does nothing; the message only comes back when the lock expires (SETTLE-ABAN-001)."""

    name = "mutant-abandon-waits"

    def abandon(self, receiver, message, properties=None):
        self._token(message)


class IgnoresPropertiesToModify(Mutant):
    """Settles as asked but drops the properties to modify (SETTLE-MOD-001)."""

    name = "mutant-ignores-properties-to-modify"

    def abandon(self, receiver, message, properties=None):
        super().abandon(receiver, message)

    def defer(self, receiver, message, properties=None):
        super().defer(receiver, message)

    def dead_letter(self, receiver, message, reason=None, description=None, properties=None):
        super().dead_letter(receiver, message, reason, description)


class IgnoresPartitionKey(Mutant):
    """Spreads keyed messages round-robin as if they had no key (PART-KEY-006)."""

    name = "mutant-ignores-partition-key"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [replace(m, partition_key=None) for m in messages], batch)


class PingsDelivered(Mutant):
    """Hands pings to receivers like any message (PAIR-PING-002)."""

    name = "mutant-pings-delivered"
    MARK = "sbconform-mutant-ping"

    def send(self, sender, messages, batch=False):
        return super().send(sender, [self._disguise(m) for m in messages], batch)

    def _disguise(self, message):
        if message.content_type != PING_CONTENT_TYPE:
            return message
        return message.with_changes(content_type=None, application_properties={**message.application_properties, self.MARK: True})

    def receive(self, receiver, max_count=1, max_wait=None):
        out = []
        for m in super().receive(receiver, max_count, max_wait):
            if self.MARK in m.application_properties:
                props = {k: v for k, v in m.application_properties.items() if k != self.MARK}
                m = replace(m, content_type=PING_CONTENT_TYPE, application_properties=props)
            out.append(m)
        return out


MUTANTS = [DeliveryCountAlwaysOne, CompleteIgnored, OnlyHolderSettles, ExpiredLockSettles, DeferLosesMessage, AbandonWaitsForExpiry, IgnoresPartitionKey]

#: Mutants of paired-namespace behaviour: the settlement differential machine does not
#: exercise them (tests/test_paired_stateful.py does).
PAIRED_MUTANTS = [PingsDelivered]



class RuleActionsIgnored(Mutant):
    """Accepts rules with actions but never applies them nor copies for them (RULES-ACT-001)."""

    name = "mutant-rule-actions-ignored"

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule

        super().add_rule(subscription_path, Rule(rule.name, rule.filter, None))


class TwoValuedSqlLogic(Mutant):
    """Evaluates SQL filters with two-valued logic: UNKNOWN counts as FALSE at once, so
    NOT (missing = 1) selects the message (RULES-SQL-003/004)."""

    name = "mutant-two-valued-sql"

    def add_rule(self, subscription_path, rule):
        from sbreference import Rule, SqlFilter
        from sbreference.sqlfilter import UNKNOWN, Evaluator

        class TwoValued(Evaluator):
            def eval(self, node):
                out = super().eval(node)
                return False if out is UNKNOWN and node[0] in ("cmp", "like", "in") else out

        class TwoValuedFilter(SqlFilter):
            def matches(self, props):
                return TwoValued(props).matches(self.parsed)

        f = rule.filter
        if isinstance(f, SqlFilter):
            f = TwoValuedFilter(f.expression, f.parameters)
        super().add_rule(subscription_path, Rule(rule.name, f, rule.action))


#: Mutants of subscription rules (tests/test_rules_config.py runs the rules features against them).
RULES_MUTANTS = [RuleActionsIgnored, TwoValuedSqlLogic]

#: caught by scenarios only (the differential machine settles without properties to modify)
SCENARIO_MUTANTS = [IgnoresPropertiesToModify]

for _mutant in MUTANTS + PAIRED_MUTANTS + RULES_MUTANTS + SCENARIO_MUTANTS:
    register(_mutant.name, lambda _cls=_mutant, **options: _cls())


# ------------------------------------------------------------ the scenario matrix
# ``pytest -p mutants tests/test_features.py`` with SBCONFORM_MUTANT_MATRIX set runs, in one
# process, each scenario named in the matrix once per mutant that names it (the pytest
# start-up and the collection of every feature cost seconds: once for all mutants, not once
# each). Each test's outcome is written as a JSON line to SBCONFORM_MUTANT_RESULTS.
MATRIX = "SBCONFORM_MUTANT_MATRIX"  # JSON: {mutant name: a part of a scenario's test name}
RESULTS = "SBCONFORM_MUTANT_RESULTS"  # a file path


def pytest_generate_tests(metafunc) -> None:
    matrix = json.loads(os.environ.get(MATRIX, "{}"))
    mutants = sorted(m for m, part in matrix.items() if part in metafunc.definition.name)
    if mutants:
        metafunc.fixturenames.append("sb_mutant")
        metafunc.parametrize("sb_mutant", mutants)


def pytest_runtest_setup(item) -> None:
    from sbconform.pytest_plugin import target_session

    callspec = getattr(item, "callspec", None)
    if callspec is not None and "sb_mutant" in callspec.params:
        target_session(item.config).name = callspec.params["sb_mutant"]
        item.user_properties.append(("sb_mutant", callspec.params["sb_mutant"]))


def pytest_runtest_logreport(report) -> None:
    mutant = dict(report.user_properties).get("sb_mutant") if os.environ.get(RESULTS) else None
    if mutant is not None:
        with open(os.environ[RESULTS], "a", encoding="utf-8") as out:
            out.write(json.dumps({"mutant": mutant, "test": report.nodeid, "when": report.when, "outcome": report.outcome}) + "\n")
