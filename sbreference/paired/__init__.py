"""Paired namespaces (send availability), as the old .NET SDK implemented them.

Seeds 000 (French), 001 (Portuguese with the English inline) and 002 (Hungarian) describe
what ``MessagingFactory.PairNamespaceAsync`` with ``SendAvailabilityPairedNamespaceOptions``
does on the client's behalf. Each concept is one pure state machine here; none of them
performs anything. They take events (a send's outcome, a ping's outcome, time passing, a
factory closing) and answer with decisions (send this there, ping now, move this message,
fault that factory). ``sbconform.paired`` carries the decisions out against two targets,
a primary and a secondary namespace.

- ``options``:   the pairing's options (PAIR-OPT-*).
- ``backlog``:   backlog queue paths, their description and provisioning (PAIR-BACKLOG-*).
- ``rewrite``:   how a message is rewritten to sit in a backlog queue, and back (PAIR-RENAME-*).
- ``ping``:      the ping message and the ping task (PAIR-PING-*).
- ``failover``:  the failover sender of one paired factory (PAIR-FAIL-*, PAIR-ROUTE-*).
- ``syphon``:    the message pumps that empty the backlog queues (PAIR-SYPH-*, PAIR-COST-001).
- ``factories``: close/fault coordination of the primary and secondary factories (PAIR-CLOSE-*).
"""

from .backlog import BACKLOG_QUEUE_PROPERTIES, CreateQueue, backlog_path, backlog_paths, backlog_queue_description, plan_backlog_queues
from .factories import CLOSE_GRACE, CLOSED, FAULTED, OPEN, FactoryPair, FaultFactory
from .failover import Fail, FailoverSender, Send, starts_failover_timer
from .options import PRIMARY, SECONDARY, PairedNamespaceOptions
from .ping import PingTask, is_ping, ping_message
from .rewrite import X_MS_PATH, X_MS_SCHEDULEDENQUEUETIMEUTC, X_MS_SESSIONID, X_MS_TIMETOLIVE, from_backlog, to_backlog
from .syphon import LONG_POLL, DeadLetter, Forward, Syphon, idle_receive_calls

__all__ = [name for name in dir() if not name.startswith("_")]
