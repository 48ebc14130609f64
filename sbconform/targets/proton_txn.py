"""A transactional AMQP 1.0 client (python-qpid-proton's engine over a socket), for what no Python
SDK offers: Service Bus transactions, as the .NET and Java SDKs use them over AMQP.

One connection: CBS put-token per entity, a coordinator link for declare / discharge, senders
(optionally "via" a transfer entity) whose transfers carry ``transactional-state``, and peek-lock
receivers whose dispositions carry it. Every call is synchronous: it does its work, then pumps the
socket until the answer arrives or ``timeout`` passes. The wire facts are those of
sbconform/server/coordinator.py (and sbspec/wire.md).
"""

from __future__ import annotations

import selectors
import socket
import ssl
import time
import uuid
from typing import Any, Callable, Sequence

from cproton import bytes2pybytes
from cproton_ffi import lib as _lib
from proton import Collector, Connection, Data, Delivery, Described, Link, Message as AmqpMessage, Terminus, Transport, symbol, ulong

from sbreference import ErrorCode, Message, ServiceBusError

from ..server.coordinator import (
    ACCEPTED,
    DECLARE,
    DECLARED,
    DISCHARGE,
    LOCAL_TRANSACTIONS,
    MODIFIED,
    REJECTED,
    TRANSACTIONAL_STATE,
    TRANSFER_DESTINATION,
)
from ..amqp.sas import make_token
from .base import Received, TransactionalClient

X_SEQ = symbol("x-opt-sequence-number")


