"""The clients a recording names (``_Client``: ``c1``, its connections ``c1.1``, ``c1.2``...)
and the transactional client whose work is recorded (TXN-*), for ``recorder.RecordingTarget``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from sbreference import ErrorCode, Message, ServiceBusError

from ..targets.base import PEEK_LOCK, Handle, Received, TransactionalClient
from .events import settled_fields

if TYPE_CHECKING:
    from .recorder import RecordingTarget


class _Client:
    __slots__ = ("name", "connections", "path", "kind")

    def __init__(self, name: str, path: str, kind: str) -> None:
        self.name = name
        self.connections = 1
        self.path = path
        self.kind = kind

    @property
    def conn(self) -> str:
        return f"{self.name}.{self.connections}"


#: discharge errors after which nothing of the transaction was applied, for certain
DEFINITE_TRANSACTION_ERRORS = frozenset({ErrorCode.TRANSACTION_ROLLBACK, ErrorCode.TRANSACTION_UNKNOWN, ErrorCode.TRANSACTION_TIMEOUT})


class RecordingTransactionalClient(TransactionalClient):
    """A transactional client whose work is recorded (TXN-*): every transactional send and settlement
    is invoked when it is enlisted and completes when the transaction is discharged: ``ok`` at a
    commit, ``fail`` at a rollback, a failed commit or the connection's loss, when nothing of it was
    applied (TXN-ATOM-001). Receives are recorded as any receive. Declare and discharge themselves are
    no entity operations and leave no event."""

    def __init__(self, recording: RecordingTarget, inner: TransactionalClient) -> None:
        self.rec = recording
        self.inner = inner
        self.client = _Client(recording.recorder.new_client(), "", "transactional")
        self.pending: dict[Any, list[tuple[int, str, dict[str, Any]]]] = {}

    def _key(self, txn: Any) -> Any:
        return bytes(txn) if isinstance(txn, (bytes, bytearray, memoryview)) else txn

    def _who(self) -> tuple[str, str]:
        return self.client.name, self.client.conn

    def receive(self, path: str, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        args = {"mode": PEEK_LOCK, "max_count": max_count, "max_wait": max_wait}
        return self.rec._call("receive", self._who(), {"entity": path, "session": None, "args": args},
                              lambda: self.inner.receive(path, max_count, max_wait), self.rec._deliveries)

    def declare(self) -> Any:
        txn = self.inner.declare()
        self.pending[self._key(txn)] = []
        return txn

    def _enlist(self, txn: Any, op: str, fields: dict[str, Any], call: Callable[[], Any]) -> None:
        op_id = self.rec.recorder.new_op()
        fields = {**fields, "args": {**fields.get("args", {}), "transaction": str(self._key(txn))}}
        self.rec._emit(op, op_id, "invoke", self._who(), fields)
        try:
            call()
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            self.rec._outcome([(op_id, fields)], op, self._who(), error)
            raise
        self.pending.setdefault(self._key(txn), []).append((op_id, op, fields))

    def send(self, txn: Any, path: str, messages: Sequence[Message], via: str | None = None) -> None:
        sender = Handle("sender", path)
        for message in messages:
            fields = self.rec._send_fields(sender, message, transaction=True, via=via)
            self._enlist(txn, "send", fields, lambda m=message: self.inner.send(txn, path, [m], via))

    def settle(self, txn: Any, path: str, message: Received, outcome: str, reason: str | None = None, description: str | None = None) -> None:
        op = {"dead_letter": "dead-letter"}.get(outcome, outcome)
        fields: dict[str, Any] = {"entity": path, **settled_fields(message)}
        if outcome == "dead_letter":
            fields["args"] = {"reason": reason, "description": description}
        self._enlist(txn, op, fields, lambda: self.inner.settle(txn, path, message, outcome, reason, description))

    def _end(self, txn: Any, phase: str, error: str | None = None) -> None:
        for op_id, op, fields in self.pending.pop(self._key(txn), []):
            done = {k: v for k, v in fields.items() if k != "args"}
            if error is not None:
                done["error"] = error
            self.rec._emit(op, op_id, phase, self._who(), done)

    def discharge(self, txn: Any, commit: bool) -> None:
        try:
            self.inner.discharge(txn, commit)
        except ServiceBusError as error:
            if error.code in DEFINITE_TRANSACTION_ERRORS:
                self._end(txn, "fail", str(error.code))  # nothing of it was applied
            else:  # a timeout or a lost connection: the commit may have happened
                self._end(txn, "info", str(error.code))
            raise
        except BaseException:
            self._end(txn, "info")
            raise
        if commit:
            self._end(txn, "ok")
        else:
            self._end(txn, "fail", str(ErrorCode.TRANSACTION_ROLLBACK))

    def drop(self) -> None:
        self.inner.drop()
        for txn in list(self.pending):
            self._end(txn, "fail", str(ErrorCode.CONNECTION_LOST))
        self.client.connections += 1

    def close(self) -> None:
        self.inner.close()
        for txn in list(self.pending):
            self._end(txn, "fail", str(ErrorCode.CONNECTION_LOST))
