"""The live progress line of certify, generate and replay (issue 15, "Progress").

On a terminal a command shows one line it rewrites in place (``\\r``): what is done of
the total, what is being worked on, the time elapsed. Anywhere else (a pipe, a CI log)
it writes nothing while it runs: the command prints its summary at the end instead.
One class for the three commands, so that they look alike and one rule decides when a
line is shown.
"""

from __future__ import annotations

import sys
import time
from typing import IO

#: the line is rewritten at most this often (seconds): a terminal, not a log
INTERVAL = 0.2
WIDTH = 120


class LiveLine:
    """One line rewritten in place on ``out`` while ``live``; silent otherwise.

    ``live`` defaults to ``out.isatty()``. ``show`` is rate limited (the first call
    and ``force=True`` always write); ``finish`` ends the line: with ``keep`` it stays
    (a newline), else it is erased so the summary that follows starts on a clean line.
    """

    def __init__(self, out: IO[str] | None = None, live: bool | None = None, started: float | None = None,
                 interval: float = INTERVAL) -> None:
        self.out = out if out is not None else sys.stdout
        if live is None:
            isatty = getattr(self.out, "isatty", None)
            live = bool(isatty and isatty())
        self.live = live
        self.started = time.monotonic() if started is None else started
        self.interval = interval
        self._last = float("-inf")
        self._width = 0  # what the last line covered, to blank it out

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def show(self, text: str, force: bool = False) -> bool:
        """Write ``text`` over the previous line (if live and not too soon); True if written."""
        if not self.live:
            return False
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return False
        self._last = now
        text = text[:WIDTH]
        self.out.write("\r" + text.ljust(max(self._width, 80)))
        self._width = len(text)
        self.out.flush()
        return True

    def finish(self, text: str | None = None, keep: bool = False) -> None:
        """End the live line: show ``text`` last and keep it (``keep``), or erase the line."""
        if not self.live:
            return
        if text is not None:
            self.show(text, force=True)
        if keep:
            self.out.write("\n")
        elif self._last != float("-inf"):
            self.out.write("\r" + " " * max(self._width, 80) + "\r")
        self.out.flush()


def count(done: int, total: int | None, unit: str) -> str:
    """``1,234/5,000 events`` (or ``1,234 events`` when the total is unknown)."""
    return f"{min(done, total):,}/{total:,} {unit}" if total is not None else f"{done:,} {unit}"


def rate(done: int, seconds: float, unit: str) -> str:
    return f"{done / max(seconds, 1e-6):,.0f} {unit}/s"
