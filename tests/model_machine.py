"""The shared base of the model's stateful tests (test_model_stateful, test_sessions_stateful,
test_partitioning_stateful): the namespace under test is ``self.ns``, made by the
machine's ``@initialize`` rule, and time passes on its virtual clock by whole seconds, up
to ``max_seconds`` at a step.

Invariants need no guard against running before ``@initialize``: Hypothesis checks them
only once every initialize rule has run (``invariant(check_during_init=False)``, the
default), and runs no other rule before either.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from sbreference import SECOND, Namespace


class ModelMachine(RuleBasedStateMachine):
    ns: Namespace
    #: the longest single step of time, in seconds
    max_seconds = 10

    @rule(data=st.data())
    def time_passes(self, data: st.DataObject) -> None:
        seconds = data.draw(st.integers(0, self.max_seconds), label="seconds")
        self.ns.clock.advance(seconds * SECOND)  # the machines expire their ledgers lazily, before each rule
