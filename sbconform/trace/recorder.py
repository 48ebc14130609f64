"""Recording: a Target wrapper that writes every call it passes on as trace events.

``RecordingTarget(target, recorder)`` behaves exactly as ``target`` (same results, same
errors, same capabilities) and writes, for each call, an ``invoke`` event before it and
``ok`` / ``fail`` / ``info`` events after it (``sbspec/trace-format.md``, "Recorded traces",
lists what each call gives). ``TraceRecorder`` numbers events, operations, clients and
namespaces of one trace and hands the events to a writer (``JsonlWriter``: each event is
on disk when the call returns).

The pytest plugin (``--sb-trace DIR``) records every target ``TargetSession.new()`` makes
during a test into ``DIR/<test>.jsonl``, the trace id being the test's node id.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from sbreference import Message, ServiceBusError

from ..targets.base import PEEK_LOCK, Handle, Received, Target, TargetWrapper
from ..targets.wrapper import _props
from .events import (  # noqa: F401  (importable from here, as before)
    ADMIN,
    TestTrace,
    TraceRecorder,
    _json,
    _lock,
    _plain,
    message_args,
    received_fields,
    settled_fields,
    trace_file_name,
)
from .recorded_clients import DEFINITE_TRANSACTION_ERRORS, RecordingTransactionalClient, _Client  # noqa: F401  (as before)

class RecordingTarget(TargetWrapper):
    """``target``, with every call recorded by ``recorder`` (see the module docstring).

    Handles are the wrapped target's own; the recorder names their clients ``c1``, ``c2``...
    in order of creation within the trace, and their connections ``c1.1``, then ``c1.2``
    after a drop. Entities of the trace's first namespace keep their paths; those of the
    k-th namespace made later in the same trace (a paired secondary, a Premium namespace,
    the next example of a stateful test) are ``<k>:<path>``.
    """

    def __init__(self, target: Target, recorder: TraceRecorder, partitions: int | None = None) -> None:
        super().__init__(target)  # the wrapped target is ``inner`` (``target``, as before)
        self.recorder = recorder
        self.namespace_index = recorder.new_namespace()
        self.partitions = partitions  # a Premium namespace's partition count
        self._clients: dict[int, _Client] = {}  # id(handle) -> client
        self._handles: list[Handle] = []  # keeps ids unique while recorded
        self._partitioned: set[str] = set()  # entities created partitioned (through this wrapper)

    @property
    def target(self) -> Target:
        """The wrapped target (``inner``; this name as before)."""
        return self.inner

    # ------------------------------------------------------------- plumbing
    def entity(self, path: str | None) -> str | None:
        if path is None or self.namespace_index == 0:
            return path
        return f"{self.namespace_index}:{path}"

    def _time(self) -> int:
        try:
            return int(self.inner.now())
        except Exception:  # a broken or closed target: keep recording
            return 0

    def _client(self, handle: Handle) -> _Client:
        client = self._clients.get(id(handle))
        if client is None:  # a handle this wrapper did not make (made before wrapping)
            client = self._bind(handle, self.recorder.new_client())
        return client

    def _bind(self, handle: Handle, name: str) -> _Client:
        client = _Client(name, handle.path, handle.kind)
        self._clients[id(handle)] = client
        self._handles.append(handle)
        return client

    def _emit(self, op: str, op_id: int, phase: str, who: tuple[str, str | None], fields: Mapping[str, Any]) -> None:
        event = {"time": self._time(), "client": who[0], "conn": who[1], "op_id": op_id, "op": op, "phase": phase}
        event.update(fields)
        if "entity" in event:
            event["entity"] = self.entity(event["entity"])
        self.recorder.emit(event)

    def _outcome(self, ops: Sequence[tuple[int, Mapping[str, Any]]], op: str, who: tuple[str, str | None], error: BaseException) -> None:
        """The fail or info events of operations whose call raised ``error``."""
        if isinstance(error, ServiceBusError):
            phase = "fail"
            extra: dict[str, Any] = {"error": str(error.code)}
        else:
            phase = "info"
            extra = {"result": {"exception": f"{type(error).__name__}: {error}"[:500]}}
        for op_id, fields in ops:
            self._emit(op, op_id, phase, who, {**{k: v for k, v in fields.items() if k not in ("args", "result")}, **extra})

    def _call(
        self,
        op: str,
        who: tuple[str, str | None],
        fields: Mapping[str, Any],
        call: Callable[[], Any],
        oks: Callable[[Any], Iterable[Mapping[str, Any]]] | None = None,
    ) -> Any:
        """One operation: invoke, the call, then its ok events (``oks(result)``, default one
        ok with the invoke's fields) or its fail/info event."""
        op_id = self.recorder.new_op()
        self._emit(op, op_id, "invoke", who, fields)
        try:
            result = call()
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            self._outcome([(op_id, fields)], op, who, error)
            raise
        base = {k: v for k, v in fields.items() if k in ("entity", "session", "partition")}
        for ok in (oks(result) if oks is not None else [{k: v for k, v in fields.items() if k != "args"}]):
            self._emit(op, op_id, "ok", who, {**base, **ok})
        return result

    def _group(
        self,
        op: str,
        who: tuple[str, str | None],
        each: Sequence[Mapping[str, Any]],
        call: Callable[[], Any],
        results: Callable[[Any], Sequence[Mapping[str, Any]]],
        group_key: str = "batch",
        unknown: bool = False,
    ) -> Any:
        """Several operations in one call, all or nothing (a batch, a transaction): every
        invoke, the call, then each one's ok (``results(result)[i]`` merged in) or fail.
        ``unknown``: a failure leaves each one's outcome unknown (info)."""
        ops: list[tuple[int, dict[str, Any]]] = []
        first = None
        for fields in each:
            op_id = self.recorder.new_op()
            first = op_id if first is None else first
            fields = dict(fields)
            if len(each) > 1:
                fields["args"] = {**fields.get("args", {}), group_key: first}
            ops.append((op_id, fields))
            self._emit(op, op_id, "invoke", fields.pop("_who", who), fields)
        try:
            result = call()
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            if unknown and isinstance(error, ServiceBusError):
                for op_id, fields in ops:
                    self._emit(op, op_id, "info", who, {**{k: v for k, v in fields.items() if k != "args"}, "error": str(error.code)})
            else:
                self._outcome(ops, op, who, error)
            raise
        extra = results(result)
        for (op_id, fields), more in zip(ops, extra):
            self._emit(op, op_id, "ok", who, {**{k: v for k, v in fields.items() if k != "args"}, **more})
        return result

    def _who(self, handle: Handle) -> tuple[str, str | None]:
        client = self._client(handle)
        return client.name, client.conn

    # ------------------------------------------------------------ lifecycle
    def premium_namespace(self, partition_count: int) -> "RecordingTarget":
        return RecordingTarget(self.inner.premium_namespace(partition_count), self.recorder, partitions=partition_count)

    def basic_namespace(self) -> "RecordingTarget":
        return RecordingTarget(self.inner.basic_namespace(), self.recorder)

    # ----------------------------------------------------------- management
    def _created(self, kind: str, name: str, properties: Mapping[str, Any], call: Callable[[], str], entity: str, extra: Mapping[str, Any] | None = None) -> str:
        def oks(path: str) -> list[dict[str, Any]]:
            result: dict[str, Any] = {"path": path, "kind": kind, **(extra or {})}
            if "entity-management" in self.capabilities:
                try:
                    description = self.inner.describe_entity(path)
                except Exception:  # noqa: BLE001 - describing is a courtesy, never a failure of the run
                    description = None
                if description is not None:
                    result["description"] = description
                    partitioned = description.get("enable_partitioning")
                    if self.partitions is not None:
                        result["partitions"] = self.partitions
                    elif partitioned:
                        from sbreference.partitioning import STANDARD_PARTITION_COUNT

                        result["partitions"] = STANDARD_PARTITION_COUNT
            elif self.partitions is not None:
                result["partitions"] = self.partitions
            if (result.get("partitions") or 0) > 1:
                self._partitioned.add(path)
            return [{"entity": path, "result": result}]

        # args: the EntityDescription fields the run gave, as they are (schema: "the entity
        # description"); what the entity became (defaults, a Premium namespace's rules) is the ok's result
        return self._call("create-entity", (ADMIN, None), {"entity": entity, "args": dict(properties)}, call, oks)

    def create_queue(self, name: str, **properties: Any) -> str:
        return self._created("queue", name, properties, lambda: self.inner.create_queue(name, **properties), name)

    def create_queue_at(self, path: str, **properties: Any) -> str:
        return self._created("queue", path, properties, lambda: self.inner.create_queue_at(path, **properties), path)

    def create_topic(self, name: str, **properties: Any) -> str:
        return self._created("topic", name, properties, lambda: self.inner.create_topic(name, **properties), name)

    def create_subscription(self, topic_path: str, name: str, **properties: Any) -> str:
        return self._created(
            "subscription", name, properties, lambda: self.inner.create_subscription(topic_path, name, **properties),
            f"{topic_path}/Subscriptions/{name}", {"topic": topic_path},
        )

    def delete_entity(self, path: str) -> None:
        self._call("delete-entity", (ADMIN, None), {"entity": path}, lambda: self.inner.delete_entity(path))

    def entity_counts(self, path: str) -> dict[str, Any]:
        return self._call("entity-counts", (ADMIN, None), {"entity": path}, lambda: self.inner.entity_counts(path),
                          lambda counts: [{"entity": path, "result": counts}])

    def update_entity(self, path: str, **properties: Any) -> None:
        self._call("update-entity", (ADMIN, None), {"entity": path, "args": {"properties": properties}},
                   lambda: self.inner.update_entity(path, **properties))

    def describe_entity(self, path: str) -> dict[str, Any]:
        return self._call("describe-entity", (ADMIN, None), {"entity": path}, lambda: self.inner.describe_entity(path),
                          lambda description: [{"entity": path, "result": description}])

    # ---------------------------------------------------------------- rules
    def add_rule(self, subscription_path: str, rule: Any) -> None:
        args = {"name": rule.name, "filter": repr(rule.filter), "action": None if rule.action is None else rule.action.expression}
        self._call("add-rule", (ADMIN, None), {"entity": subscription_path, "args": args},
                   lambda: self.inner.add_rule(subscription_path, rule))

    def remove_rule(self, subscription_path: str, name: str) -> None:
        self._call("remove-rule", (ADMIN, None), {"entity": subscription_path, "args": {"name": name}},
                   lambda: self.inner.remove_rule(subscription_path, name))

    def list_rules(self, subscription_path: str) -> list[Any]:
        return self._call("list-rules", (ADMIN, None), {"entity": subscription_path}, lambda: self.inner.list_rules(subscription_path),
                          lambda rules: [{"entity": subscription_path, "result": {"rules": [repr(r) for r in rules]}}])

    # --------------------------------------------------------------- faults
    def make_unavailable(self, path: str, code: str = "entity-unavailable", transient: bool | None = None) -> None:
        self._call("entity-down", (ADMIN, None), {"entity": path, "args": {"code": str(code), "transient": transient}},
                   lambda: self.inner.make_unavailable(path, code, transient))

    def make_available(self, path: str) -> None:
        self._call("entity-up", (ADMIN, None), {"entity": path}, lambda: self.inner.make_available(path))

    def make_partition_unavailable(self, path: str, partition: int) -> None:
        self._call("partition-down", (ADMIN, None), {"entity": path, "partition": partition},
                   lambda: self.inner.make_partition_unavailable(path, partition))

    def make_partition_available(self, path: str, partition: int) -> None:
        self._call("partition-up", (ADMIN, None), {"entity": path, "partition": partition},
                   lambda: self.inner.make_partition_available(path, partition))

    # -------------------------------------------------------------- clients
    def _attach(self, kind: str, path: str, mode: str | None, call: Callable[[], Handle]) -> Handle:
        name = self.recorder.new_client()
        who = (name, f"{name}.1")
        args = {"kind": kind, "mode": mode}
        handle = self._call("attach", who, {"entity": path, "args": args}, call, lambda h: [{"entity": h.path}])
        self._bind(handle, name)
        return handle

    def sender(self, path: str) -> Handle:
        return self._attach("sender", path, None, lambda: self.inner.sender(path))

    def receiver(self, path: str, mode: str = PEEK_LOCK) -> Handle:
        return self._attach("receiver", path, mode, lambda: self.inner.receiver(path, mode))

    def accept_session(self, path: str, session_id: str | None = None, mode: str = PEEK_LOCK, max_wait: int | None = None) -> Handle:
        name = self.recorder.new_client()
        who = (name, f"{name}.1")
        fields = {"entity": path, "session": session_id, "args": {"session": session_id, "mode": mode, "max_wait": max_wait}}
        handle = self._call(
            "accept-session", who, fields, lambda: self.inner.accept_session(path, session_id, mode, max_wait),
            lambda h: [{"entity": h.path, "session": h.session_id, "result": {"locked_until": getattr(h, "locked_until", None)}}],
        )
        self._bind(handle, name)
        return handle

    def close_handle(self, handle: Handle) -> None:
        self._call("close", self._who(handle), {"entity": handle.path, "session": handle.session_id},
                   lambda: self.inner.close_handle(handle))

    def drop_connection(self, handle: Handle) -> None:
        client = self._client(handle)

        def oks(_: Any) -> list[dict[str, Any]]:
            client.connections += 1
            return [{"entity": handle.path, "result": {"conn": client.conn}}]

        self._call("drop-connection", (client.name, client.conn), {"entity": handle.path}, lambda: self.inner.drop_connection(handle), oks)

    # ------------------------------------------------------------ messaging
    def _send_fields(self, sender: Handle, message: Message, **args: Any) -> dict[str, Any]:
        return {
            "entity": sender.path,
            "message_id": message.message_id,
            "session": message.session_id,
            "partition_key": message.partition_key,
            "args": {**message_args(message), **args},
        }

    def _seqs(self, result: Any, count: int, path: str | None = None) -> list[dict[str, Any]]:
        """The ok fields of ``count`` sends from what the call returned: ``seq``, and on a
        partitioned entity the partition it names (its top bits, as on Service Bus)."""
        from sbreference.partitioning import partition_of

        seqs = list(result) if isinstance(result, (list, tuple)) and len(result) == count else [None] * count
        out = []
        for s in seqs:
            seq = s if isinstance(s, int) and not isinstance(s, bool) else None
            fields: dict[str, Any] = {"seq": seq}
            if seq is not None and path in self._partitioned:
                fields["partition"] = partition_of(seq)
            out.append(fields)
        return out

    def send(self, sender: Handle, messages: Sequence[Message], batch: bool = False) -> list[int | None]:
        who = self._who(sender)
        messages = list(messages)
        if batch:
            each = [self._send_fields(sender, m) for m in messages]
            result = self._group("send", who, each, lambda: self.inner.send(sender, messages, batch=True),
                                 lambda r: self._seqs(r, len(messages), sender.path))
            return list(result) if isinstance(result, (list, tuple)) else [None] * len(messages)
        out: list[int | None] = []
        for message in messages:  # one by one, each its own transfer: each its own operation
            result = self._call("send", who, self._send_fields(sender, message),
                                lambda m=message: self.inner.send(sender, [m]),
                                lambda r, m=message: [{"message_id": m.message_id, "session": m.session_id,
                                                       "partition_key": m.partition_key, **self._seqs(r, 1, sender.path)[0]}])
            out.extend(result if isinstance(result, (list, tuple)) and len(result) == 1 else [None])
        return out

    def send_concurrently(self, sender: Handle, messages: Sequence[Message]) -> None:
        who = self._who(sender)
        messages = list(messages)
        each = [self._send_fields(sender, m, concurrent=True) for m in messages]
        return self._group("send", who, each, lambda: self.inner.send_concurrently(sender, messages),
                           lambda r: self._seqs(r, len(messages), sender.path), group_key="concurrent_group", unknown=True)

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        who = self._who(sender)
        for message in messages:
            op_id = self.recorder.new_op()
            fields = self._send_fields(sender, message, presettled=True)
            self._emit("send", op_id, "invoke", who, fields)
            try:
                self.inner.send_presettled(sender, [message])
            except BaseException as error:
                if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                    raise
                self._outcome([(op_id, fields)], "send", who, error)
                raise
            # the sender learns nothing of a pre-settled transfer: unknown outcome
            self._emit("send", op_id, "info", who, {k: v for k, v in fields.items() if k != "args"})

    def send_transaction(self, sends: Sequence[tuple[Handle, Sequence[Message]]]) -> None:
        each = []
        for handle, messages in sends:
            for message in messages:
                each.append({**self._send_fields(handle, message, transaction=True), "_who": self._who(handle)})
        who_of = [f.get("_who") for f in each]
        count = len(each)
        op_ids: list[int] = []
        first = None
        for fields, who in zip(each, who_of):
            fields.pop("_who")
            op_id = self.recorder.new_op()
            first = op_id if first is None else first
            fields["args"]["transaction"] = first
            op_ids.append(op_id)
            self._emit("send", op_id, "invoke", who, fields)
        try:
            result = self.inner.send_transaction(sends)
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            for op_id, fields, who in zip(op_ids, each, who_of):
                self._outcome([(op_id, fields)], "send", who, error)
            raise
        flat = [s for part in result for s in part] if isinstance(result, (list, tuple)) else None
        flat = flat if flat is not None and len(flat) == count else [None] * count
        seqs = [self._seqs([s], 1, fields["entity"])[0] for s, fields in zip(flat, each)]
        for op_id, fields, who, seq in zip(op_ids, each, who_of, seqs):
            self._emit("send", op_id, "ok", who, {**{k: v for k, v in fields.items() if k != "args"}, **seq})
        return result

    def transaction_client(self) -> "RecordingTransactionalClient":
        return RecordingTransactionalClient(self, self.inner.transaction_client())

    def schedule(self, sender: Handle, messages: Sequence[Message], enqueue_time: int) -> list[int]:
        who = self._who(sender)
        messages = list(messages)
        each = [self._send_fields(sender, m, enqueue_time=enqueue_time) for m in messages]
        return self._group("schedule", who, each, lambda: self.inner.schedule(sender, messages, enqueue_time),
                           lambda r: self._seqs(r, len(messages), sender.path))

    def cancel_scheduled(self, sender: Handle, sequence_numbers: Sequence[int]) -> None:
        who = self._who(sender)
        seqs = list(sequence_numbers)
        each = [{"entity": sender.path, "seq": s} for s in seqs]
        return self._group("cancel-scheduled", who, each, lambda: self.inner.cancel_scheduled(sender, seqs),
                           lambda r: [{} for _ in seqs])

    def _deliveries(self, found: Sequence[Received]) -> list[dict[str, Any]]:
        if not found:
            return [{"result": {"count": 0}}]
        return [received_fields(m) for m in found]

    def receive(self, receiver: Handle, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        args = {"mode": receiver.mode, "max_count": max_count, "max_wait": max_wait}
        return self._call("receive", self._who(receiver), {"entity": receiver.path, "session": receiver.session_id, "args": args},
                          lambda: self.inner.receive(receiver, max_count, max_wait), self._deliveries)

    def receive_deferred(self, receiver: Handle, sequence_numbers: Sequence[int]) -> list[Received]:
        seqs = list(sequence_numbers)
        args = {"mode": receiver.mode, "seqs": seqs}
        return self._call("receive-deferred", self._who(receiver), {"entity": receiver.path, "session": receiver.session_id, "args": args},
                          lambda: self.inner.receive_deferred(receiver, seqs), self._deliveries)

    def peek(self, receiver: Handle, max_count: int = 1, from_sequence_number: int = 1) -> list[Received]:
        args = {"max_count": max_count, "from_seq": from_sequence_number}

        def oks(found: Sequence[Received]) -> list[dict[str, Any]]:
            out = self._deliveries(found)
            for fields in out:  # a peek takes no lock (whatever token the target shows of a locked message)
                fields["lock"] = None
            return out

        return self._call("peek", self._who(receiver), {"entity": receiver.path, "session": receiver.session_id, "args": args},
                          lambda: self.inner.peek(receiver, max_count, from_sequence_number), oks)

    def _settle(self, op: str, receiver: Handle, message: Received, call: Callable[[], Any], args: Mapping[str, Any] | None = None,
                oks: Callable[[Any], Iterable[Mapping[str, Any]]] | None = None) -> Any:
        fields = {"entity": receiver.path, **settled_fields(message)}
        if args:
            fields["args"] = dict(args)
        if oks is None:
            oks = lambda _: [{k: v for k, v in fields.items() if k != "args"}]  # noqa: E731
        return self._call(op, self._who(receiver), fields, call, oks)

    def complete(self, receiver: Handle, message: Received) -> None:
        self._settle("complete", receiver, message, lambda: self.inner.complete(receiver, message))

    def abandon(self, receiver: Handle, message: Received, properties: dict | None = None) -> None:
        self._settle("abandon", receiver, message, lambda: self.inner.abandon(receiver, message, **_props(properties)),
                     _props(properties))

    def defer(self, receiver: Handle, message: Received, properties: dict | None = None) -> None:
        self._settle("defer", receiver, message, lambda: self.inner.defer(receiver, message, **_props(properties)),
                     _props(properties))

    def dead_letter(self, receiver: Handle, message: Received, reason: str | None = None, description: str | None = None,
                    properties: dict | None = None) -> None:
        self._settle("dead-letter", receiver, message,
                     lambda: self.inner.dead_letter(receiver, message, reason, description, **_props(properties)),
                     {"reason": reason, "description": description, **_props(properties)})

    def renew_lock(self, receiver: Handle, message: Received) -> int:
        fields = settled_fields(message)
        return self._settle("renew-lock", receiver, message, lambda: self.inner.renew_lock(receiver, message),
                            oks=lambda until: [{**fields, "result": {"locked_until": until}}])

    # ------------------------------------------------------------- sessions
    def renew_session_lock(self, receiver: Handle) -> int:
        return self._call("renew-session-lock", self._who(receiver), {"entity": receiver.path, "session": receiver.session_id},
                          lambda: self.inner.renew_session_lock(receiver),
                          lambda until: [{"result": {"locked_until": until}}])

    def get_session_state(self, receiver: Handle) -> bytes | None:
        return self._call("get-session-state", self._who(receiver), {"entity": receiver.path, "session": receiver.session_id},
                          lambda: self.inner.get_session_state(receiver),
                          lambda state: [{"result": {"state": state}}])

    def set_session_state(self, receiver: Handle, state: bytes | None) -> None:
        self._call("set-session-state", self._who(receiver),
                   {"entity": receiver.path, "session": receiver.session_id, "args": {"state": state}},
                   lambda: self.inner.set_session_state(receiver, state))

    # ----------------------------------------------------------------- time
    def wait(self, duration: int) -> None:
        self._call("wait", (ADMIN, None), {"args": {"ms": duration}}, lambda: self.inner.wait(duration))


__all__ = ["ADMIN", "RecordingTarget", "RecordingTransactionalClient", "TestTrace", "TraceRecorder", "trace_file_name"]
