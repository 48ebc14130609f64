"""sbconform container: the image of ``sbconform serve`` for the container target.

``sbconform container build`` builds ``localhost/sbconform-serve:<version>-<digest>`` (wheels made
here, on a base image with Python 3.11; see ``sbconform.containers``). ``sbconform
container engine`` says which Docker-compatible engine testcontainers would use. ``sbconform
container sweep`` removes the containers and networks killed runs left behind (those carrying the
kit's labels whose owner process is gone; nothing else).
"""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from ..containers import SERVE_IMAGE, EngineUnavailable, build_serve_image, engine, sweep

    try:
        eng = engine()
        if args.action in ("engine", "sweep"):
            _answers(eng)
        if args.action == "engine":
            print(f"engine: {eng.cli} at {eng.docker_host}" + (" (podman API started by this process)" if eng.process else ""))
            return 0
        if args.action == "sweep":
            removed = sweep(eng=eng)
            print("\n".join(f"removed {what}" for what in removed) or "nothing left behind")
            return 0
        tag = build_serve_image(args.tag or SERVE_IMAGE, base=args.base, eng=eng)
    except EngineUnavailable as error:
        print(f"sbconform container: {error}", file=sys.stderr)
        return 2
    print(f"built {tag}")
    return 0


def _answers(eng) -> None:
    """The engine answers its API (as testcontainers and the sweep will ask it), else EngineUnavailable:
    a DOCKER_HOST naming nothing was reported as the engine, and the sweep ended in a traceback."""
    from ..containers import EngineUnavailable

    try:
        import docker
    except ImportError as error:  # the containers extra is missing
        raise EngineUnavailable(f"the container commands need the containers extra (pip install 'sbconform[containers]'): {error}") from None
    try:
        docker.DockerClient(base_url=eng.docker_host, timeout=10).close()
    except Exception as error:  # docker.errors.DockerException, and whatever its transports raise
        cause = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        raise EngineUnavailable(f"the {eng.cli} engine at {eng.docker_host} does not answer: {cause}") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("container", help="build the image of sbconform serve for --target container; show the engine; sweep leftovers")
    p.add_argument("action", choices=("build", "engine", "sweep"),
                   help="build: build the image; engine: say which Docker-compatible engine would be used; sweep: "
                        "remove the containers and networks of killed runs (the kit's labels, owner process gone)")
    p.add_argument("--tag", default=None, help="image tag (default localhost/sbconform-serve:<version>-<digest of the sources>)")
    p.add_argument("--base", default=None, help="base image with Python 3.11 (default: localhost/sbconform-base:bookworm, "
                                                "made with debootstrap if absent, else python:3.11-slim)")
    p.set_defaults(func=run)
