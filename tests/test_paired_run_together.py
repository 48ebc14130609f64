"""``run_together``: what falls due during a run is done within it, even when a round of work
takes real time (the syphon waiting on an SDK receive) and carries the clock past the end.

Found through the SDK target against two external endpoints in real time: PAIR-API-001's
"in seconds" scenario saw no ping, because the round that began before the ping's due instant
ended after the run's end, and the run stopped there."""

from __future__ import annotations

from sbconform.paired.factory import PRIMARY, run_together


class Clock:
    def __init__(self) -> None:
        self.t = 0
        self.waits: list[int] = []

    def now(self) -> int:
        return self.t

    def wait(self, ms: int) -> None:
        self.waits.append(ms)
        self.t += ms


class SlowFactory:
    """Its first round of work takes ``slow`` ms of the clock; a ping falls due at ``ping_at``."""

    def __init__(self, clock: Clock, slow: int, ping_at: int) -> None:
        self.targets = {PRIMARY: clock}
        self.clock, self.slow, self.ping_at = clock, slow, ping_at
        self.rounds: list[int] = []
        self.pinged: list[int] = []

    def work(self) -> None:
        now = self.clock.now()
        self.rounds.append(now)
        if self.ping_at is not None and now >= self.ping_at:
            self.pinged.append(now)
            self.ping_at = None
        if len(self.rounds) == 1:
            self.clock.t += self.slow  # a receive that waited

    def next_due(self) -> int | None:
        return self.ping_at


def test_a_ping_due_during_a_slow_round_is_sent_before_the_run_ends() -> None:
    clock = Clock()
    factory = SlowFactory(clock, slow=3_300, ping_at=2_700)
    run_together([factory], 3_000)
    assert factory.pinged == [3_300], factory.rounds  # one more round, at once, not a wait


def test_in_virtual_time_a_run_does_no_extra_round() -> None:
    clock = Clock()
    factory = SlowFactory(clock, slow=0, ping_at=2_700)
    run_together([factory], 3_000)
    assert factory.pinged == [2_700] and factory.rounds == [0, 2_700, 3_000], factory.rounds
    later = SlowFactory(clock, slow=0, ping_at=9_000)  # due after the end: left for the next run
    run_together([later], 3_000)
    assert later.pinged == [] and later.rounds == [3_000, 6_000]
