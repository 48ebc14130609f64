"""Trace events of recorded runs: the fields each call gives, the numbering of one trace
(``TraceRecorder``) and the trace of one test (``TestTrace``). The target wrapper that
calls them is ``recorder.RecordingTarget``; ``sbspec/trace-format.md`` is the format."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Mapping

from sbreference import ErrorCode, Message

from ..targets.base import Received, Target
from .io import JsonlWriter

#: the pseudo-client of calls not made on a link (management, faults, waiting)
ADMIN = "admin"


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, ErrorCode):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _json(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    return json.dumps(_plain({k: v for k, v in obj.items() if v is not None}), sort_keys=True, separators=(",", ":"))


def _lock(token: Any) -> str | None:
    return None if token is None else str(token)


def message_args(message: Message) -> dict[str, Any]:
    """What a send records of a message besides its id, session and partition key: every
    other field, the body as its size (``body_size``)."""
    return {
        "body_size": len(message.body),
        "ttl": message.time_to_live,
        "scheduled": message.scheduled_enqueue_time,
        "content_type": message.content_type,
        "correlation_id": message.correlation_id,
        "subject": message.subject,
        "to": message.to,
        "reply_to": message.reply_to,
        "properties": dict(message.application_properties) or None,
    }


def received_fields(message: Received) -> dict[str, Any]:
    """The event fields of one delivered (or peeked) message."""
    result = {
        "enqueued_time": message.enqueued_time,
        "locked_until": message.locked_until,
        "expires_at": message.expires_at,
        "state": message.state if message.state != "active" else None,
        "scheduled": message.scheduled_enqueue_time,
        "dead_letter_reason": message.dead_letter_reason,
        "dead_letter_description": message.dead_letter_description,
        "dead_letter_source": message.dead_letter_source,
        "body_size": len(message.body) if message.body is not None else None,
    }
    return {
        "message_id": message.message_id,
        "seq": message.sequence_number,
        "lock": _lock(message.lock_token),
        "delivery_count": message.delivery_count,
        "session": message.session_id,
        "partition_key": message.partition_key,
        "partition": message.partition,
        "result": result,
    }


def settled_fields(message: Received) -> dict[str, Any]:
    """The event fields of an operation on a received message (settle, renew)."""
    return {
        "message_id": message.message_id,
        "seq": message.sequence_number,
        "lock": _lock(message.lock_token),
        "session": message.session_id,
        "partition": message.partition,
    }


class TraceRecorder:
    """Numbers one trace's events (``pos``), operations (``op_id``), clients and
    namespaces, and writes the events. Safe to share between threads and targets."""

    def __init__(self, writer: Any, trace: str) -> None:
        self.writer = writer
        self.trace = trace
        self._lock = threading.RLock()
        self._pos = 0
        self._ops = itertools.count(1)
        self._clients = itertools.count(1)
        self._namespaces = itertools.count(0)
        self.closed = False

    def new_op(self) -> int:
        with self._lock:
            return next(self._ops)

    def new_client(self) -> str:
        with self._lock:
            return f"c{next(self._clients)}"

    def new_namespace(self) -> int:
        with self._lock:
            return next(self._namespaces)

    def emit(self, fields: dict[str, Any]) -> None:
        with self._lock:
            if self.closed:
                return  # a target used after its test ended (teardown of a later fixture): not this trace's
            event = {"trace": self.trace, "pos": self._pos}
            event.update(fields)
            for name in ("args", "result"):
                value = event.get(name)
                if value is not None and not isinstance(value, str):
                    event[name] = _json(value)
                    if event[name] == "{}":
                        event[name] = None
            self.writer.write(event)
            self._pos += 1

    def wrap(self, target: Target, partitions: int | None = None) -> Any:
        """``target`` recorded into this trace (a ``recorder.RecordingTarget``)."""
        from .recorder import RecordingTarget

        return RecordingTarget(target, self, partitions=partitions)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.writer.close()


# ------------------------------------------------------------ per-test traces

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_file_name(trace: str) -> str:
    """A file name for a trace id (a test node id): readable, unique, not too long."""
    digest = hashlib.sha1(trace.encode("utf-8")).hexdigest()[:10]
    stem = _UNSAFE.sub("_", trace).strip("_")[:120]
    return f"{stem}-{digest}.jsonl"


class TestTrace:
    """The trace of one test: its file is made when the first target is recorded."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | Path, trace: str, **meta: Any) -> None:
        self.path = Path(directory) / trace_file_name(trace)
        self.trace = trace
        self.meta = meta
        self.recorder: TraceRecorder | None = None

    def wrap(self, target: Target) -> Any:
        if self.recorder is None:
            self.path.unlink(missing_ok=True)  # a rerun into the same directory starts the trace afresh
            # the recorder makes well-formed events (the tests read every recorded trace back,
            # checked); not checking each again here halves the cost of recording
            writer = JsonlWriter(self.path, self.trace, validate=False, target=target.describe(), **self.meta)
            self.recorder = TraceRecorder(writer, self.trace)
        return self.recorder.wrap(target)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
