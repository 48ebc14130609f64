"""Containers: a Docker-compatible engine for testcontainers, and the image of ``sbconform serve``.

The container target (``sbconform.targets.container``) starts a broker image with
testcontainers. This module finds the engine and builds our image; nothing here is needed
by the reference model.

**Engine** (``engine()``): ``DOCKER_HOST`` if set; else a Docker socket at
``/var/run/docker.sock``; else podman, whose Docker-compatible API this process starts
(``podman system service`` on a socket of its own, stopped when the process ends) with a
containers.conf of its own passed through ``CONTAINERS_CONF`` (runtime runc, cgroupfs, no
default ulimits: what a podman without systemd needs), never editing ``/etc``. With podman,
testcontainers' reaper is disabled (its image cannot be assumed) and containers are stopped
by the code that started them.

**Images**: ``localhost/sbconform-serve:<version>-<source digest>`` runs ``sbconform serve`` on port 5672.
It is built from wheels made here (sbconform and python-qpid-proton, for the machine's
CPython 3.11) on a base image with Python 3.11: ``--base`` if given, else
``localhost/sbconform-base:bookworm`` if present, else one made on the spot with
``debootstrap`` (Debian bookworm, minbase, python3: about 40 s; root and the debootstrap
package needed), else ``python:3.11-slim`` from a registry.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .processes import stop_process

def source_digest() -> str:
    """A digest of the packages an image of ``sbconform serve`` carries (reference, sbconform,
    spec): the image tag changes with the code, so a stale image is never used."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in ("sbconform", "sbreference", "sbspec"):
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".toml", ".md", ".txt"):
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


SERVE_IMAGE = f"localhost/sbconform-serve:{__version__}-{source_digest()}"
BASE_IMAGE = "localhost/sbconform-base:bookworm"
REGISTRY_BASE = "python:3.11-slim"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

PODMAN_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""

CONTAINERFILE = """\
FROM {base}
COPY wheels /wheels
RUN python3 -m venv /opt/sbconform \\
 && /opt/sbconform/bin/pip install --no-index --find-links /wheels sbconform python-qpid-proton \\
 && rm -rf /wheels
EXPOSE 5672
ENTRYPOINT ["/opt/sbconform/bin/sbconform", "serve", "--host", "0.0.0.0", "--port", "5672"]
"""


class EngineUnavailable(RuntimeError):
    """No Docker-compatible engine can be reached or started here."""


