"""Test configuration: Hypothesis profiles, the BDD steps, the mutant targets.

Every module in ``tests/steps/`` is loaded here, so its step definitions reach every
feature: a new area adds a step module, nothing else.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from hypothesis import HealthCheck, settings

import mutants  # noqa: F401  (registers the deliberately broken targets)
import steps

for _info in pkgutil.iter_modules(steps.__path__):
    _module = importlib.import_module(f"steps.{_info.name}")
    globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})

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
