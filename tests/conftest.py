"""Test configuration: Hypothesis profiles and the shared BDD steps."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from steps.common import *  # noqa: F401,F403  (step definitions and the `world` fixture)
import mutants  # noqa: F401,E402  (registers the deliberately broken targets)

settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=30, stateful_step_count=30, deadline=None)
settings.register_profile("thorough", max_examples=2000, stateful_step_count=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
