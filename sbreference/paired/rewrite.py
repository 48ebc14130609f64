"""Rewriting a message to sit in a backlog queue, and back (PAIR-RENAME-*, PAIR-SYPH-003).

"The following properties are cleared and added under a new alias": SessionId ->
x-ms-sessionid, TimeToLive -> x-ms-timetolive, ScheduledEnqueueTimeUtc ->
x-ms-scheduledenqueuetimeutc (the seeds' table says x-ms-path, which collides with the
destination: PAIR-DISC-001), and the destination path goes in x-ms-path. An alias is
present only when the original property was set. Times stay model milliseconds (.NET
stores a TimeSpan and a DateTime).
"""

from __future__ import annotations

from ..message import Message

X_MS_SESSIONID = "x-ms-sessionid"
X_MS_TIMETOLIVE = "x-ms-timetolive"
X_MS_SCHEDULEDENQUEUETIMEUTC = "x-ms-scheduledenqueuetimeutc"  # PAIR-DISC-001
X_MS_PATH = "x-ms-path"

#: Message field -> the application property that holds it in the backlog.
ALIASES = {
    "session_id": X_MS_SESSIONID,
    "time_to_live": X_MS_TIMETOLIVE,
    "scheduled_enqueue_time": X_MS_SCHEDULEDENQUEUETIMEUTC,
}

BACKLOG_PROPERTIES = frozenset({*ALIASES.values(), X_MS_PATH})


def to_backlog(message: Message, destination: str) -> Message:
    """PAIR-RENAME-001..004: clear the aliased fields, keep them as properties, add x-ms-path."""
    properties = {k: v for k, v in message.application_properties.items() if k not in BACKLOG_PROPERTIES}
    for name, alias in ALIASES.items():
        value = getattr(message, name)
        if value is not None:
            properties[alias] = value
    properties[X_MS_PATH] = destination
    return message.with_changes(
        session_id=None, time_to_live=None, scheduled_enqueue_time=None, application_properties=properties
    )


def destination_of(message: Message) -> str | None:
    value = message.application_properties.get(X_MS_PATH)
    return value if isinstance(value, str) and value else None


def from_backlog(message: Message) -> tuple[str, Message]:
    """PAIR-SYPH-003: the destination, and the message with its properties translated
    back (the aliases and x-ms-path removed). ``ValueError`` if it names no destination."""
    destination = destination_of(message)
    if destination is None:
        raise ValueError(f"message {message.message_id!r} carries no {X_MS_PATH} property")
    props = message.application_properties
    restored = {name: props[alias] for name, alias in ALIASES.items() if alias in props}
    kept = {k: v for k, v in props.items() if k not in BACKLOG_PROPERTIES}
    return destination, message.with_changes(application_properties=kept, **restored)
