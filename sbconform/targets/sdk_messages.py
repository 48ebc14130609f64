"""The SDK target's messages: a ``sbreference.Message`` as the SDK's, the SDK's received message
as a ``Received``, and the sends the SDK has no API for (transactions, pre-settled transfers),
made with python-qpid-proton on the same endpoint (split out of ``sdk.py``, behaviour unchanged)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Sequence

from sbreference import Message, ServiceBusError

from .base import PEEK_LOCK, Handle, Received, TransactionalClient
from .proton_client import LowLevelClient
from .sdk_support import _EPOCH, _code_of_condition, _ms, parse_connection_string


class MessagesMixin:
    """Needs ``t0_epoch_ms``, ``connection_string``, ``host``, ``port``, ``_low_level`` and ``_call``."""

    t0_epoch_ms: int
    connection_string: str | None
    host: str
    port: int
    _low_level: Any

    def _sdk_message(self, message: Message):
        """The SDK's message. The SDK checks some rules itself while building it (a partition
        key that differs from the session id is a ValueError, PART-KEY-003): callers build it
        inside ``_call`` so such a refusal is an invalid-operation error like the broker's."""
        from azure.servicebus import ServiceBusMessage

        kwargs: dict[str, Any] = {}
        if message.time_to_live is not None:
            kwargs["time_to_live"] = dt.timedelta(milliseconds=message.time_to_live)
        if message.scheduled_enqueue_time is not None:
            kwargs["scheduled_enqueue_time_utc"] = self._datetime(message.scheduled_enqueue_time)
        built = ServiceBusMessage(
            message.body,
            message_id=message.message_id,
            session_id=message.session_id,
            partition_key=message.partition_key,
            content_type=message.content_type,
            correlation_id=message.correlation_id,
            subject=message.subject,
            to=message.to,
            reply_to=message.reply_to,
            reply_to_session_id=message.reply_to_session_id,
            application_properties=dict(message.application_properties) or None,
            **kwargs,
        )
        if message.message_id is None:
            # the SDK gave it a GUID MessageId (its constructor does, for every message): send
            # what the scenario sends, a message without one (PART-KEY-009, PART-DISC-009)
            built.message_id = None
        return built

    def _datetime(self, ms: int) -> dt.datetime:
        return _EPOCH + dt.timedelta(milliseconds=self.t0_epoch_ms + ms)

    def _local(self, value: dt.datetime | None) -> int | None:
        ms = _ms(value)
        return None if ms is None else ms - self.t0_epoch_ms

    def transaction_client(self) -> TransactionalClient:
        """Transactions (TXN-*, PART-TXN-*): the Python SDK has none, so they go through a
        python-qpid-proton client on a connection of its own (coordinator link, transactional
        transfers and dispositions), authorised with the connection string's key, as the .NET and
        Java SDKs do it."""
        from .proton_txn import ProtonTransactionalClient

        parts = parse_connection_string(self.connection_string or "")
        emulator = parts.get("usedevelopmentemulator", "").lower() == "true"
        return ProtonTransactionalClient(
            "127.0.0.1" if self.host == "localhost" else self.host, self.port if emulator else 5671,
            parts.get("sharedaccesskeyname", ""), parts.get("sharedaccesskey", ""), tls=not emulator,
            condition_code=_code_of_condition,
        )

    def send_transaction(self, sends: Sequence[tuple[Handle, Sequence[Message]]]) -> list[list[int | None]]:
        client = self.transaction_client()
        try:
            txn = client.declare()
            try:
                for handle, messages in sends:
                    client.send(txn, handle.path, list(messages))
            except ServiceBusError:
                client.discharge(txn, commit=False)
                raise
            client.discharge(txn, commit=True)
        finally:
            client.close()
        return [[None] * len(messages) for _, messages in sends]

    def _modify(self, receiver: Handle, message: Received, status: str, properties: dict,
                reason: str | None = None, description: str | None = None) -> None:
        """SETTLE-MOD-001: the Python SDK settles with no properties to modify, so these go as the
        entity's update-disposition request (``properties-to-modify``; the request-response
        operations of Service Bus's AMQP management) through the kit's proton client, by lock
        token (a lock belongs to the entity: SETTLE-LOCK-011)."""
        from proton import UNDESCRIBED, Array, Data

        body: dict = {"disposition-status": status, "lock-tokens": Array(UNDESCRIBED, Data.UUID, uuid.UUID(str(message.lock_token))),
                      "properties-to-modify": dict(properties)}
        if reason is not None:
            body["deadletter-reason"] = reason
        if description is not None:
            body["deadletter-description"] = description
        client = self.transaction_client()
        try:
            client.management(receiver.path, "com.microsoft:update-disposition", body)
        finally:
            client.close()

    def send_presettled(self, sender: Handle, messages: Sequence[Message]) -> None:
        """SETTLE-SEND-004 is about "a low-level AMQP client": the SDK has no pre-settled send, so
        these transfers go through python-qpid-proton to the same endpoint, on a link whose sender
        settle mode is ``settled``, authorised by a CBS put-token made with the connection
        string's key. Nothing comes back, as the clause says."""
        if self._low_level is None:
            parts = parse_connection_string(self.connection_string or "")
            emulator = parts.get("usedevelopmentemulator", "").lower() == "true"
            self._low_level = LowLevelClient(
                "127.0.0.1" if self.host == "localhost" else self.host, self.port if emulator else 5671, not emulator,
                parts.get("sharedaccesskeyname", ""), parts.get("sharedaccesskey", ""),
            )
        self._low_level.send_presettled(sender.path, self._call(lambda: [self._sdk_message(m) for m in messages]))

    def received(self, m: Any, mode: str = PEEK_LOCK) -> Received:
        body = m.body
        if not isinstance(body, (bytes, bytearray)):
            try:
                body = b"".join(bytes(part) for part in body)
            except TypeError:
                body = str(body).encode()
        state = getattr(m.state, "name", str(m.state)).lower() if getattr(m, "state", None) is not None else "active"
        ttl = m.time_to_live
        raw_count = m.delivery_count
        props = {(k.decode() if isinstance(k, bytes) else str(k)): _text_or_bytes(v) for k, v in (m.application_properties or {}).items()}
        locked = mode == PEEK_LOCK and state != "scheduled" and getattr(m, "_receiver", None) is not None
        token = m.lock_token if locked else None
        return Received(
            message_id=m.message_id,
            body=bytes(body),
            sequence_number=m.sequence_number,
            enqueued_time=self._local(m.enqueued_time_utc),
            delivery_count=(raw_count or 0) + 1,
            lock_token=token,
            locked_until=self._local(m.locked_until_utc) if token is not None else None,
            expires_at=self._local(m.expires_at_utc) if ttl is not None else None,
            session_id=m.session_id,
            partition_key=m.partition_key,
            state=state if state in ("deferred", "scheduled") else "active",
            dead_letter_reason=m.dead_letter_reason,
            dead_letter_description=m.dead_letter_error_description,
            dead_letter_source=m.dead_letter_source,
            content_type=m.content_type,
            time_to_live=None if ttl is None else round(ttl.total_seconds() * 1000),
            scheduled_enqueue_time=self._local(m.scheduled_enqueue_time_utc),
            application_properties=props,
            correlation_id=m.correlation_id,
            subject=m.subject,
            to=m.to,
            reply_to=m.reply_to,
            reply_to_session_id=m.reply_to_session_id,
            raw=m,
        )


def _text_or_bytes(value: Any) -> Any:
    """An application property value: pyamqp gives AMQP strings and binaries alike as bytes; text
    when it is UTF-8 (a string, as sent), else the bytes (a binary that is not text)."""
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value
