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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("container", help="build the image of sbconform serve for --target container; show the engine; sweep leftovers")
    p.add_argument("action", choices=("build", "engine", "sweep"),
                   help="build: build the image; engine: say which Docker-compatible engine would be used; sweep: "
                        "remove the containers and networks of killed runs (the kit's labels, owner process gone)")
    p.add_argument("--tag", default=None, help="image tag (default localhost/sbconform-serve:<version>-<digest of the sources>)")
    p.add_argument("--base", default=None, help="base image with Python 3.11 (default: localhost/sbconform-base:bookworm, "
                                                "made with debootstrap if absent, else python:3.11-slim)")
    p.set_defaults(func=run)
