"""Preflight: a target that cannot be used as configured is the user's set-up, not a verdict.

Each case ends in one line on stderr naming the cause, exit 2, and no report.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def sbconform(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sbconform.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)


def one_line(run: subprocess.CompletedProcess) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_a_connection_string_that_is_not_one(tmp_path: Path) -> None:
    run = sbconform("certify", "--target", "sdk", "--connection-string", "hello", "--report-dir", str(tmp_path))
    assert run.returncode == 2
    assert "not a Service Bus connection string" in one_line(run)
    assert not (tmp_path / "report.json").exists()


def test_a_closed_port_names_host_and_port(tmp_path: Path) -> None:
    port = closed_port()
    cs = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=SECRET123;UseDevelopmentEmulator=true;"
    run = sbconform("certify", "--target", "sdk", "--connection-string", cs, "--report-dir", str(tmp_path))
    assert run.returncode == 2
    line = one_line(run)
    assert f"nothing listens on 127.0.0.1:{port}" in line and "SECRET123" not in line
    assert not (tmp_path / "report.json").exists()


def test_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    cs = "Endpoint=sb://no-such-host.invalid;SharedAccessKeyName=k;SharedAccessKey=x;UseDevelopmentEmulator=true;"
    run = sbconform("certify", "--target", "sdk", "--report-dir", str(tmp_path),
                    env={**os.environ, "SBCONFORM_CONNECTION_STRING": cs})
    assert run.returncode == 2
    assert "cannot resolve 'no-such-host.invalid'" in one_line(run)


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")
    from serve_support import Serve

    serve = Serve()
    yield serve
    serve.stop()


def test_a_wrong_key_is_an_authentication_error_not_a_verdict(server, tmp_path: Path) -> None:
    pytest.importorskip("azure.servicebus", reason="the sdk extra is not installed")
    cs = (f"Endpoint=sb://localhost:{server.port};SharedAccessKeyName=RootManageSharedAccessKey;"
          "SharedAccessKey=WRONG-KEY-42;UseDevelopmentEmulator=true;")
    run = sbconform("certify", "--target", "sdk", "--connection-string", cs, "--report-dir", str(tmp_path))
    assert run.returncode == 2
    line = one_line(run)
    assert f"authentication refused by sb://localhost:{server.port}: wrong key or key name?" in line
    assert "WRONG-KEY-42" not in run.stdout + run.stderr
    assert not (tmp_path / "report.json").exists()


def test_a_wrong_key_in_a_plain_pytest_run_is_a_usage_error(server) -> None:
    pytest.importorskip("azure.servicebus", reason="the sdk extra is not installed")
    cs = (f"Endpoint=sb://localhost:{server.port};SharedAccessKeyName=RootManageSharedAccessKey;"
          "SharedAccessKey=WRONG-KEY-42;UseDevelopmentEmulator=true;")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "tests/test_features.py", "-k",
                          "deferred", "--sb-target", "sdk"], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SBCONFORM_CONNECTION_STRING": cs})
    assert run.returncode == 4  # pytest's usage error: nothing ran
    assert "authentication refused" in run.stderr and "WRONG-KEY-42" not in run.stdout + run.stderr


def test_the_right_key_passes_preflight(server) -> None:
    from sbconform.targets.preflight import check

    check("sdk", {"connection_string": server.connection_string})  # raises on failure
    check("sdk", {"connection_string": server.connection_string, "control": "amqp"})


def test_a_missing_container_engine(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    env["PATH"] = str(empty)
    if Path("/var/run/docker.sock").exists():
        pytest.skip("a Docker socket exists on this machine")
    run = sbconform("certify", "--target", "container", "--report-dir", str(tmp_path / "r"), env=env)
    assert run.returncode == 2
    assert "no container engine" in one_line(run)
    assert not (tmp_path / "r" / "report.json").exists()


def test_an_image_that_cannot_be_built_is_one_preflight_line(monkeypatch) -> None:
    """The container target builds our image in preflight, once: a failed build is the user's
    set-up (no base image, no network to a mirror), one line, not a failure of every scenario."""
    from sbconform import containers
    from sbconform.targets import preflight

    def broken(tag, eng=None, log=print):
        raise containers.EngineUnavailable("pip wheel failed: ERROR: could not build\n  more detail\n")

    monkeypatch.setattr(containers, "ensure_serve_image", broken)
    with pytest.raises(preflight.PreflightError) as error:
        preflight.check_image("")
    text = str(error.value)
    assert "\n" not in text and "could not be built (pip wheel failed: ERROR: could not build)" in text


def test_another_brokers_image_is_never_built_only_found_or_pulled(monkeypatch) -> None:
    from sbconform import containers
    from sbconform.targets import preflight

    class Engine:
        def __init__(self, here: bool) -> None:
            self.here, self.pulled = here, []

        def has_image(self, tag: str) -> bool:
            return self.here

        def run(self, *args, **kwargs):
            self.pulled.append(args)
            return type("Done", (), {"returncode": 125, "stderr": "Error: pinging container registry: no such host\n", "stdout": ""})()

    monkeypatch.setattr(containers, "ensure_serve_image", lambda *a, **k: pytest.fail("another broker's image was built"))
    here = Engine(True)
    monkeypatch.setattr(containers, "engine", lambda: here)
    preflight.check_image("mcr.microsoft.com/azure-messaging/servicebus-emulator:latest")  # here: nothing to do
    assert here.pulled == []
    away = Engine(False)
    monkeypatch.setattr(containers, "engine", lambda: away)
    with pytest.raises(preflight.PreflightError, match=r"servicebus-emulator:latest is not here and could not be pulled "
                                                       r"\(Error: pinging container registry: no such host\)$"):
        preflight.check_image("mcr.microsoft.com/azure-messaging/servicebus-emulator:latest")
    assert away.pulled == [("pull", "mcr.microsoft.com/azure-messaging/servicebus-emulator:latest")]


def test_the_key_is_never_on_a_child_command_line(tmp_path: Path) -> None:
    """certify hands the connection string to its children through the environment."""
    from sbconform import certify as module

    seen: list[list[str]] = []
    real = module.subprocess.Popen

    def spy(args, *a, **kw):
        seen.append(list(args))
        assert "SECRET-XYZ" in kw["env"].get("SBCONFORM_CONNECTION_STRING", "")
        return real([sys.executable, "-c", "pass"], *a, **kw)

    module.subprocess.Popen = spy
    try:
        cs = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=SECRET-XYZ;UseDevelopmentEmulator=true;"
        module._validate = lambda *a, **k: ({}, {})  # no preflight: this test looks at the command line only
        module.certify("sdk", tmp_path, connection_string=cs, jobs=1)
    finally:
        module.subprocess.Popen = real
        import importlib

        importlib.reload(module)
    assert seen and not any("SECRET-XYZ" in " ".join(args) for args in seen)
    assert "--sb-connection-string" not in " ".join(seen[0])


def test_mask_hides_keys_and_signatures() -> None:
    from sbconform.secrets import mask

    text = mask("Endpoint=sb://h;SharedAccessKeyName=n;SharedAccessKey=abc+/=;x SharedAccessSignature sr=a&sig=QQ%3D&se=1")
    assert "abc" not in text and "QQ" not in text and "SharedAccessKeyName=n" in text