class ProtonTransactionalClient(TransactionalClient):
    def __init__(self, host: str, port: int, key_name: str, key: str, tls: bool = False, timeout: float = 30.0,
                 condition_code: Callable[[str], ErrorCode] | None = None) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.key_name, self.key = key_name, key
        self.timeout = timeout
        self.condition_code = condition_code or (lambda c: ErrorCode.INVALID_OPERATION)
        self._connect()

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        if self.tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        sock.setblocking(False)
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)
        self.transport = Transport()
        sasl = self.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self.connection.hostname = self.host
        self.connection.container = f"sbconform-txn-{uuid.uuid4()}"
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()
        self.audiences: set[str] = set()
        self.senders: dict[tuple[str, str | None], Link] = {}
        self.receivers: dict[str, Link] = {}
        self.deliveries: dict[Any, Delivery] = {}  # lock token -> the delivery to settle
        self.coordinator: Link | None = None
        self.senders_mgmt: dict[str, tuple[Link, Link]] = {}
        self.cbs_sender: Link | None = None
        self.cbs_receiver: Link | None = None
        self.reply_to = f"sbconform-txn-{uuid.uuid4()}"
        self.tags = 0

    def _tag(self) -> bytes:
        self.tags += 1
        return self.tags.to_bytes(8, "big")

    def _pump(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            self._write()
            while self.collector.peek() is not None:
                self.collector.pop()
            if done():
                return
            if self.transport.closed or self.connection.remote_condition is not None:
                cond = self.connection.remote_condition
                raise ServiceBusError(ErrorCode.CONNECTION_LOST, f"{what}: the connection closed ({cond.name if cond else 'no condition'})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServiceBusError(ErrorCode.TIMEOUT, f"{what}: no answer within {self.timeout} s")
            for _ in self.selector.select(min(left, 0.2)):
                try:
                    data = self.sock.recv(1 << 16)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.transport.close_tail()
                else:
                    self.transport.push(data)

    def _write(self) -> None:
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                return
            out = self.transport.peek(pending)
            try:
                sent = self.sock.send(out)
            except (BlockingIOError, ssl.SSLWantWriteError):
                return
            except OSError:
                self.transport.close_head()
                return
            self.transport.pop(sent)

    def _error(self, condition: Any, what: str) -> ServiceBusError:
        name = str(condition.name) if condition is not None else "amqp:internal-error"
        text = str(condition.description) if condition is not None and condition.description else what
        return ServiceBusError(self.condition_code(name), text, transient=False)

    def _open_link(self, link: Link, what: str) -> Link:
        link.open()
        self._pump(lambda: link.state & Link.REMOTE_ACTIVE or link.state & Link.REMOTE_CLOSED, what)
        if link.state & Link.REMOTE_CLOSED or link.remote_condition is not None:
            raise self._error(link.remote_condition, f"{what} was refused")
        return link

    # ------------------------------------------------------------------------- CBS
    def _authorize(self, path: str) -> None:
        if path.lower() in self.audiences:
            return
        if self.cbs_sender is None:
            sender = self.session.sender("cbs-sender")
            sender.target.address = "$cbs"
            receiver = self.session.receiver("cbs-receiver")
            receiver.source.address = "$cbs"
            receiver.target.address = self.reply_to
            self.cbs_sender = self._open_link(sender, "the $cbs link")
            self.cbs_receiver = self._open_link(receiver, "the $cbs reply link")
            receiver.flow(10)
        audience = f"sb://{self.host}/{path}"
        request = AmqpMessage(
            id=str(uuid.uuid4()), reply_to=self.reply_to, body=make_token(audience, self.key_name, self.key),
            properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience},
        )
        dlv = self.cbs_sender.delivery(self._tag())
        self.cbs_sender.send(request.encode())
        self.cbs_sender.advance()
        receiver = self.cbs_receiver
        self._pump(lambda: receiver.current is not None and receiver.current.readable and not receiver.current.partial, "put-token")
        current = receiver.current
        answer = AmqpMessage()
        answer.decode(receiver.recv(current.pending))
        receiver.advance()
        current.update(Delivery.ACCEPTED)
        current.settle()
        receiver.flow(1)
        status = int((answer.properties or {}).get("status-code", 500))
        if not 200 <= status < 300:
            raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"CBS put-token for {audience} answered {status}")
        self.audiences.add(path.lower())

    # ------------------------------------------------------------------ transactions
    def _control(self, body: Described, what: str) -> Delivery:
        if self.coordinator is None:
            if not self.audiences:  # the coordinator is no entity: any token of the connection will do
                self._authorize("")
            link = self.session.sender("coordinator")
            link.target.type = Terminus.COORDINATOR
            link.target.capabilities.put_array(False, Data.SYMBOL)
            link.target.capabilities.enter()
            link.target.capabilities.put_symbol(LOCAL_TRANSACTIONS)
            link.target.capabilities.exit()
            self.coordinator = self._open_link(link, "the coordinator link")
        link = self.coordinator
        self._pump(lambda: link.credit > 0, f"{what}: coordinator credit")
        dlv = link.delivery(self._tag())
        link.send(AmqpMessage(body=body).encode())
        link.advance()
        self._pump(lambda: dlv.remote_state != 0 or dlv.settled, what)
        if dlv.remote_state == REJECTED or dlv.remote_state == Delivery.REJECTED:
            raise self._error(dlv.remote.condition, f"{what} was rejected")
        return dlv

    def declare(self) -> bytes:
        dlv = self._control(Described(ulong(DECLARE), []), "declare")
        if dlv.remote_state != DECLARED or not dlv.remote.data:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"declare answered state {dlv.remote_state}, not declared")
        dlv.settle()
        return bytes(dlv.remote.data[0])

    def discharge(self, txn: Any, commit: bool) -> None:
        dlv = self._control(Described(ulong(DISCHARGE), [txn, not commit]), "commit" if commit else "rollback")
        dlv.settle()

    # ------------------------------------------------------------------------- work
    def send(self, txn: Any, path: str, messages: Sequence[Message], via: str | None = None) -> None:
        key = (path, via)
        if key not in self.senders:
            self._authorize(path)
            link = self.session.sender(f"sender-{len(self.senders)}")
            if via is not None:
                self._authorize(via)
                link.target.address = via
                link.properties = {TRANSFER_DESTINATION: path}
            else:
                link.target.address = path
            self.senders[key] = self._open_link(link, f"a sender to {path}")
        link = self.senders[key]
        for message in messages:
            self._pump(lambda: link.credit > 0, f"send to {path}: credit")
            dlv = link.delivery(self._tag())
            dlv.local.data = [txn]
            dlv.update(TRANSACTIONAL_STATE)
            link.send(amqp_message(message).encode())
            link.advance()
            self._pump(lambda: dlv.remote_state != 0 or dlv.settled, f"send to {path}")
            self._check_outcome(dlv, f"send to {path}")
            dlv.settle()

    def receive(self, path: str, max_count: int = 1, max_wait: int | None = None) -> list[Received]:
        if path not in self.receivers:
            self._authorize(path)
            link = self.session.receiver(f"receiver-{len(self.receivers)}")
            link.source.address = path
            link.target.address = f"{self.reply_to}-{len(self.receivers)}"
            link.snd_settle_mode = Link.SND_UNSETTLED
            link.rcv_settle_mode = Link.RCV_SECOND
            self.receivers[path] = self._open_link(link, f"a receiver on {path}")
        link = self.receivers[path]
        got: list[Received] = []
        link.flow(max_count)
        wait_until = time.monotonic() + (1.0 if max_wait is None else max_wait / 1000)

        def arrived() -> bool:
            while link.current is not None and link.current.readable and not link.current.partial:
                dlv = link.current
                data = link.recv(dlv.pending)
                link.advance()
                got.append(self._received(dlv, data))
            return len(got) >= max_count or time.monotonic() >= wait_until

        saved, self.timeout = self.timeout, max(self.timeout, (wait_until - time.monotonic()) + 1)
        try:
            self._pump(arrived, f"receive from {path}")
            if len(got) < max_count:  # take back the credit left over (so later messages stay in the broker)
                link.drain(0)
                self._pump(lambda: link.credit <= 0 or arrived() and link.credit <= 0, f"drain {path}")
                arrived()
        finally:
            self.timeout = saved
        return got

    def _received(self, dlv: Delivery, data: bytes) -> Received:
        m = AmqpMessage()
        m.decode(data)
        tag = bytes2pybytes(_lib.pn_delivery_tag(dlv._impl))  # proton's Python API gives the tag as text
        token = uuid.UUID(bytes_le=tag) if len(tag) == 16 else tag
        self.deliveries[token] = dlv
        annotations = {str(k): v for k, v in (m.annotations or {}).items()}
        body = m.body
        if isinstance(body, memoryview):
            body = bytes(body)
        elif isinstance(body, str):
            body = body.encode()
        return Received(
            message_id=None if m.id is None else str(m.id),
            body=body if isinstance(body, bytes) else b"",
            sequence_number=int(annotations.get("x-opt-sequence-number", 0)),
            enqueued_time=None,
            delivery_count=m.delivery_count + 1,
            lock_token=token,
            session_id=m.group_id,
            application_properties=dict(m.properties or {}),
            raw=dlv,
        )

    def settle(self, txn: Any, path: str, message: Received, outcome: str, reason: str | None = None, description: str | None = None) -> None:
        dlv = self.deliveries.get(message.lock_token)
        if dlv is None:
            raise ServiceBusError(ErrorCode.MESSAGE_LOCK_LOST, f"this client holds no delivery with lock token {message.lock_token}")
        if outcome == "complete":
            state = Described(ulong(ACCEPTED), [])
        elif outcome == "abandon":
            state = Described(ulong(MODIFIED), [True, False, None])
        elif outcome == "defer":
            state = Described(ulong(MODIFIED), [True, True, None])
        elif outcome == "dead_letter":
            info = {symbol("DeadLetterReason"): reason, symbol("DeadLetterErrorDescription"): description}
            error = Described(ulong(0x1D), [symbol("com.microsoft:dead-letter"), description, {k: v for k, v in info.items() if v is not None}])
            state = Described(ulong(REJECTED), [error])
        else:
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown settlement {outcome!r}")
        dlv.local.data = [txn, state]
        dlv.update(TRANSACTIONAL_STATE)
        self._pump(lambda: dlv.settled or dlv.remote_state in (TRANSACTIONAL_STATE, Delivery.REJECTED), f"{outcome} in a transaction")
        self._check_outcome(dlv, f"{outcome} in a transaction")
        dlv.settle()
        self.deliveries.pop(message.lock_token, None)

    def _check_outcome(self, dlv: Delivery, what: str) -> None:
        if dlv.remote_state == Delivery.REJECTED:
            raise self._error(dlv.remote.condition, f"{what} was rejected")
        if dlv.remote_state == TRANSACTIONAL_STATE:
            data = list(dlv.remote.data or [])
            outcome = data[1] if len(data) > 1 else None
            if isinstance(outcome, Described) and int(outcome.descriptor) == REJECTED:
                fields = list(outcome.value or [])
                err = fields[0] if fields else None
                if isinstance(err, Described) and err.value:
                    raise ServiceBusError(self.condition_code(str(err.value[0])), str(err.value[1] if len(err.value) > 1 else what), transient=False)
                raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"{what} was rejected", transient=False)

    def management(self, path: str, operation: str, body: dict, txn: Any = None) -> dict:
        """A request to ``path``'s ``$management`` node (the request-response operations), inside
        the transaction ``txn`` if given (its transfer carries transactional-state). Returns the
        reply's application properties and body; a status other than 2xx raises."""
        node = f"{path}/$management"
        if node not in self.senders_mgmt:
            self._authorize(path)
            sender = self.session.sender(f"mgmt-sender-{len(self.senders_mgmt)}")
            sender.target.address = node
            receiver = self.session.receiver(f"mgmt-receiver-{len(self.senders_mgmt)}")
            receiver.source.address = node
            receiver.target.address = f"{self.reply_to}-mgmt-{len(self.senders_mgmt)}"
            self.senders_mgmt[node] = (self._open_link(sender, f"{node} sender"), self._open_link(receiver, f"{node} receiver"))
            receiver.flow(10)
        sender, receiver = self.senders_mgmt[node]
        request = AmqpMessage(id=str(uuid.uuid4()), reply_to=receiver.target.address, body=body,
                              properties={"operation": operation})
        self._pump(lambda: sender.credit > 0, f"{operation}: credit")
        dlv = sender.delivery(self._tag())
        if txn is not None:
            dlv.local.data = [txn]
            dlv.update(TRANSACTIONAL_STATE)
        sender.send(request.encode())
        sender.advance()
        self._pump(lambda: receiver.current is not None and receiver.current.readable and not receiver.current.partial, operation)
        current = receiver.current
        answer = AmqpMessage()
        answer.decode(receiver.recv(current.pending))
        receiver.advance()
        current.update(Delivery.ACCEPTED)
        current.settle()
        receiver.flow(1)
        props = answer.properties or {}
        status = int(props.get("statusCode", props.get("status-code", 500)))
        if not 200 <= status < 300:
            raise ServiceBusError(self.condition_code(str(props.get("errorCondition", ""))),
                                  str(props.get("statusDescription", operation)), transient=False)
        return {"properties": props, "body": answer.body}

    # ------------------------------------------------------------------------ ends
    def drop(self) -> None:
        """Abruptly: the socket goes without an AMQP close; the next call reconnects."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.selector.close()
        self._connect()

    def close(self) -> None:
        try:
            self.connection.close()
            self._pump(lambda: self.connection.state & Connection.REMOTE_CLOSED, "close")
        except ServiceBusError:
            pass
        finally:
            try:
                self.sock.close()
            except OSError:
                pass
            self.selector.close()


def amqp_message(message: Message) -> AmqpMessage:
    """A model message as the AMQP message a Service Bus client sends (data body, group-id, ...)."""
    body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
    out = AmqpMessage(body=body, inferred=True)
    out.id = message.message_id
    out.group_id = message.session_id
    out.content_type = message.content_type
    out.correlation_id = message.correlation_id
    out.subject = message.subject
    out.address = message.to
    out.reply_to = message.reply_to
    if message.time_to_live:
        out.ttl = message.time_to_live / 1000
    if message.partition_key is not None:
        out.annotations = {symbol("x-opt-partition-key"): message.partition_key}
    if message.application_properties:
        out.properties = dict(message.application_properties)
    return out
