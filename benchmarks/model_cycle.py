"""How fast is the reference model? send -> peek-lock receive -> complete cycles per second.

Beside the model, in the same run and the same process, it times a bare broker doing
the least work the same cycle needs with a deque and a dict: ``send`` assigns a
sequence number and appends, ``receive`` pops the head and records a lock under a new
token, ``complete`` deletes the lock. Both are driven through three method calls per
cycle, as the model is, and both get pre-built messages, so the ratio measures the
model's own cost: lock duration and expiry, delivery counts, quota and size checks,
duplicate detection hooks, sessions, dead-lettering, time.

The same cycle written inline with no calls at all is printed too, for reference.

The same cycle on a partitioned queue (16 partitions, unkeyed messages: round-robin
sends, round-robin receives) is measured against the same bare baseline.

Usage: python benchmarks/model_cycle.py [--cycles N] [--repeat R]
Last line: ratio=<model time per cycle / bare time per cycle> partitioned_ratio=<the same, partitioned>
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sbreference import Message, Namespace  # noqa: E402


class BareBroker:
    """A queue with locks and nothing else."""

    def __init__(self) -> None:
        self.queue: deque = deque()
        self.locks: dict = {}
        self.sequence = 0
        self.token = 0

    def send(self, message) -> int:
        self.sequence += 1
        self.queue.append((self.sequence, message))
        return self.sequence

    def receive(self):
        entry = self.queue.popleft()
        self.token += 1
        self.locks[self.token] = entry
        return self.token, entry

    def complete(self, token) -> None:
        del self.locks[token]


def time_model(n: int, partitioned: bool = False) -> float:
    ns = Namespace()
    ns.create_queue("q", enable_partitioning=partitioned)
    conn = ns.connect()
    messages = [Message(b"payload", message_id=f"m{i}") for i in range(n)]
    send, receive, complete = ns.send, ns.receive, ns.complete
    start = time.perf_counter()
    for message in messages:
        send(conn, "q", message)
        (delivery,) = receive(conn, "q", 1)
        complete(conn, "q", delivery.lock_token)
    elapsed = time.perf_counter() - start
    assert ns.runtime_info("q")["active"] == 0
    return elapsed / n


def time_bare(n: int) -> float:
    broker = BareBroker()
    messages = [b"payload"] * n
    send, receive, complete = broker.send, broker.receive, broker.complete
    start = time.perf_counter()
    for message in messages:
        send(message)
        token, _ = receive()
        complete(token)
    elapsed = time.perf_counter() - start
    assert not broker.queue and not broker.locks
    return elapsed / n


def time_inline(n: int) -> float:
    queue: deque = deque()
    locks: dict = {}
    messages = [b"payload"] * n
    sequence = token = 0
    start = time.perf_counter()
    for message in messages:
        sequence += 1
        queue.append((sequence, message))
        entry = queue.popleft()
        token += 1
        locks[token] = entry
        del locks[token]
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    # Interleaved, so that a busy moment of the machine hits every variant alike.
    runs = [(time_model(args.cycles), time_model(args.cycles, partitioned=True), time_bare(args.cycles), time_inline(args.cycles))
            for _ in range(args.repeat)]
    model, partitioned, bare, inline = (min(column) for column in zip(*runs))
    print(f"python {sys.version.split()[0]}, {args.cycles} cycles, best of {args.repeat}")
    print(f"model:  {1 / model:>12,.0f} cycles/s  ({model * 1e6:.2f} us/cycle)")
    print(f"16 partitions: {1 / partitioned:>5,.0f} cycles/s  ({partitioned * 1e6:.2f} us/cycle)")
    print(f"bare:   {1 / bare:>12,.0f} cycles/s  ({bare * 1e6:.2f} us/cycle)  deque + dict, three calls per cycle")
    print(f"inline: {1 / inline:>12,.0f} cycles/s  ({inline * 1e6:.2f} us/cycle)  deque + dict, no calls (model/inline = {model / inline:.1f})")
    print(f"ratio={model / bare:.2f} partitioned_ratio={partitioned / bare:.2f}")


if __name__ == "__main__":
    main()
