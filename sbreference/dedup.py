"""Duplicate detection: a history of message ids over a time window (SETTLE-DUP-*).

A send whose message id was accepted within the window is reported as accepted but
the message is dropped at once. Scheduled messages take part too.
"""

from __future__ import annotations

from collections import deque


class DuplicateDetection:
    __slots__ = ("window", "seen", "order")

    def __init__(self, window: int) -> None:
        self.window = window
        self.seen: dict[str, int] = {}  # message id -> when it was accepted
        self.order: deque[tuple[int, str]] = deque()

    def _forget_old(self, now: int) -> None:
        order, seen, window = self.order, self.seen, self.window
        while order and order[0][0] + window <= now:
            accepted_at, message_id = order.popleft()
            if seen.get(message_id) == accepted_at:
                del seen[message_id]

    def is_duplicate(self, message_id: str | None, now: int) -> bool:
        """SETTLE-DUP-001: seen within the window? (``None`` ids are never duplicates.)"""
        if message_id is None:
            return False
        self._forget_old(now)
        return message_id in self.seen

    def record(self, message_id: str | None, now: int) -> None:
        if message_id is None:
            return
        self.seen[message_id] = now
        self.order.append((now, message_id))
