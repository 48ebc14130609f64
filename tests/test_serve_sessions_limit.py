"""Sessions per connection are bounded (review finding: a client that sent only BEGIN frames, with
no token and no link, was served up to 65,535 sessions per connection: 4 such connections took
the server from 50 MB to 307 MB, and a normal client's open, send and close from 1 s to 44 s).

A client that begins more sessions at once than ``--max-sessions`` is closed with
amqp:resource-limit-exceeded, as one past ``--max-links`` is; sessions it ended no longer count.
(The limit is not advertised as channel-max: proton, told a channel-max, kept about 2.5 kB per
session begun and ended, which the BEGIN/END loop test of test_serve_security catches.)
"""

from __future__ import annotations

import pytest

pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from serve_support import CLOSE, RawClient, begin, frame, performative  # noqa: E402
from test_serve_security import InProcess, closed_with, served  # noqa: E402


def test_sessions_per_connection_are_bounded_and_ended_ones_are_released() -> None:
    server = InProcess(max_sessions=8)
    try:
        c = RawClient(server.port)
        c.open_session()  # channel 0
        for _ in range(20):  # 140 sessions begun and ended: never more than 8 at once
            c.send(*[begin(ch) for ch in range(1, 8)], *[frame(performative(0x17), ch) for ch in range(1, 8)])
        c.read(1)
        assert not c.closed and not c.frames.of(CLOSE), f"closed: {c.frames.of(CLOSE)}"
        c.send(*[begin(ch) for ch in range(1, 20)])  # 20 at once
        assert closed_with(c, "amqp:resource-limit-exceeded")
        served(server.port)
    finally:
        server.stop()
