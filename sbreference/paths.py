"""Entity paths, as clients name them: the one parser every layer uses.

Service Bus addresses what a client sends to or receives from by a path relative to the
namespace (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-dead-letter-queues#path-to-the-dead-letter-queue,
https://learn.microsoft.com/azure/service-bus-messaging/service-bus-queues-topics-subscriptions):

- ``q``: a queue or a topic;
- ``q/$DeadLetterQueue``: a queue's dead-letter subqueue;
- ``t/Subscriptions/s``: a subscription of topic ``t``;
- ``t/Subscriptions/s/$DeadLetterQueue``: its dead-letter subqueue;
- ``q/$Transfer/$DeadLetterQueue``, ``t/Subscriptions/s/$Transfer/$DeadLetterQueue`` (and a topic's,
  ``t/$Transfer/$DeadLetterQueue``): the transfer dead-letter queue, what a send via it could not deliver
  (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-dead-letter-queues#path-to-the-transfer-dead-letter-queue,
  TXN-VIA-003).

Names are case-insensitive (the model keys entities by the lower-cased path); leading and
trailing slashes are ignored. ``parse`` keeps the case as written, ``.key`` lower-cases.
"""

from __future__ import annotations

from dataclasses import dataclass

DEAD_LETTER_QUEUE = "$DeadLetterQueue"
TRANSFER_DEAD_LETTER_QUEUE = "$Transfer/$DeadLetterQueue"
#: the dead-letter suffix, the transfer infix before it and the subscriptions infix, lower case (compare with ``path.lower()``)
DEAD_LETTER_SUFFIX = "/$deadletterqueue"
TRANSFER_SUFFIX = "/$transfer"
SUBSCRIPTIONS = "/subscriptions/"

#: ``entity_key`` as regular expressions (Java and Python syntax; for Spark SQL's
#: ``regexp_replace``): replacing every match of each with "", in order, then lower-casing
#: gives the key. The steps are ``parse``'s: slashes, the (transfer) dead-letter suffix, the subscription.
ENTITY_KEY_PATTERNS = (r"^/+|/+$", r"(?i)(/\$transfer)?/\$deadletterqueue$", r"(?is)/subscriptions/.*$")


@dataclass(frozen=True, slots=True)
class EntityPath:
    """A parsed path: the queue or topic, the subscription if any, and whether it names the
    dead-letter subqueue (``transfer``: the transfer dead-letter queue, a dead-letter subqueue too).
    Case as written."""

    entity: str
    subscription: str | None = None
    dead_letter: bool = False
    transfer: bool = False

    @property
    def key(self) -> str:
        """The queue or topic, lower case: how the namespace keys its entities."""
        return self.entity.lower()

    @property
    def subscription_key(self) -> str | None:
        return self.subscription.lower() if self.subscription is not None else None

    @property
    def base(self) -> str:
        """The path without the dead-letter suffix (the queue or the subscription)."""
        if self.subscription is None:
            return self.entity
        return subscription_path(self.entity, self.subscription)

    @property
    def suffix(self) -> str:
        """What follows the queue or subscription: "", "/$DeadLetterQueue" or "/$Transfer/$DeadLetterQueue"."""
        if not self.dead_letter:
            return ""
        return "/" + (TRANSFER_DEAD_LETTER_QUEUE if self.transfer else DEAD_LETTER_QUEUE)

    def __str__(self) -> str:
        return self.base + self.suffix


def parse(path: str) -> EntityPath:
    """``q``, ``q/$DeadLetterQueue``, ``t/Subscriptions/s``, ``t/Subscriptions/s/$DeadLetterQueue``."""
    path = path.strip("/")
    lower = path.lower()
    dead_letter = lower.endswith(DEAD_LETTER_SUFFIX)
    transfer = False
    if dead_letter:
        path = path[: -len(DEAD_LETTER_SUFFIX)]
        lower = lower[: -len(DEAD_LETTER_SUFFIX)]
        transfer = lower.endswith(TRANSFER_SUFFIX)  # TXN-VIA-003
        if transfer:
            path = path[: -len(TRANSFER_SUFFIX)]
            lower = lower[: -len(TRANSFER_SUFFIX)]
    cut = lower.find(SUBSCRIPTIONS)
    if cut >= 0:
        return EntityPath(path[:cut], path[cut + len(SUBSCRIPTIONS):], dead_letter, transfer)
    return EntityPath(path, None, dead_letter, transfer)


def entity_key(path: str | None) -> str:
    """The queue or topic a path belongs to, lower case ("" for none): the trace checker's piece."""
    if path is None:
        return ""
    return parse(path).key


def dead_letter_path(path: str) -> str:
    """The dead-letter subqueue of a queue or subscription path."""
    return path.rstrip("/") + "/" + DEAD_LETTER_QUEUE


def transfer_dead_letter_path(path: str) -> str:
    """The transfer dead-letter queue of a queue, subscription or topic path (TXN-VIA-003)."""
    return path.rstrip("/") + "/" + TRANSFER_DEAD_LETTER_QUEUE


def subscription_path(topic: str, name: str) -> str:
    return f"{topic}/Subscriptions/{name}"


#: SETTLE-ENT-002: "Entity segments can contain only letters, numbers, periods(.), hyphens(-), and underscores(_).
#: Any other characters cause the request to fail."
#: (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-resource-manager-exceptions)
SEGMENT_PUNCTUATION = "._-"


def name_problem(name: str, segments: bool) -> str | None:
    """Why Service Bus refuses ``name`` as a queue or topic path (``segments``: slash-separated segments,
    "Cannot start or end with a slash", QueueProperties.Name) or as a subscription name, or None.
    Letters and digits are taken as Python reads them (the page does not say ASCII only)."""
    parts = name.split("/") if segments else [name]
    if any(not part for part in parts):
        return f"{name!r} has an empty segment (it may not start or end with a slash, nor hold two in a row)"
    for part in parts:
        bad = sorted({ch for ch in part if not (ch.isalnum() or ch in SEGMENT_PUNCTUATION)})
        if bad:
            return f"{name!r} contains {''.join(bad)!r}: entity segments can contain only letters, numbers, periods, hyphens and underscores"
    return None
