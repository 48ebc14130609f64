"""A pytest plugin (``-p slow_target``) registering ``slow-calls``: the reference, with every
receive and lock renewal taking time on its clock on both sides of the broker's work, as a call
through an SDK under load does. It breaks no clause, so every scenario about how long a lock
lasts must pass on it (tests/test_slow_calls.py): a step that measured from one end of the call
alone read the call's own time as a lock too long or too short."""

from __future__ import annotations

from sbconform.targets import TargetWrapper, register
from sbconform.targets.reference import ReferenceTarget

#: each side of a slow call, in ms: more than an SDK target's clock tolerance (300 ms), far less
#: than the 5-second locks the scenarios use
CALL_SIDE = 400


class SlowCalls(TargetWrapper):
    name = "slow-calls"
    clock_tolerance = 300  # the SDK target's

    def __init__(self) -> None:
        super().__init__(ReferenceTarget())

    def _slow(self, call, *args, **kwargs):
        self.inner.wait(CALL_SIDE)
        try:
            return call(*args, **kwargs)
        finally:
            self.inner.wait(CALL_SIDE)

    def receive(self, *args, **kwargs):
        return self._slow(self.inner.receive, *args, **kwargs)

    def renew_lock(self, *args, **kwargs):
        return self._slow(self.inner.renew_lock, *args, **kwargs)

    def renew_session_lock(self, *args, **kwargs):
        return self._slow(self.inner.renew_session_lock, *args, **kwargs)


register(SlowCalls.name, lambda **options: SlowCalls())
