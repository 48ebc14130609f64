"""Plain AMQP 1.0 clients (python-qpid-proton, blocking) for what the SDK cannot express:
the ``$sbconform`` control node of ``sbconform serve`` and pre-settled sends (moved
verbatim from ``targets/sdk.py``, which still exports these names)."""

from __future__ import annotations

import threading
from typing import Any, Sequence

from sbreference import ErrorCode, ServiceBusError


def _code_of_condition(condition: str) -> ErrorCode:
    from .sdk import _code_of_condition as code_of  # the SDK target's condition table (one table)

    return code_of(condition)


# ------------------------------------------------------------ control client
class ControlClient:
    """Requests to the ``$sbconform`` node of ``sbconform serve`` (proton, blocking)."""

    def __init__(self, host: str, port: int, key_name: str, key: str) -> None:
        from proton.utils import BlockingConnection, SyncRequestResponse

        from ..amqp.sas import make_token

        self._token = make_token("sb://sbconform/$sbconform", key_name, key)
        self._connection = BlockingConnection(f"amqp://{host}:{port}", allowed_mechs="ANONYMOUS", timeout=30)
        self._client = SyncRequestResponse(self._connection, "$sbconform")
        self._lock = threading.Lock()

    def call(self, operation: str, **body: Any) -> Any:
        from proton import Message as AmqpMessage

        request = AmqpMessage(body=body, properties={"operation": operation, "authorization": self._token})
        with self._lock:
            response = self._client.call(request)
        props = response.properties or {}
        status = int(props.get("statusCode", 500))
        if status not in (200, 204):
            code = _code_of_condition(str(props.get("errorCondition", "")))
            raise ServiceBusError(code, str(props.get("statusDescription", "control request failed")))
        return response.body

    def close(self) -> None:
        try:
            self._connection.close()
        except Exception:
            pass


class LowLevelClient:
    """A plain AMQP 1.0 client (python-qpid-proton, blocking) for what the SDK cannot express."""

    def __init__(self, host: str, port: int, tls: bool, key_name: str, key: str) -> None:
        from proton import SSLDomain
        from proton.utils import BlockingConnection, SyncRequestResponse

        self.host, self.key_name, self.key = host, key_name, key
        url = f"{'amqps' if tls else 'amqp'}://{host}:{port}"
        self._connection = BlockingConnection(
            url, allowed_mechs="ANONYMOUS", timeout=30, ssl_domain=SSLDomain(SSLDomain.MODE_CLIENT) if tls else None,
        )
        self._cbs = SyncRequestResponse(self._connection, "$cbs")
        self._senders: dict[str, Any] = {}

    def _put_token(self, path: str) -> None:
        from proton import Message as AmqpMessage

        from ..amqp.sas import make_token

        audience = f"sb://{self.host}/{path}"
        request = AmqpMessage(
            body=make_token(audience, self.key_name, self.key),
            properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience},
        )
        status = int((self._cbs.call(request).properties or {}).get("status-code", 500))
        if not 200 <= status < 300:
            raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"CBS put-token for {audience} answered {status}")

    def send_presettled(self, path: str, messages: Sequence[Any]) -> None:
        from proton.reactor import AtMostOnce

        if path not in self._senders:
            self._put_token(path)
            self._senders[path] = self._connection.create_sender(path, options=AtMostOnce())
        for message in messages:
            self._senders[path].send(_proton_message(message))
        # A fence: the broker answers requests of one connection after the transfers before
        # them, so once this answer is in, the pre-settled transfers have been taken in.
        self._put_token(path)

    def close(self) -> None:
        try:
            self._connection.close()
        except Exception:
            pass


def _proton_message(message: Any) -> Any:
    """A ``ServiceBusMessage`` as proton's Message: the bytes the SDK itself would put on the
    wire (its own encoder), decoded by proton, so every section and AMQP type is the SDK's."""
    from azure.servicebus._pyamqp._encode import encode_payload
    from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
    from proton import Message as AmqpMessage

    encoded = encode_payload(bytearray(), PyamqpTransport.to_outgoing_amqp_message(message.raw_amqp_message))
    out = AmqpMessage()
    out.decode(bytes(encoded))
    return out
