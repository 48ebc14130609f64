"""The wheel, installed alone in a fresh virtual environment, certifies with no checkout.

Builds the wheel from this checkout (no network: ``--no-build-isolation``), installs it with
``--no-deps`` into a new venv whose dependencies come from the running interpreter's
site-packages (a ``.pth`` line, so nothing is downloaded), then from a directory outside
the checkout runs ``sbconform spec check``, ``sbconform certify --target reference`` and
``sbconform certify --target sdk`` against an ``sbconform serve`` the installed package
started. About a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory, sbconform_wheel) -> Path:
    wheel = sbconform_wheel  # built once per run (conftest.py), offline
    root = tmp_path_factory.mktemp("installed")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    import pytest as _pytest

    deps = Path(_pytest.__file__).resolve().parent.parent  # where this interpreter's dependencies live
    (site / "_deps.pth").write_text(f"{deps}\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=300, cwd=root)
    if install.returncode != 0 and "no such option: --python" in install.stderr:  # pip < 22.3
        install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                                  "--prefix", str(env_dir), str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    return env_dir


def run(env_dir: Path, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in (env or os.environ).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(env_dir / "bin" / "sbconform"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=clean)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed, tmp_path) -> None:
    probe = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "import sbconform, sbspec, sbreference, importlib.util as u; from sbconform.coverage import kit_root; "
                            "print(sbconform.__file__); print(kit_root()); "
                            "print(u.find_spec('spec') is None and u.find_spec('reference') is None)"],
                           capture_output=True, text=True, cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")})
    assert probe.returncode == 0, probe.stderr
    package, kit, no_generic_names = probe.stdout.split()
    assert str(installed) in package and not package.startswith(str(REPO))
    assert no_generic_names == "True", "the wheel installs a top-level 'spec' or 'reference' package"
    assert kit.endswith("sbconform/_kit") and (Path(kit) / "features" / "settlement").is_dir()


def test_spec_check_sees_the_features_of_the_wheel(installed, tmp_path) -> None:
    result = run(installed, "spec", "check", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "uncovered" in result.stdout


def test_the_wheel_certifies_the_reference(installed, tmp_path) -> None:
    result = run(installed, "certify", "--target", "reference", "--clause", "settlement", "--hypothesis-profile", "dev",
                 "--report-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    settlement = [c for c in report["clauses"].values() if c["area"] == "settlement"]
    assert settlement and all(c["status"] == "pass" for c in settlement), \
        {cid: c["reason"] for cid, c in report["clauses"].items() if c["area"] == "settlement" and c["status"] != "pass"}


def test_the_wheel_certifies_an_sbconform_serve_endpoint(installed, tmp_path) -> None:
    pytest.importorskip("azure.servicebus", reason="the sdk extra is not installed")
    import re

    serve = subprocess.Popen([str(installed / "bin" / "sbconform"), "serve", "--port", "0"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = serve.stdout.readline()
        port = re.search(r"listening on [^:]+:(\d+)", first)
        assert port, first + serve.stdout.read()
        connection_string = serve.stdout.readline().strip()
        # the scenarios only (test arguments name the kit's files): the differential machine takes
        # half a minute in real time, and tests/test_sdk_certify.py runs it from the checkout
        result = run(installed, "certify", "--target", "sdk", "--clause", "SETTLE-DEFR-001", "--report-dir",
                     str(tmp_path / "r"), "--", "tests/test_features.py", cwd=tmp_path, env={**os.environ, "SBCONFORM_CONNECTION_STRING": connection_string})
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        report = json.loads((tmp_path / "r" / "report.json").read_text())
        assert report["clauses"]["SETTLE-DEFR-001"]["status"] == "pass", report["clauses"]["SETTLE-DEFR-001"]
        assert "SAS_KEY_VALUE" not in (tmp_path / "r" / "report.json").read_text() + result.stdout
    finally:
        serve.terminate()
        serve.wait(10)


def test_make_certify_installs_only_what_certifying_the_reference_needs(tmp_path) -> None:
    import shutil

    if not shutil.which("make"):
        pytest.skip("no make")
    plan = subprocess.run(["make", "-n", f"VENV={tmp_path / 'venv'}", "certify"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    installs = [line for line in plan.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert installs == [f"{tmp_path / 'venv'}/bin/python -m pip install --quiet -e '.[test]'"], plan.stdout
    full = subprocess.run(["make", "-n", f"VENV={tmp_path / 'venv'}", "test"], cwd=REPO, capture_output=True, text=True,
                          timeout=60).stdout
    assert "spark" in full and "sdk" in full and "containers" in full


def test_certify_collects_every_test_without_the_optional_extras(tmp_path) -> None:
    """``make certify`` installs only the test extra: every test module must collect (skipping
    what needs proton, the SDK, Spark or containers) when those packages are absent. A module
    importing one of them unguarded broke every certification run at collection."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import importlib.abc, sys\n"
        "BLOCKED = ('proton', 'cproton', 'azure', 'pyspark', 'pyarrow', 'testcontainers', 'docker')\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)', name=name)\n"
        "sys.meta_path.insert(0, Block())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and " error" not in done.stdout.splitlines()[-1], done.stdout[-3000:]