@dataclass
class Engine:
    """How to reach the engine: the CLI to build with, the environment testcontainers needs."""

    cli: str  # "docker" or "podman"
    docker_host: str
    env: dict[str, str] = field(default_factory=dict)  # for testcontainers and the CLI
    process: subprocess.Popen | None = None  # a podman service we started

    def run(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([self.cli, *args], env={**os.environ, **self.env}, **kwargs)

    def has_image(self, name: str) -> bool:
        return self.run("image", "exists" if self.cli == "podman" else "inspect", name, capture_output=True).returncode == 0

    def stop(self) -> None:
        stop_process(self.process, 10)


_ENGINE: Engine | None = None


def engine() -> Engine:
    """The engine for this process (found, or podman's API started), set into ``os.environ``
    for testcontainers. Raises ``EngineUnavailable`` saying what is missing."""
    global _ENGINE
    if _ENGINE is not None and (_ENGINE.process is None or _ENGINE.process.poll() is None):
        return _ENGINE
    if os.environ.get("DOCKER_HOST"):
        found = Engine(_cli_for(os.environ["DOCKER_HOST"]), os.environ["DOCKER_HOST"])
    elif Path("/var/run/docker.sock").exists() and shutil.which("docker"):
        found = Engine("docker", "unix:///var/run/docker.sock")
    elif shutil.which("podman"):
        found = _start_podman()
    else:
        raise EngineUnavailable(
            "no Docker engine (DOCKER_HOST unset, no /var/run/docker.sock) and no podman on PATH "
            "(on Debian: apt-get install podman runc)"
        )
    os.environ.update(found.env)
    os.environ.setdefault("DOCKER_HOST", found.docker_host)
    _ENGINE = found
    return found


def _cli_for(docker_host: str) -> str:
    if "podman" in docker_host and shutil.which("podman"):
        return "podman"
    return "docker" if shutil.which("docker") else "podman"


def _start_podman() -> Engine:
    state = Path(tempfile.mkdtemp(prefix="sbconform-podman-"))
    conf = state / "containers.conf"
    conf.write_text(PODMAN_CONF, encoding="utf-8")
    socket = state / "podman.sock"
    env = {
        "CONTAINERS_CONF": str(conf),
        "TESTCONTAINERS_RYUK_DISABLED": "true",
        "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
        "TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
    }
    log = (state / "service.log").open("w")
    process = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"],
                               env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while not socket.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise EngineUnavailable(f"podman system service did not start: {(state / 'service.log').read_text()[-1000:]}")
        time.sleep(0.05)
    found = Engine("podman", f"unix://{socket}", {**env, "DOCKER_HOST": f"unix://{socket}"}, process)
    # who started this service: a service whose owner was killed is stopped by the next sweep
    (state / "owner").write_text(f"{os.getpid()} {_process_start(os.getpid())} {process.pid}\n", encoding="utf-8")
    atexit.register(found.stop)
    probe = found.run("info", capture_output=True, text=True)
    if probe.returncode != 0:
        found.stop()
        raise EngineUnavailable(f"podman does not work here: {probe.stderr.strip()[-1000:]}")
    return found


# ------------------------------------------------------------------- images
def build_base_image(eng: Engine, tag: str = BASE_IMAGE, mirror: str = DEBIAN_MIRROR) -> str:
    """Debian bookworm with python3, made with debootstrap and imported as ``tag``."""
    if not shutil.which("debootstrap"):
        raise EngineUnavailable("no base image with Python 3.11 and no debootstrap to make one (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise EngineUnavailable("debootstrap needs root to make the base image; pass --base IMAGE instead")
    with tempfile.TemporaryDirectory(prefix="sbconform-rootfs-") as root:
        boot = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv", "bookworm", root, mirror],
                              capture_output=True, text=True)
        if boot.returncode != 0:
            raise EngineUnavailable(f"debootstrap failed: {boot.stdout[-1000:]}{boot.stderr[-1000:]}")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run([eng.cli, "import", "-", tag], stdin=tar.stdout, env={**os.environ, **eng.env},
                                  capture_output=True, text=True)
        tar.wait()
        if imported.returncode != 0:
            raise EngineUnavailable(f"{eng.cli} import failed: {imported.stderr[-1000:]}")
    return tag


def choose_base(eng: Engine, base: str | None = None) -> str:
    if base:
        return base
    if eng.has_image(BASE_IMAGE):
        return BASE_IMAGE
    if shutil.which("debootstrap") and os.geteuid() == 0:
        return build_base_image(eng)
    return REGISTRY_BASE


def build_serve_image(tag: str = SERVE_IMAGE, base: str | None = None, eng: Engine | None = None, log=print) -> str:
    """Build the image of ``sbconform serve`` as ``tag``; returns the tag."""
    if sys.version_info[:2] != (3, 11):
        raise EngineUnavailable(f"the image's Python is 3.11 and its wheels are built here: run this with Python 3.11, not "
                                f"{sys.version.split()[0]}")
    eng = eng or engine()
    base = choose_base(eng, base)
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="sbconform-image-") as ctx:
        wheels = Path(ctx) / "wheels"
        log(f"sbconform: building wheels (sbconform, python-qpid-proton) in {wheels}")
        made = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), str(repo), "python-qpid-proton"],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise EngineUnavailable(f"pip wheel failed: {made.stderr[-2000:]}")
        (Path(ctx) / "Containerfile").write_text(CONTAINERFILE.format(base=base), encoding="utf-8")
        log(f"sbconform: building {tag} from {base} with {eng.cli}")
        built = eng.run("build", "-q", "-t", tag, "-f", str(Path(ctx) / "Containerfile"), ctx, capture_output=True, text=True)
        if built.returncode != 0:
            raise EngineUnavailable(f"{eng.cli} build failed: {built.stdout[-1000:]}{built.stderr[-2000:]}")
    return tag


def ensure_serve_image(tag: str = SERVE_IMAGE, eng: Engine | None = None, log=print) -> str:
    """``tag`` if the engine has it, else built now."""
    eng = eng or engine()
    if not eng.has_image(tag):
        build_serve_image(tag, eng=eng, log=log)
    return tag


