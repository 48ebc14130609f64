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

    The lane holds the message records themselves (no lookup by sequence number on the way
    out). New messages arrive with increasing sequence numbers and go to the back of
    ``fresh``; a message released back (abandon, lock expiry) goes into ``returned``, a
    heap of (sequence number, record), and so comes before every newer message
    (SETTLE-LOCK-006). Entries may be stale (a message expired from the middle is no longer
    ACTIVE): ``head`` and ``pop_head`` skip them.
    """

    __slots__ = ("fresh", "returned", "available")

    def __init__(self) -> None:
        self.fresh: deque[StoredMessage] = deque()
        self.returned: list[tuple[int, StoredMessage]] = []
        self.available = 0

    def _copy_into(self, other: "Lane", copies: dict[int, StoredMessage]) -> "Lane":
        """This lane over ``copies`` (a store's copied records by sequence number); stale entries are left out."""
        other.fresh = deque(copies[m.sequence_number] for m in self.fresh if m.state is ACTIVE)
        other.returned = [(seq, copies[seq]) for seq, m in self.returned if m.state is ACTIVE]
        heapq.heapify(other.returned)
        other.available = self.available
        return other

    def clone(self, copies: dict[int, StoredMessage]) -> "Lane":
        return self._copy_into(Lane(), copies)

    def push(self, msg: StoredMessage) -> None:
        fresh = self.fresh
        if not fresh or msg.sequence_number > fresh[-1].sequence_number:
            fresh.append(msg)
        else:
            heapq.heappush(self.returned, (msg.sequence_number, msg))
        self.available += 1

    def head(self) -> StoredMessage | None:
        """The oldest available message, dropping stale entries on the way."""
        fresh, returned = self.fresh, self.returned
        while True:
            if returned and (not fresh or returned[0][0] < fresh[0].sequence_number):
                msg = returned[0][1]
                if msg.state is ACTIVE:
                    return msg
                heapq.heappop(returned)
            elif fresh:
                msg = fresh[0]
                if msg.state is ACTIVE:
                    return msg
                fresh.popleft()
            else:
                return None

    def pop_head(self) -> StoredMessage | None:
        """Take the oldest available message out of the lane."""
        fresh, returned = self.fresh, self.returned
        while True:
            if returned and (not fresh or returned[0][0] < fresh[0].sequence_number):
                msg = heapq.heappop(returned)[1]
            elif fresh:
                msg = fresh.popleft()
            else:
                return None
            if msg.state is ACTIVE:
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

    def clone(self, copies: dict[int, StoredMessage]) -> "Session":
        other = self._copy_into(Session(self.session_id), copies)
        other.holder, other.locked_until, other.state, other.members = self.holder, self.locked_until, self.state, self.members
        return other
