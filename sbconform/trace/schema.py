"""The trace format, version 1: one event per step of an operation (documented in
``sbspec/trace-format.md``; this module is its machine-readable form).

Operations follow Jepsen's phases. A client ``invoke``s an operation (``op_id`` names it,
unique within the trace), then the same ``op_id`` ends with ``ok`` (it happened), ``fail``
(it did not happen: ``error`` says why) or ``info`` (unknown outcome: it may or may not have
happened, say a timeout). A receive that delivers several messages ends with one ``ok``
event per message, all with its ``op_id`` (an empty receive: one ``ok`` with no message).
Events are written in the order the recorder saw them; ``pos`` numbers them from 0.

Only the standard library here: the Arrow schema is built on demand (``arrow_schema``),
so the format can be read without pyarrow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

FORMAT = "sbconform-trace"
VERSION = 1

PHASES = ("invoke", "ok", "fail", "info")

#: operation -> what it is and which fields its events carry.
OPERATIONS: dict[str, str] = {
    "create-entity": "args: the entity description (EntityDescription field names); entity: its path",
    "delete-entity": "entity: its path",
    "send": "one message per send op: message_id, session, partition_key; args may hold ttl, scheduled, batch; ok: seq when the target reports it",
    "schedule": "message_id, args.enqueue_time; ok: seq (the scheduled message's sequence number)",
    "cancel-scheduled": "seq",
    "receive": "args: mode (peek-lock | receive-and-delete), max_count; ok: one event per delivered message with message_id, seq, lock, delivery_count, session, partition",
    "receive-deferred": "args.seqs; ok: as receive",
    "peek": "args: max_count, from_seq; ok: one event per message (seq, message_id, delivery_count), no lock",
    "complete": "lock, message_id, seq",
    "abandon": "lock, message_id, seq",
    "defer": "lock, message_id, seq",
    "dead-letter": "lock, message_id, seq; args: reason, description",
    "renew-lock": "lock, message_id, seq; ok: result.locked_until",
    "accept-session": "args.session (null: next available); ok: session, result.locked_until",
    "renew-session-lock": "session; ok: result.locked_until",
    "get-session-state": "session; ok: result.state (base64)",
    "set-session-state": "session; args.state (base64)",
    "close": "the client's link closes cleanly (its locks stay until they expire or are settled)",
    "drop-connection": "the client's connection is severed abruptly (its locks are lost)",
    "partition-down": "fault injection: entity, partition",
    "partition-up": "fault injection: entity, partition",
    "wait": "args.ms: time the client let pass (virtual-time targets)",
    "failover": "paired namespaces: args.state (primary | failover), entity the backlog queue or path",
    # added to version 1 with the recorder (sbspec/trace-format.md, "Operations"): every Target call is recorded
    "attach": "a sender or receiver link opens: entity; args: kind (sender | receiver), mode; fail: e.g. the entity does not exist",
    "update-entity": "entity; args.properties: the changed EntityDescription fields",
    "describe-entity": "entity; ok: result is the description (an observation, changes nothing)",
    "entity-counts": "entity; ok: result is the counts (active, deferred, scheduled, dead_letter, availability_status; an observation)",
    "entity-down": "fault injection: entity; args: code (the ErrorCode every operation on it answers), transient",
    "entity-up": "fault injection: entity",
    "add-rule": "entity: the subscription; args: name, filter, action (a subscription rule, RULES-*)",
    "remove-rule": "entity: the subscription; args.name",
    "list-rules": "entity: the subscription; ok: result is the rules (an observation)",
}

#: (name, arrow type, meaning). Every field may be null except trace, pos, time, client,
#: op_id, op and phase.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("trace", "string", "trace id (one run)"),
    ("pos", "int64", "position of the event in the trace, from 0"),
    ("time", "int64", "target clock time, ms (virtual on the reference, wall since open elsewhere)"),
    ("client", "string", "the sender or receiver (one link)"),
    ("conn", "string", "its connection"),
    ("op_id", "int64", "the operation this event belongs to"),
    ("op", "string", "operation, from OPERATIONS"),
    ("phase", "string", "invoke | ok | fail | info"),
    ("entity", "string", "entity path as the client named it (subscriptions: <topic>/Subscriptions/<name>)"),
    ("partition", "int32", "partition where observed, if the target tells"),
    ("message_id", "string", "message id"),
    ("seq", "int64", "sequence number"),
    ("lock", "string", "lock token, as text"),
    ("delivery_count", "int32", "delivery count as received (.NET convention: 1 on first delivery)"),
    ("session", "string", "session id"),
    ("partition_key", "string", "partition key"),
    ("args", "string", "operation arguments, a JSON object"),
    ("result", "string", "operation result, a JSON object"),
    ("error", "string", "error code (sbreference.ErrorCode value) on fail/info"),
)
FIELD_NAMES = tuple(name for name, _, _ in FIELDS)
REQUIRED = frozenset({"trace", "pos", "time", "client", "op_id", "op", "phase"})
_PY_TYPES = {"string": str, "int64": int, "int32": int}


class TraceFormatError(ValueError):
    """A trace that does not follow the format: says where (file, line or row) and which field."""


def loads(text: str | bytes, where: str) -> Any:
    """``json.loads``; JSON nested deeper than the decoder recurses (a line like ``[[[[...``,
    an application property nested 100,000 levels) is a TraceFormatError naming ``where``,
    not a RecursionError. Not JSON at all stays a ValueError, for the caller to say."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TraceFormatError(f"{where}: " * bool(where) + "JSON nested too deeply for a trace") from None


_KINDS = {name: _PY_TYPES[kind] for name, kind, _ in FIELDS}
#: the integer fields' bounds (``int64``, ``int32``): a larger number is no value of the format
#: (Parquet cannot hold it: convert failed on it with pyarrow's OverflowError)
_LIMITS = {name: 1 << (63 if kind == "int64" else 31) for name, kind, _ in FIELDS if kind != "string"}
_I64, _I32 = 1 << 63, 1 << 31
_ABSENT = dict.fromkeys(FIELD_NAMES)  # every field, None: what an event's own fields go over
_OPERATION_SET, _PHASE_SET = frozenset(OPERATIONS), frozenset(PHASES)
#: args / result texts already found to be JSON objects (receives repeat theirs): not parsed
#: again. Bounded: short texts only, emptied when full.
_OBJECTS: set[str] = set()
_OBJECTS_MAX, _OBJECT_TEXT_MAX = 4096, 256


def check_event(event: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The event with every field present (missing optional ones as None), or
    TraceFormatError naming ``where`` and the field at fault.

    Every event read or written goes through here, so the usual one (known fields of their
    exact types, its args and result texts seen before) is checked in one pass; anything
    else goes through ``_check_event_field_by_field``, which names the fault."""
    kinds = _KINDS
    for name, value in event.items():
        kind = kinds.get(name)
        if kind is None or (value is not None and (value.__class__ is not kind
                                                   or kind is int and not -_I64 <= value < _I64)):
            return _check_event_field_by_field(event, where)
    out = {**_ABSENT, **event}
    count, partition = out["delivery_count"], out["partition"]
    if (out["trace"] is None or out["pos"] is None or out["time"] is None or out["client"] is None or out["op_id"] is None
            or out["phase"] not in _PHASE_SET or out["op"] not in _OPERATION_SET
            or count is not None and not -_I32 <= count < _I32 or partition is not None and not -_I32 <= partition < _I32):
        return _check_event_field_by_field(event, where)
    args, result = out["args"], out["result"]
    if (args is not None and args not in _OBJECTS) or (result is not None and result not in _OBJECTS):
        return _check_event_field_by_field(event, where)
    return out


def _check_event_field_by_field(event: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``check_event``, one field at a time in the order of ``FIELDS``: the first fault found
    is the one named."""
    unknown = set(event) - set(FIELD_NAMES)
    if unknown:
        raise TraceFormatError(f"{where}: unknown field(s) {sorted(unknown)}")
    out: dict[str, Any] = {}
    for name, kind, _ in FIELDS:
        value = event.get(name)
        if value is None:
            if name in REQUIRED:
                raise TraceFormatError(f"{where}: field {name!r} is required")
        elif not isinstance(value, _PY_TYPES[kind]) or isinstance(value, bool):
            raise TraceFormatError(f"{where}: field {name!r} should be {kind}, got {type(value).__name__} {value!r}")
        elif kind != "string" and not -_LIMITS[name] <= value < _LIMITS[name]:
            raise TraceFormatError(f"{where}: field {name!r} is {str(value)[:40]}, out of {kind}'s range")
        out[name] = value
    if out["phase"] not in PHASES:
        raise TraceFormatError(f"{where}: field 'phase' is {out['phase']!r}, expected one of {', '.join(PHASES)}")
    if out["op"] not in OPERATIONS:
        raise TraceFormatError(f"{where}: field 'op' is {out['op']!r}, not an operation of format version {VERSION}")
    for name in ("args", "result"):
        text = out[name]
        if text is not None and text not in _OBJECTS:
            try:
                if not isinstance(loads(text, f"{where}: field {name!r}"), dict):
                    raise ValueError("not an object")
            except TraceFormatError:
                raise
            except ValueError as error:
                raise TraceFormatError(f"{where}: field {name!r} is not a JSON object ({error})") from None
            if len(text) <= _OBJECT_TEXT_MAX:
                if len(_OBJECTS) >= _OBJECTS_MAX:
                    _OBJECTS.clear()
                _OBJECTS.add(text)
    return out


def header(trace: str, **meta: Any) -> dict[str, Any]:
    """The first line of a JSON Lines trace (and the Parquet file's key-value metadata)."""
    return {"format": FORMAT, "version": VERSION, "trace": trace, **meta}


#: Parquet key-value metadata key holding the header (JSON)
META_KEY = b"sbconform-trace"
#: where ``sbconform generate`` kept the header before it wrote ``META_KEY`` (still read)
OLD_META_KEY = b"header"
#: how every Parquet trace is written: zstd, and a CRC per page (verified on reading)
PARQUET_OPTIONS = {"compression": "zstd", "write_page_checksum": True}


def parquet_metadata(trace: str, **meta: Any) -> dict[bytes, bytes]:
    """The key-value metadata of a Parquet trace: ``format``, ``version`` and the header
    (JSON) under ``META_KEY``. Every Parquet writer of the tool uses it."""
    return {**arrow_schema().metadata, META_KEY: json.dumps(header(trace, **meta)).encode()}


def check_header(obj: Any, where: str) -> dict[str, Any]:
    """A trace header (JSON Lines' first line, a Parquet file's metadata), checked."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceFormatError(f"{where}: not a trace header (expected a JSON object with \"format\": \"{FORMAT}\")")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceFormatError(f"{where}: header field 'version' should be an integer, got {version!r}")
    if version > VERSION:
        raise TraceFormatError(f"{where}: trace format version {version} is newer than this reader's ({VERSION}); upgrade sbconform")
    if version < 1:
        raise TraceFormatError(f"{where}: header field 'version' is {version}, versions start at 1")
    if not isinstance(obj.get("trace"), str):
        raise TraceFormatError(f"{where}: header field 'trace' (the trace id) should be a string, got {obj.get('trace')!r}")
    return obj


def arrow_schema():  # -> pyarrow.Schema
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32()}
    return pa.schema([pa.field(name, types[kind], nullable=name not in REQUIRED) for name, kind, _ in FIELDS],
                     metadata={b"format": FORMAT.encode(), b"version": str(VERSION).encode()})


@dataclass(frozen=True)
class Event:
    """One event; ``Event(**row)`` from a JSON line or a Parquet row."""

    trace: str
    pos: int
    time: int
    client: str
    op_id: int
    op: str
    phase: str
    conn: str | None = None
    entity: str | None = None
    partition: int | None = None
    message_id: str | None = None
    seq: int | None = None
    lock: str | None = None
    delivery_count: int | None = None
    session: str | None = None
    partition_key: str | None = None
    args: str | None = None
    result: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELD_NAMES}
