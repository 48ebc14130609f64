"""A server's limits are positive finite numbers however they are built (the CLI refuses the
rest when it parses them; ``Limits`` itself refused 0 and negatives but took nan and inf, which
a program building a server directly would hand to every connection)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("proton", reason="the sdk extra (python-qpid-proton) is not installed")

from sbconform.server.limits import Limits  # noqa: E402


@pytest.mark.parametrize("field", ["idle_timeout", "open_timeout", "close_grace", "accept_backoff", "max_links"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0, -1])
def test_a_limit_that_is_not_a_positive_finite_number_is_refused(field, value) -> None:
    with pytest.raises(ValueError, match=field):
        Limits(**{field: value})


def test_the_defaults_are_valid() -> None:
    assert Limits().idle_timeout > 0


@pytest.mark.parametrize(("flag", "value"), [("--link-credit", "2147483648"), ("--max-frame-size", "4294967296")])
def test_a_limit_proton_cannot_hold_is_refused_on_the_command_line(flag, value) -> None:
    """Review finding: accepted, then every sender got amqp:internal-error (OverflowError in the
    server's log) or every connection was reset."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "sbconform.cli", "serve", "--port", "0", flag, value],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in done.stderr, done.stderr
