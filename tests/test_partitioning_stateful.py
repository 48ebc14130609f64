"""Stateful properties of partitioned entities in the reference model (issue 3).

- messages with one key never leave their partition;
- messages with one key (and those of one session) are first delivered in the order
  they were sent;
- without a key, no send fails while any partition is up, and no message is lost
  through outages;
- round-robin spreads unkeyed sends evenly: over any run without outages, the numbers
  of unkeyed messages per partition differ by at most one.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule, run_state_machine_as_test

from model_machine import ModelMachine
from sbreference import (
    PEEK_LOCK,
    RECEIVE_AND_DELETE,
    SECOND,
    ErrorCode,
    Message,
    Namespace,
    ServiceBusError,
    partition_of,
)

KEYS = [None, None, "a", "b", "c"]


class PartitionMachine(ModelMachine):
    max_seconds = 8

    @initialize(premium=st.sampled_from([None, 1, 2, 4]), sessions=st.booleans())
    def setup(self, premium: int | None, sessions: bool) -> None:
        self.ns = Namespace(sku="premium", partition_count=premium) if premium else Namespace()
        self.sessions = sessions
        self.ns.create_queue("pq", enable_partitioning=True, requires_session=sessions, lock_duration=5 * SECOND)
        self.entity = self.ns.partitioned("pq")
        self.n = self.entity.partition_count
        self.conn = self.ns.connect()
        self.key_partition: dict[str, int] = {}
        self.partition_of_id: dict[str, int] = {}
        self.sent_order: dict[str, list[str]] = {}  # key -> ids in sending order
        self.first_delivered: dict[str, list[str]] = {}
        self.delivered: set[str] = set()
        self.completed: set[str] = set()
        self.unkeyed_per_partition = [0] * self.n
        self.outage_seen = False
        self.counter = 0

    def _key(self, message: Message) -> str | None:
        return message.session_id or message.partition_key

    @rule(key=st.sampled_from(KEYS))
    def send(self, key: str | None) -> None:
        if self.sessions and key is None:
            key = "s0"
        self.counter += 1
        mid = f"m{self.counter}"
        message = Message(b"x", message_id=mid, session_id=key if self.sessions else None,
                          partition_key=None if self.sessions else key)
        up = [i for i in range(self.n) if self.entity.available[i]]
        target = self.key_partition.get(key) if key is not None else None
        try:
            [seq] = self.ns.send(self.conn, "pq", message)
        except ServiceBusError as error:
            assert error.code is ErrorCode.ENTITY_UNAVAILABLE
            if key is None:
                assert not up, "an unkeyed send failed while a partition was up (PART-NOKEY-002)"
            else:
                assert target is None or target not in up, "a keyed send failed although its partition is up (PART-AVAIL-002)"
            return
        partition = partition_of(seq)
        assert partition in up, f"stored in partition {partition}, which is down"
        if key is None:
            self.unkeyed_per_partition[partition] += 1
        else:
            if target is not None:
                assert partition == target, f"key {key!r} moved from partition {target} to {partition} (PART-KEY-006)"
            self.key_partition[key] = partition
            self.sent_order.setdefault(key, []).append(mid)
        self.partition_of_id[mid] = partition

    @rule(index=st.integers(0, 3), up=st.booleans())
    def outage(self, index: int, up: bool) -> None:
        index %= self.n
        if up:
            self.ns.make_partition_available("pq", index)
        else:
            self.ns.make_partition_unavailable("pq", index)
            self.outage_seen = True

    @rule(count=st.integers(1, 4), mode=st.sampled_from([PEEK_LOCK, RECEIVE_AND_DELETE]), abandon=st.booleans())
    def receive(self, count: int, mode: str, abandon: bool) -> None:
        if self.sessions:
            try:
                sid, _ = self.ns.accept_session(self.conn, "pq")
            except ServiceBusError:
                return
            got = self.ns.receive(self.conn, "pq", count, mode, session_id=sid)
        else:
            got = self.ns.receive(self.conn, "pq", count, mode)
        for d in got:
            mid = d.message_id
            assert self.entity.available[d.partition], "delivered from a partition that is down"
            assert d.partition == self.partition_of_id[mid] == partition_of(d.sequence_number), f"{mid} changed partition"
            if mid not in self.delivered:
                self.delivered.add(mid)
                key = self._key(d.message)
                if key is not None:
                    self.first_delivered.setdefault(key, []).append(mid)
            if mode == RECEIVE_AND_DELETE:
                self.completed.add(mid)
            elif abandon:
                self.ns.abandon(self.conn, "pq", d.lock_token)
            else:
                self.ns.complete(self.conn, "pq", d.lock_token)
                self.completed.add(mid)
        if self.sessions:
            self.ns.release_session(self.conn, "pq", sid)

    @invariant()
    def properties_hold(self) -> None:
        held: dict[str, int] = {}
        for index, store in enumerate(self.entity.store.partitions):
            for s in (store, store.dead_letter_queue):
                for m in s.messages.values():
                    assert m.message.message_id not in held, f"{m.message.message_id} is in two partitions"
                    held[m.message.message_id] = index
        for mid, partition in self.partition_of_id.items():
            if mid in self.completed:
                assert mid not in held, f"{mid} completed but still held"
            else:
                assert held.get(mid) == partition, f"{mid} lost or moved: expected in {partition}, found {held.get(mid)}"
        for key, delivered in self.first_delivered.items():
            sent = [mid for mid in self.sent_order.get(key, []) if mid in delivered]
            assert delivered == sent, f"key {key!r}: first delivered {delivered}, sent {sent} (PART-KEY-007, PART-SESS-001)"
        if not self.outage_seen and not self.sessions:
            counts = self.unkeyed_per_partition
            assert max(counts) - min(counts) <= 1, f"round-robin is uneven: {counts} (PART-NOKEY-001)"


@pytest.mark.clauses(
    "PART-STRUCT-001", "PART-KEY-001", "PART-KEY-002", "PART-KEY-006", "PART-KEY-007", "PART-KEY-008",
    "PART-NOKEY-001", "PART-NOKEY-002", "PART-AVAIL-001", "PART-AVAIL-002", "PART-SEQ-001", "PART-SESS-001",
    "PART-RECV-001", "PART-RECV-002", "PART-STRUCT-003",
)
@pytest.mark.needs("model-internals")
def test_partitioned_entities() -> None:
    run_state_machine_as_test(PartitionMachine)
