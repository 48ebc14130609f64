"""What the trace needs of an AMQP message, and the wire facts the interpreter reads
(outcome codes, Service Bus conditions and management status codes, entity paths).
See ``interpret.py`` for the sources of these facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from sbreference import paths

from ..amqp.codec import CODES, DISPOSITION_STATUS, STATUS_CODES
from ..amqp.values import Described, WireError, skip
from ..amqp.values import decode as decode_value
from .frames import field as fld

BATCH_FORMAT = 0x80013700
ACCEPTED, REJECTED, RELEASED, MODIFIED = 0x24, 0x25, 0x26, 0x27
SESSION_FILTER = "com.microsoft:session-filter"
LOCKED_UNTIL_UTC = "com.microsoft:locked-until-utc"
TICKS_AT_EPOCH = 621355968000000000
#: unsettled deliveries remembered per session (a receiver letting locks expire forever stays bounded)
MAX_UNSETTLED = 100_000

#: AMQP condition / management status -> ErrorCode value: the codec's tables (one place)
CODE_OF_CONDITION = {condition: code.value for condition, code in CODES.items()}
CODE_OF_STATUS = {status: code.value for status, code in STATUS_CODES.items()}
MANAGEMENT_SETTLEMENT = DISPOSITION_STATUS  # the one table (sbconform.amqp.codec)


def piece_of(path: str | None) -> str:
    """The queue or topic an entity path belongs to (lower case): the replay checker's piece."""
    return paths.entity_key(path)


def entity_path(address: str | None) -> str:
    if not address:
        return ""
    address = str(address)
    if "://" in address:
        return urlparse(address).path.strip("/")
    return address.strip("/")


def condition_code(error: Any) -> str | None:
    """The ErrorCode value of an AMQP error (a described list: condition, description, info)."""
    if isinstance(error, Described) and isinstance(error.value, list) and error.value:
        return CODE_OF_CONDITION.get(str(error.value[0]), "invalid-operation")
    return None


def state_code(state: Any) -> int | None:
    if isinstance(state, Described):
        try:
            return int(state.descriptor)
        except (TypeError, ValueError):
            return None
    return None


def _jsonable(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()[:128]
    if depth > 3:
        return str(value)[:128]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in list(value.items())[:64]}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in list(value)[:64]]
    return str(value)[:256]


def _ms(value: Any) -> int | None:
    return None if value is None else int(value)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass
class Msg:
    """What the trace needs of one message."""

    message_id: str | None
    session: str | None
    partition_key: str | None
    seq: int | None
    delivery_count: int | None
    args: dict
    result: dict


#: message sections (AMQP 1.0 part 3.2): the ones the trace reads
HEADER, ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, DATA, AMQP_VALUE = 0x70, 0x72, 0x73, 0x74, 0x75, 0x77
_DEAD_LETTER_KEYS = ("DeadLetterReason", "DeadLetterErrorDescription")


def _section(buf, pos: int) -> tuple[Any, int]:
    """(descriptor, position of the value) of the message section at ``pos``."""
    if buf[pos] != 0x00:
        raise WireError(f"byte {pos}: a message section that is not described")
    if pos + 2 < len(buf) and buf[pos + 1] == 0x53:  # the usual small ulong descriptor
        return buf[pos + 2], pos + 3
    return decode_value(buf, pos + 1)


def data_sections(payload) -> list[bytes]:
    """The contents of the data sections of an encoded message (a batch's messages)."""
    out = []
    pos, n = 0, len(payload)
    while pos < n:
        code, at = _section(payload, pos)
        if code == DATA:
            value, pos = decode_value(payload, at)
            out.append(value if isinstance(value, bytes) else b"")
        else:
            pos = skip(payload, at)
    return out


def read_message(data, sending: bool = True) -> Msg:
    """What the trace needs of an encoded message (its sections, AMQP 1.0 part 3.2), read
    from the bytes without decoding what the trace does not use: the body is measured, not
    copied; a delivered message's application properties are read only for its dead-letter
    reason (and only decoded when that name is in their bytes)."""
    buf = data.tobytes() if isinstance(data, memoryview) else data
    pos, n = 0, len(buf)
    header: list = []
    ann: dict = {}
    props: list = []
    app: dict = {}
    size = 0
    sized = False
    while pos < n:
        code, at = _section(buf, pos)
        if code == DATA:
            pos = skip(buf, at)
            kind = buf[at]
            if kind == 0xA0 or kind == 0xB0:
                size += pos - at - (2 if kind == 0xA0 else 5)
                sized = True
            continue
        if code == APPLICATION_PROPERTIES and not sending:
            end = skip(buf, at)
            if buf.find(b"DeadLetter", at, end) < 0:
                pos = end
                continue
        if code not in (HEADER, ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, AMQP_VALUE):
            pos = skip(buf, at)
            continue
        value, pos = decode_value(buf, at)
        if code == HEADER and isinstance(value, list):
            header = value
        elif code == ANNOTATIONS and isinstance(value, dict):
            ann = {str(k): v for k, v in value.items()}
        elif code == PROPERTIES and isinstance(value, list):
            props = value
        elif code == APPLICATION_PROPERTIES and isinstance(value, dict):
            app = value if sending else {k: value[k] for k in _DEAD_LETTER_KEYS if k in value}
        elif code == AMQP_VALUE and isinstance(value, (bytes, str)):
            size += len(value)
            sized = True
    ttl = fld(header, 2)
    args = {k: v for k, v in {
        "body_size": size if sized else None, "ttl": int(ttl) if ttl else None,
        "content_type": _str(fld(props, 6)), "correlation_id": _str(fld(props, 5)),
        "subject": _str(fld(props, 3)), "to": _str(fld(props, 2)), "reply_to": _str(fld(props, 4)),
        "properties": _jsonable(app) if app and sending else None,
        "scheduled": _ms(ann.get("x-opt-scheduled-enqueue-time")),
    }.items() if v is not None}
    state = ann.get("x-opt-message-state")
    result = {k: v for k, v in {
        "enqueued_time_utc": _ms(ann.get("x-opt-enqueued-time")), "locked_until_utc": _ms(ann.get("x-opt-locked-until")),
        "state": {1: "deferred", 2: "scheduled"}.get(state) if isinstance(state, int) else None,
        "dead_letter_reason": _str(app.get("DeadLetterReason")),
        "dead_letter_description": _str(app.get("DeadLetterErrorDescription")),
        "dead_letter_source": _str(ann.get("x-opt-deadletter-source")), "body_size": size if sized else None,
    }.items() if v is not None}
    seq = ann.get("x-opt-sequence-number")
    count = fld(header, 4, 0)
    return Msg(_str(fld(props, 0)), _str(fld(props, 10)), _str(ann.get("x-opt-partition-key")),
               int(seq) if isinstance(seq, int) else None, int(count) + 1 if isinstance(count, int) else None, args, result)
