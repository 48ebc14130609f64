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


class SparkStages:
    """Spark's progress on a live line: polls the status tracker (``SparkContext.statusTracker()``)
    from a thread while a job runs and shows, for the stages running, the partitions (tasks)
    finished of the total as their results come back. Use as a context manager around the
    action (``collect``); it shows nothing unless ``line`` is live."""

    def __init__(self, tracker, line: LiveLine, what: str = "partitions checked", poll: float = 0.5) -> None:
        import threading

        self.tracker = tracker
        self.line = line
        self.what = what
        self.poll = poll
        self.finished_stages: set[int] = set()
        self._running: dict[int, tuple[int, int, int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sbconform-spark-progress", daemon=True)

    def __enter__(self) -> "SparkStages":
        if self.line.live:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                text = self.describe()
            except Exception:  # the context stopping under us: the line is only a courtesy
                return
            if text:
                self.line.show(text)

    def describe(self) -> str | None:
        """The line for the stages running now (None before the first stage starts)."""
        active = set(self.tracker.getActiveStageIds())
        self.finished_stages |= set(self._running) - active
        running: dict[int, tuple[int, int, int, int]] = {}
        for stage in sorted(active):
            info = self.tracker.getStageInfo(stage)
            if info is not None:
                running[stage] = (info.numCompletedTasks, info.numTasks, info.numActiveTasks, info.numFailedTasks)
        self._running = running
        if not running:
            return None
        parts = []
        for stage, (done, total, active_tasks, failed) in running.items():
            parts.append(f"stage {stage}: {done}/{total} {self.what}" + (f" ({active_tasks} running)" if active_tasks else "")
                         + (f", {failed} failed" if failed else ""))
        done_note = f"; {len(self.finished_stages)} stage{'s' if len(self.finished_stages) != 1 else ''} done" \
            if self.finished_stages else ""
        return f"  Spark {'; '.join(parts)}{done_note}, {self.line.elapsed():.0f} s"
