"""Lanes: the available messages of one FIFO, and a session's own FIFO with its lock.

A store's messages wait in a lane in sequence-number order; a message released back
(abandon, lock expiry) comes before every newer one (SETTLE-LOCK-006). A session is a
lane of its own with a session lock and a session state (SETTLE-SESS-*).
"""

from __future__ import annotations

import heapq
from collections import deque

from .message import ACTIVE, StoredMessage


class Lane:
    """The available messages of one FIFO, in sequence-number order.

    New messages arrive with increasing sequence numbers and go to the back of
    ``fresh``; a message released back (abandon, lock expiry) goes into ``returned``, a
    heap, and so comes before every newer message (SETTLE-LOCK-006). Entries may be
    stale (a message expired from the middle): ``head`` skips them.
    """

    __slots__ = ("fresh", "returned", "available")

    def __init__(self) -> None:
        self.fresh: deque[int] = deque()
        self.returned: list[int] = []
        self.available = 0

    def _copy_into(self, other: "Lane") -> "Lane":
        other.fresh = deque(self.fresh)
        other.returned = list(self.returned)
        other.available = self.available
        return other

    def clone(self) -> "Lane":
        return self._copy_into(Lane())

    def push(self, seq: int) -> None:
        fresh = self.fresh
        if not fresh or seq > fresh[-1]:
            fresh.append(seq)
        else:
            heapq.heappush(self.returned, seq)
        self.available += 1

    def head(self, messages: dict[int, StoredMessage]) -> StoredMessage | None:
        """The oldest available message, dropping stale entries on the way."""
        fresh, returned = self.fresh, self.returned
        while True:
            if returned and (not fresh or returned[0] < fresh[0]):
                seq = returned[0]
                source = returned
            elif fresh:
                seq = fresh[0]
                source = fresh
            else:
                return None
            msg = messages.get(seq)
            if msg is not None and msg.state is ACTIVE:
                return msg
            if source is fresh:
                fresh.popleft()
            else:
                heapq.heappop(returned)

    def pop_head(self, messages: dict[int, StoredMessage]) -> StoredMessage | None:
        """Take the oldest available message out of the lane."""
        fresh, returned = self.fresh, self.returned
        while True:
            if returned and (not fresh or returned[0] < fresh[0]):
                seq = heapq.heappop(returned)
            elif fresh:
                seq = fresh.popleft()
            else:
                return None
            msg = messages.get(seq)
            if msg is not None and msg.state is ACTIVE:
                self.available -= 1
                return msg


class Session(Lane):
    """A session: its own FIFO, its session lock and its session state (SETTLE-SESS-*)."""

    __slots__ = ("session_id", "holder", "locked_until", "state", "members")

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id
        self.holder: int | None = None
        self.locked_until = 0
        self.state: bytes | None = None
        self.members = 0  # live messages of this session in the store

    def is_locked(self, now: int) -> bool:
        return self.holder is not None and now < self.locked_until

    def clone(self) -> "Session":
        other = self._copy_into(Session(self.session_id))
        other.holder, other.locked_until, other.state, other.members = self.holder, self.locked_until, self.state, self.members
        return other
