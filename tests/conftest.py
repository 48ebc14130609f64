"""Test configuration: Hypothesis profiles, the BDD steps, the mutant targets.

Every module in ``tests/steps/`` is loaded here, so its step definitions reach every
feature: a new area adds a step module, nothing else.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
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


@pytest.fixture(scope="session")
def spark():
    """One small local Spark session for the whole run (the JVM takes seconds to start): the
    tests that replay on Spark in this process use it, ``sbconform replay`` run in this
    process too (it leaves a session it did not start running)."""
    pytest.importorskip("pyspark")
    import shutil

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sbconform.trace.replay import spark_session

    session = spark_session("local[2]", "sbconform-tests", {"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sbconform_wheel(tmp_path_factory) -> Path:
    """This checkout's wheel, built once per run for the tests that install it or ship it to
    Spark (offline: ``--no-build-isolation``, with the running interpreter's setuptools)."""
    try:
        from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1 builds wheels itself)
    except ImportError:
        pytest.fail("building the wheel offline needs setuptools>=70.1 (the test extra): pip install -e '.[test]'")
    root = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(root / "dist"), str(Path(__file__).resolve().parent.parent)],
                           capture_output=True, text=True, timeout=300, cwd=root)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (root / "dist").glob("sbconform-*.whl")
    return wheel


# `make test` runs the test files on two processes (pytest-xdist, --dist loadfile: a file's tests
# on one process, so a module's fixtures, a certification run or a Spark session, are made once).
# Files that share something outside the process hold a lock for the whole module, so that no two
# of them run at once, in this run or in another run on this machine: the container engine (the
# sweep and emulator tests count the labelled containers of the stand-in images that others start
# too). (clients/js's npm ci is under a lock of its own: test_js_flows._installed.)
SHARED_OUTSIDE = {
    "test_container.py": "container-engine", "test_container_sweep.py": "container-engine",
    "test_emulator.py": "container-engine",
}


@pytest.fixture(scope="module", autouse=True)
def _one_at_a_time_outside(request):
    """Holds the lock of what this module shares outside the process (autouse: taken before the
    module's own fixtures, which build images), released at its end."""
    group = SHARED_OUTSIDE.get(request.path.name)
    if group is None:
        yield
        return
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / f"sbconform-tests-{group}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        yield
