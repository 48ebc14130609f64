"""sbconform's reference model of Azure Service Bus semantics.

Pure Python, standard library only, no I/O, no randomness: an executable reading of
the documentation, used as the oracle for every target. Start with ``Namespace``.

Modules, one concept (one state machine) each:

- ``namespace``: the front door (connections, operations, time, paths); ``provisioning``
  its management half (entities, subscriptions, rules, partition faults);
- ``description``: entity descriptions, their limits and validation; ``entity``: queues,
  topics and subscriptions (the sending side); ``dedup``: duplicate detection;
- ``store``: the settlement state machine (receive, lock, settle, release, time), with its
  parts ``lanes`` (FIFOs), ``sessions`` (session locks and state), ``deferral`` and
  ``deadletter`` (dead-lettering and expiry); ``operations``: receive modes, settlements by name;
  ``forwarding``: what auto-forwarding means for receivers;
- ``partitioning``: partitioned entities (the sending side); ``partitions``: numbering,
  keys and ``PartitionedStore``;
- ``rules``: subscription rules; ``sqlparse`` reads and ``sqlfilter`` evaluates the SQL language;
- ``message``, ``clock``, ``errors``, ``paths``, ``tiers``, ``transactions``, ``paired``.
"""

from .clock import DAY, HOUR, MINUTE, NEVER, SECOND, TIMESPAN_MAX, INT_MAX, Clock, VirtualClock, seconds
from .entity import PING_CONTENT_TYPE, EntityDescription, Queue, Subscription, Topic
from .errors import TRANSIENT, ErrorCode, ServiceBusError
from .message import (
    DEAD_LETTER_ERROR_DESCRIPTION,
    DEAD_LETTER_REASON,
    MAX_DELIVERY_COUNT_EXCEEDED,
    TTL_EXPIRED,
    Delivery,
    Message,
    State,
    StoredMessage,
    message_size,
)
from .namespace import Namespace
from .partitioning import (
    PREMIUM_PARTITION_COUNTS,
    STANDARD_PARTITION_COUNT,
    PartitionedQueue,
    PartitionedStore,
    PartitionedTopic,
    key_hash,
    partition_key,
    partition_of,
    sequence_number,
)
from .rules import (
    DEFAULT_RULE_NAME,
    FILTER_EVALUATION_DEAD_LETTER_REASON,
    RULE_NAME_PROPERTY,
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)
from .store import PEEK_LOCK, RECEIVE_AND_DELETE, MessageStore

__all__ = [name for name in dir() if not name.startswith("_")]