# ------------------------------------------------------------- labels and the sweep
#: Every container and network the kit starts carries these labels, so that what a killed
#: process left behind can be found and removed (``sweep``), and nothing else is ever touched:
#: the session (one certify run and its test processes share it: ``SBCONFORM_SESSION``), the
#: process that started it (its pid and that pid's start time, so a reused pid is not mistaken
#: for the owner) and the host it runs on.
LABEL_SESSION = "org.sbconform.session"
LABEL_PID = "org.sbconform.pid"
LABEL_PID_START = "org.sbconform.pid-start"
LABEL_HOST = "org.sbconform.host"
SESSION_ENV = "SBCONFORM_SESSION"


def session_id() -> str:
    """This process's session: inherited from ``SBCONFORM_SESSION`` (certify sets it for its test
    processes), else a new one, put into the environment so that children share it."""
    import uuid

    if not os.environ.get(SESSION_ENV):
        os.environ[SESSION_ENV] = uuid.uuid4().hex[:12]
    return os.environ[SESSION_ENV]


def _process_start(pid: int) -> str:
    """The start time of ``pid`` (clock ticks since boot, /proc/PID/stat field 22), '' if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def kit_labels() -> dict[str, str]:
    import socket

    pid = os.getpid()
    return {LABEL_SESSION: session_id(), LABEL_PID: str(pid), LABEL_PID_START: _process_start(pid),
            LABEL_HOST: socket.gethostname()}


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process that started a labelled container still runs (on another host: assumed so)."""
    import socket

    if labels.get(LABEL_HOST) != socket.gethostname():
        return True
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = labels.get(LABEL_PID_START, "")
    return not started or _process_start(pid) in ("", started)


def sweep(session: str | None = None, eng: Engine | None = None) -> list[str]:
    """Remove the kit's containers and networks whose owner process is gone (or, with ``session``,
    every one of that session: certify calls it once its test processes are stopped). Only what
    carries the kit's labels is considered. Returns what was removed ("container NAME", "network NAME")."""
    import docker

    eng = eng or engine()
    client = docker.DockerClient(base_url=eng.docker_host)
    removed: list[str] = []
    try:
        def doomed(labels: dict[str, str]) -> bool:
            if LABEL_SESSION not in labels:
                return False
            return labels[LABEL_SESSION] == session if session is not None else not owner_alive(labels)

        for container in client.containers.list(all=True, filters={"label": LABEL_SESSION}):
            if doomed(container.labels or {}):
                try:
                    container.remove(force=True, v=True)
                    removed.append(f"container {container.name}")
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError:
                    pass  # another sweep got there first, or it is being removed
        for network in client.networks.list(filters={"label": LABEL_SESSION}):
            if doomed(network.attrs.get("Labels") or {}):
                try:
                    network.remove()
                    removed.append(f"network {network.name}")
                except docker.errors.APIError:
                    pass  # still in use by a container of a live owner, or already gone
    finally:
        client.close()
    return removed + sweep_podman_services()


def sweep_podman_services() -> list[str]:
    """Stop the podman API services (started by ``_start_podman``) whose owner process is gone: a
    killed process cannot stop its own. A service is recognised by its state directory's ``owner``
    file and by its command line naming that directory's socket, so no other process is touched."""
    import signal

    stopped = []
    for owner_file in Path(tempfile.gettempdir()).glob("sbconform-podman-*/owner"):
        try:
            owner, started, service = owner_file.read_text(encoding="utf-8").split()
        except (OSError, ValueError):
            continue
        if owner_alive({LABEL_PID: owner, LABEL_PID_START: started, LABEL_HOST: __import__("socket").gethostname()}):
            continue
        socket_path = str(owner_file.parent / "podman.sock")
        try:
            cmdline = Path(f"/proc/{service}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = ""
        if socket_path in cmdline:
            try:
                os.kill(int(service), signal.SIGTERM)
                stopped.append(f"podman service {service}")
            except (ProcessLookupError, PermissionError, ValueError):
                pass
        shutil.rmtree(owner_file.parent, ignore_errors=True)
    return stopped
