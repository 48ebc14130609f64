"""The pairing's options (``SendAvailabilityPairedNamespaceOptions``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..clock import MINUTE
from ..errors import ErrorCode, ServiceBusError

#: The two namespaces (and their factories) of a pairing.
PRIMARY = "primary"
SECONDARY = "secondary"


@dataclass(frozen=True)
class PairedNamespaceOptions:
    """Durations are model milliseconds.

    - ``backlog_queue_count``: how many backlog queues; default 10, at least 1 (PAIR-OPT-001).
    - ``failover_interval``: how long failures of an entity are accepted before it fails
      over; 0 fails over on the first failure that counts (PAIR-OPT-002). The seeds give no
      default; 1 minute is a decompiled constant (see the clause's note).
    - ``ping_primary_interval``: time between two pings of a failed-over entity; "by
      default, this happens once per minute" (PAIR-PING-003).
    - ``enable_syphon``: whether this process runs the syphon (PAIR-OPT-003).
    """

    backlog_queue_count: int = 10
    failover_interval: int = 1 * MINUTE
    ping_primary_interval: int = 1 * MINUTE
    enable_syphon: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.backlog_queue_count < 1:
            problems.append(f"backlog_queue_count must be at least 1, got {self.backlog_queue_count}")
        if self.failover_interval < 0:
            problems.append(f"failover_interval must not be negative, got {self.failover_interval} ms")
        if self.ping_primary_interval <= 0:
            problems.append(f"ping_primary_interval must be positive, got {self.ping_primary_interval} ms")
        if problems:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, "invalid paired namespace options: " + "; ".join(problems))
