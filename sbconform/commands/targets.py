"""sbconform targets: list the targets and their capabilities."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from ..targets import make_target, names

    for name in names():
        try:
            caps = ", ".join(sorted(make_target(name).capabilities))
        except Exception as error:  # a target that needs options is still listed
            caps = f"(needs options: {error})"
        print(f"{name}: {caps}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("targets", help="list the targets and their capabilities")
    p.set_defaults(func=run)
