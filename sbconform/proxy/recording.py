"""What every connection of one recording shares (``Recording``): the sink, the numbering
of clients and connections, sends held until their sequence number is seen, locks
seen, entity descriptions. See ``interpret.py`` for why sends are held."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from proton import Message

from sbreference import paths
from .messages import Msg, piece_of


@dataclass
class HeldSend:
    client: str
    conn: str
    op_id: int
    entity: str
    invoked: int
    completed: int
    msg: Msg
    args: dict


@dataclass
class LockInfo:
    client: str
    entity: str
    seq: int | None
    message_id: str | None
    session: str | None
    partition: int | None


class Recording:
    """What every connection of one recording shares: the sink, the numbering of clients
    and connections, held sends, locks seen, entity descriptions."""

    MAX_HELD = 200_000
    MAX_LOCKS = 200_000

    def __init__(self, sink: Any, cbs: Callable[[Message], Message] | None = None, record_attach: bool = False) -> None:
        self.sink = sink
        #: write successful attaches too (the replay checker does not model ``attach`` yet: a
        #: piece holding one is 'unknown'; failed attaches are always written, as they change nothing)
        self.record_attach = record_attach
        self.cbs = cbs  # rewrites a client's put-token request for the upstream
        self.rewrite_host: str | None = None  # the upstream host name (Azure: OPEN and SASL hostname, addresses)
        self.clients = 0
        self.conns = 0
        self.held: dict[tuple[str, str], deque[HeldSend]] = {}
        self.held_count = 0
        self.locks: dict[str, LockInfo] = {}
        self.descriptions: dict[str, dict | None] = {}

    def new_client(self) -> str:
        self.clients += 1
        return f"c{self.clients}"

    def new_conn(self) -> str:
        self.conns += 1
        return f"conn{self.conns}"

    def partitioned(self, entity: str) -> bool:
        d = self.descriptions.get(piece_of(entity))
        return bool(d and d.get("enable_partitioning"))

    # -- descriptions
    def needs_description(self, path: str) -> bool:
        return bool(path) and piece_of(path) not in self.descriptions

    def described(self, path: str, description: dict | None, error: str | None = None) -> None:
        """Record an entity's description (read out of band at its first attach) as the
        piece's ``create-entity`` event: the replay checker's only entry point for an
        entity's lock duration, max delivery count, sessions and partitioning."""
        key = piece_of(path)
        if key in self.descriptions:
            return
        self.descriptions[key] = description
        if description is None:
            return
        parsed = paths.parse(path)
        base = parsed.base
        op = self.sink.op()
        now = self.sink.now()
        kind = "subscription" if parsed.subscription is not None else description.get("kind", "queue")
        desc = {k: v for k, v in description.items() if k != "kind"}
        self.sink.write("admin", op, "create-entity", "invoke", now, entity=base, args=desc)
        self.sink.write("admin", op, "create-entity", "ok", now, entity=base,
                        result={"path": base, "kind": kind, "description": desc, "existing": True,
                                "note": "described by the recording proxy at the entity's first attach"})

    # -- held sends
    def hold(self, send: HeldSend) -> None:
        if send.msg.message_id is None:
            self._write_send(send, None)
            return
        key = (piece_of(send.entity), send.msg.message_id)
        self.held.setdefault(key, deque()).append(send)
        self.held_count += 1
        if self.held_count > self.MAX_HELD:  # bounded: the oldest is written as unplaceable
            oldest_key = next(iter(self.held))
            q = self.held[oldest_key]
            self._write_send(q.popleft(), None)
            self.held_count -= 1
            if not q:
                del self.held[oldest_key]

    def observed(self, entity: str, message_id: str | None, seq: int | None) -> None:
        """A message was seen with its sequence number: write the send that put it there."""
        if message_id is None or seq is None or not self.held:
            return
        key = (piece_of(entity), message_id)
        q = self.held.get(key)
        if not q:
            return
        send = q.popleft()
        self.held_count -= 1
        if not q:
            del self.held[key]
        self._write_send(send, seq)

    def _write_send(self, send: HeldSend, seq: int | None) -> None:
        m = send.msg
        common = dict(conn=send.conn, entity=send.entity, message_id=m.message_id, session=m.session, partition_key=m.partition_key)
        self.sink.write(send.client, send.op_id, "send", "invoke", send.invoked, args=send.args, **common)
        if seq is None:
            self.sink.write(send.client, send.op_id, "send", "info", send.completed, **common,
                            result={"accepted": True, "seq_unknown": "never observed by the proxy"})
        else:
            partition = seq >> 48 if self.partitioned(send.entity) else None
            self.sink.write(send.client, send.op_id, "send", "ok", send.completed, seq=seq, partition=partition, **common)

    def remember_lock(self, lock: str, info: LockInfo) -> None:
        if len(self.locks) >= self.MAX_LOCKS:
            del self.locks[next(iter(self.locks))]
        self.locks[lock] = info

    def finish(self) -> None:
        """End of the recording: held sends never observed are written as unplaceable."""
        for q in list(self.held.values()):
            for send in q:
                self._write_send(send, None)
        self.held.clear()
        self.held_count = 0
