"""Stateful machines run against a target: on one whose operations take real time (it has a
``clock_tolerance``: the SDK target, virtual time or not) a small profile runs,
``SBCONFORM_REALTIME_EXAMPLES`` examples of ``SBCONFORM_REALTIME_STEPS`` steps (2 x 8 by
default); elsewhere the loaded profile."""

from __future__ import annotations

import os
from typing import Any, Callable

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test


def run_machine_on(target: Any, machine: Callable[[], RuleBasedStateMachine]) -> None:
    if getattr(target, "clock_tolerance", 0) > 0:
        small = settings(
            settings(),  # the loaded profile, with fewer and shorter examples
            max_examples=int(os.environ.get("SBCONFORM_REALTIME_EXAMPLES", "2")),
            stateful_step_count=int(os.environ.get("SBCONFORM_REALTIME_STEPS", "8")),
            deadline=None,
        )
        run_state_machine_as_test(machine, settings=small)
    else:
        run_state_machine_as_test(machine)
