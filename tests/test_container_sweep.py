"""The kit's containers are removed even when the process that started them is killed.

Every container and network the kit starts carries its labels (sbconform.containers: session,
owner pid and the pid's start time, host). A process killed with SIGKILL cannot clean up: the
next sweep (at the start of the next emulator or container, or ``sbconform container sweep``)
removes what it left, and only that. Ctrl-C on ``certify`` leaves nothing: certify stops its test
processes, then removes the containers of its session."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sbconform.containers import LABEL_HOST, LABEL_PID, LABEL_PID_START, LABEL_SESSION, _process_start, kit_labels, owner_alive

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ no engine needed
def test_the_labels_name_the_session_the_owner_and_its_start() -> None:
    labels = kit_labels()
    assert labels[LABEL_PID] == str(os.getpid()) and labels[LABEL_PID_START] == _process_start(os.getpid()) != ""
    assert labels[LABEL_SESSION] == os.environ["SBCONFORM_SESSION"]
    assert owner_alive(labels)


def test_a_dead_owner_or_a_reused_pid_is_not_alive_and_another_host_is_not_judged() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    labels = kit_labels()
    assert not owner_alive({**labels, LABEL_PID: str(child.pid), LABEL_PID_START: "1"})  # gone
    assert not owner_alive({**labels, LABEL_PID_START: "1"})  # this pid, but another process's start: reused
    assert owner_alive({**labels, LABEL_PID: str(child.pid), LABEL_HOST: "another-host"})
    assert owner_alive({**labels, LABEL_PID: "not-a-pid"})  # not ours to judge


# ------------------------------------------------------------------ with the stand-ins
pytest.importorskip("testcontainers", reason="the containers extra (testcontainers) is not installed")


@pytest.fixture(scope="module")
def images():
    from sbconform.containers import EngineUnavailable
    from sbconform.emulator import standin_images

    try:
        return standin_images(log=lambda *_: None)
    except EngineUnavailable as error:
        pytest.skip(f"no container engine: {error}")


def labelled(session: str) -> list[str]:
    from sbconform.containers import engine

    eng = engine()
    names = eng.run("ps", "-a", "--filter", f"label={LABEL_SESSION}={session}", "--format", "{{.Names}}",
                    capture_output=True, text=True).stdout.split()
    networks = eng.run("network", "ls", "--filter", f"label={LABEL_SESSION}={session}", "--format", "{{.Name}}",
                       capture_output=True, text=True).stdout.split()
    return names + [f"network {n}" for n in networks]


def read_line(process: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1)
        if ready:
            return process.stdout.readline()
        if process.poll() is not None:
            break
    raise AssertionError(f"no line from the child within {timeout} s: {process.stdout.read() if process.poll() is not None else ''}")


STARTER = """
import sys, time
from sbconform.emulator import ServiceBusEmulatorContainer
emulator = ServiceBusEmulatorContainer(sys.argv[1], sys.argv[2], accept_eula=True).start()
print("started", flush=True)
time.sleep(600)
"""


def test_a_process_killed_with_sigkill_leaves_containers_the_next_sweep_removes(images) -> None:
    from sbconform.containers import engine

    session = f"test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SBCONFORM_SESSION": session}
    own_service = engine().process is not None  # podman's API, started by this process: the child starts its own
    if own_service:
        env.pop("DOCKER_HOST")
    child = subprocess.Popen([sys.executable, "-c", STARTER, *images], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env, start_new_session=True)
    try:
        assert read_line(child, 180).strip() == "started"
        left = labelled(session)
        assert len([n for n in left if not n.startswith("network ")]) == 2 and len(left) == 3, left  # SQL, emulator, network
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert labelled(session) == left  # the orphans: nobody removed them
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    swept = subprocess.run([sys.executable, "-m", "sbconform.cli", "container", "sweep"], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert swept.returncode == 0, swept.stderr
    assert labelled(session) == []
    for name in left:
        assert name in swept.stdout, swept.stdout
    if own_service:  # the killed child's podman service, which nobody else would stop
        assert "removed podman service" in swept.stdout, swept.stdout


def test_ctrl_c_on_certify_leaves_no_container(images, tmp_path: Path) -> None:
    from sbconform.containers import engine

    def sessions(exclude_pid: int = 0) -> set[str]:
        """Sessions of the kit's containers of this checkout's stand-in images (another checkout's
        runs on the same engine use other tags), those started by ``exclude_pid`` left out."""
        out = engine().run("ps", "-a", "--filter", f"label={LABEL_SESSION}", "--format",
                           f'{{{{.Image}}}} {{{{index .Labels "{LABEL_SESSION}"}}}} {{{{index .Labels "{LABEL_PID}"}}}}',
                           capture_output=True, text=True).stdout
        rows = [line.split() for line in out.splitlines()]
        return {row[1] for row in rows if len(row) == 3 and row[0] in images and row[2] != str(exclude_pid)}

    before = sessions()
    run = subprocess.Popen(
        [sys.executable, "-m", "sbconform.cli", "certify", "--target", "emulator", "--option", "accept_eula=Y",
         "--option", "standin=true", "--jobs", "1", "--report-dir", str(tmp_path), "--clause", "SETTLE-COMP-001"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        new: set[str] = set()
        while not new and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.5)
            new = sessions(exclude_pid=run.pid) - before  # its test process's (not its preflight's): the run is under way
        assert new, "certify's test process started no labelled container"
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130, out[-2000:]
    for session in new:
        assert labelled(session) == [], session
