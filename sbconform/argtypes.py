"""Argument types shared by the subcommands (``type=`` of argparse).

Every number a command takes is judged here, when the command line is parsed: a bad value
is argparse's one error line naming the option and the value, exit 2, before any work
starts. A float option must be finite (``float()`` takes ``nan`` and ``inf``, which pass a
``<= 0`` check and break later, far from the command line); a port must be 0 to 65535.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

#: the longest time AMQP can carry in milliseconds (a uint, as OPEN's idle-time-out)
AMQP_MILLIS_MAX_SECONDS = (2 ** 32 - 1) // 1000


def seconds(maximum: float | None = None) -> Callable[[str], float]:
    """A duration in seconds: a finite number above 0 (and at most ``maximum``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of seconds")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds above 0")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text!r}: at most {maximum:g} seconds")
        return value

    parse.__name__ = "seconds"
    return parse


def whole(minimum: int = 1, maximum: int | None = None, what: str = "") -> Callable[[str], int]:
    """A whole number from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}{what}, got {value:,}")
        return value

    parse.__name__ = "whole number"
    return parse


def port(text: str, lowest: int = 0, meaning: str = "0 picks a free port") -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not lowest <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value}: expected a port from {lowest} to 65535 ({meaning})")
    return value


def port_or_none(text: str) -> int:
    """A TCP port, or -1 for none."""
    return port(text, -1, "0 picks a free port, -1: none")


def path(text: str) -> str:
    """A file or directory name. An empty one (``--html "$UNSET"``) names nothing: it was taken as
    the option not given, and what it asked for (an expectations file, a report) dropped unsaid."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty path (an unset variable?); name a file or directory")
    return text
