"""The management REST API of Service Bus (the ATOM feed ``ServiceBusAdministrationClient`` speaks),
served beside the AMQP listener, as Microsoft's emulator serves it on port 5300.

Routes (https://learn.microsoft.com/rest/api/servicebus/ "Service Bus REST API", and what
azure-servicebus 7.15's ``management/_generated/operations`` sends):

| method | path | what |
|---|---|---|
| GET | ``/$namespaceinfo`` | namespace properties (``NamespaceInfo``) |
| GET | ``/$Resources/Queues`` or ``/$Resources/Topics`` ``?$skip=&$top=`` | a feed, one page |
| GET | ``/{topic}/subscriptions?$skip=&$top=`` | a feed of subscriptions |
| GET | ``/{entity}``, ``/{topic}/subscriptions/{name}`` | one entry (description and runtime counts); an unknown entity is an empty feed with 200, as Service Bus answers |
| PUT | same | create (201); with ``If-Match: *`` update (200) |
| DELETE | same | 200; 404 if unknown |
| GET | ``/{topic}/subscriptions/{sub}/rules?$skip=&$top=`` | a feed of the subscription's rules |
| GET, PUT, DELETE | ``/{topic}/subscriptions/{sub}/rules/{rule}`` | one rule (``RuleDescription``); 404 if unknown, 409 on create if it exists |

Every request carries a shared access signature in ``Authorization``, checked as CBS checks
put-token (key, signature, expiry, audience covering the path). Errors are Service Bus's:
status code and ``<Error><Code>..</Code><Detail>..</Detail></Error>``.

The XML lives in ``atom.py`` (rules: ``atom_rules.py``); the model side in ``admin_api.py``. The
namespace model is single-threaded and belongs to the AMQP server's loop: each request runs its
model part there (``Server.call_soon``) and waits for the answer; only the XML is made on the HTTP
thread.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from sbreference import ErrorCode, ServiceBusError

from ..amqp.codec import status_of
from .admin_api import AdminApi
from .atom import HttpError, empty_feed, entry_xml, error_xml, feed_xml, namespace_xml, parse_description
from .atom_rules import parse_default_rule, parse_rule, rule_entry_xml, rule_feed_xml
from ..amqp.sas import TokenError, check_token

log = logging.getLogger("sbconform.serve")

#: largest request body accepted (an entity description is a few kilobytes)
MAX_BODY = 256 * 1024
#: connections served at once (each has a thread)
MAX_CLIENTS = 64
#: how long a request waits for the model's answer
CALL_TIMEOUT = 30.0
#: how long a request (its line, headers and body; on a kept-alive connection, from the end of the
#: last answer) may take to arrive in all: a client sending a byte now and then, each within the
#: read timeout, held its thread for as long as it liked, and MAX_CLIENTS of them shut the API
REQUEST_DEADLINE = 30.0


# ------------------------------------------------------------------- HTTP
ATOM, XML = "application/atom+xml;type=entry;charset=utf-8", "application/xml;charset=utf-8"


class _DeadlineReader(io.RawIOBase):
    """The connection's reads, each given only what is left of the request's deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline = time.monotonic() + REQUEST_DEADLINE

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request did not arrive within {REQUEST_DEADLINE:g} s")
        self.sock.settimeout(min(left, _Handler.timeout))
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server_version = "sbconform"
    protocol_version = "HTTP/1.1"
    timeout = 30  # a client that stops sending mid-request is dropped
    #: TCP_NODELAY: the headers and the body are two writes, and Nagle held the body back until the client's
    #: delayed ACK of the headers (40 ms on Linux): every request took 50 ms instead of a few
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        self.reader.deadline = time.monotonic() + REQUEST_DEADLINE  # (a socket timeout ends the connection quietly)
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (http.server's name)
        log.debug("http %s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") == "/health":
            # the emulator's readiness endpoint on its HTTP port (EMULATOR_HTTP_PORT, default 5300)
            self._send(200, b'{"status":"healthy"}', "application/json")
            return
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_POST(self) -> None:
        self._handle("POST")

    def _send(self, status: int, body: bytes, content_type: str = ATOM) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method: str) -> None:
        try:
            self._send(*self._answer(method))
        except OSError:  # the client went away, before or while it was answered (its 401 unread, say)
            self.close_connection = True

    def _answer(self, method: str) -> tuple[int, bytes, str]:
        admin: AdminHttp = self.server.admin  # type: ignore[attr-defined]
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0 or length > MAX_BODY:
                self.close_connection = True
                raise HttpError(413, f"the request body of {length} bytes is larger than {MAX_BODY}")
            return (*admin.handle(method, self.path, self.headers, self.rfile.read(length) if length else b""), ATOM)
        except HttpError as error:
            return error.status, error_xml(error.status, error.detail), XML
        except ValueError as error:
            return 400, error_xml(400, str(error)), XML
        except OSError:
            raise
        except Exception as error:  # never a traceback for one bad request: a 500 and one line
            log.error("http %s %s failed: %s: %s", method, self.path[:200], type(error).__name__, error)
            return 500, error_xml(500, "the broker failed to handle the request"), XML


class _BoundedServer(ThreadingHTTPServer):
    """At most ``MAX_CLIENTS`` connections served at once; more are closed at once."""

    daemon_threads = True
    #: the listen backlog, as the AMQP port's: a burst of connections waits to be accepted (and
    #: refused past the bound) instead of having its SYNs dropped, which costs each client 1 s retries
    request_queue_size = 512

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)

    def handle_error(self, request: Any, client_address: Any) -> None:  # one line, never a traceback
        log.warning("http: the connection from %s failed: %r", client_address, sys.exc_info()[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("http: more than %d connections at once, refusing %s", MAX_CLIENTS, client_address)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class AdminHttp:
    """``AdminHttp(server, host, port).start()`` returns the port; requests run until ``stop()``."""

    def __init__(self, server: Any, host: str = "127.0.0.1", port: int = 5300) -> None:
        self.server = server
        self.api = AdminApi(server)
        self.httpd = _BoundedServer((host, port))
        self.httpd.admin = self  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self.thread: threading.Thread | None = None

    def start(self) -> int:
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="sbconform-admin-http", daemon=True)
        self.thread.start()
        return self.port

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- running on the model's thread
    def call(self, fn: Callable[[], Any]) -> Any:
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as error:  # handed back to the HTTP thread
                box["error"] = error
            finally:
                done.set()

        self.server.call_soon(run)
        if not done.wait(CALL_TIMEOUT):
            raise HttpError(503, "the broker did not answer in time")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    # -- one request
    def handle(self, method: str, target: str, headers: Any, body: bytes) -> tuple[int, bytes]:
        url = urlsplit(target)
        path = unquote(url.path).strip("/")
        if any(c < " " or c == "\x7f" for c in path):
            # (as http.sys, in front of Service Bus, refuses a URL holding one; a rule named 'a\x00b' made its
            # subscription's rule list XML no client could read)
            raise HttpError(400, "the request's path holds a control character")
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        host = headers.get("Host") or f"localhost:{self.port}"
        if not _HOST.match(host) or not target.startswith("/"):
            # the audience a token must cover is built from the host and the path: a Host of
            # 'localhost:5300/q1' let a token for q1 alone reach every entity ('q1/other')
            raise HttpError(400, f"the Host header '{host[:80]}' is not a host and port")
        token = headers.get("Authorization") or ""
        try:
            check_token(token, f"sb://{host}/{path}", self.server.keys)
        except TokenError as error:
            try:  # the JavaScript SDK signs the request's whole URL, query included
                check_token(token, f"sb://{host}{target}", self.server.keys)
            except TokenError:
                log.info("http %s /%s refused: %s", method, path, error)
                raise HttpError(401, f"Unauthorized: {error}") from None
        try:
            return self._route(method, path, query, headers, body, host)
        except ServiceBusError as error:
            raise HttpError(status_of(error.code) if error.code is not ErrorCode.INVALID_OPERATION else 400, error.text) from None

    def _route(self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes, host: str) -> tuple[int, bytes]:
        parts = path.split("/") if path else []
        lower = [p.lower() for p in parts]
        skip, top = _int(query.get("$skip", "0"), "$skip"), _int(query.get("$top", "100"), "$top")
        if method == "GET" and lower == ["$namespaceinfo"]:
            return 200, namespace_xml(self.call(self.api.namespace), host)
        if method == "GET" and len(parts) == 2 and lower[0] == "$resources" and lower[1] in ("queues", "topics"):
            kind = lower[1][:-1]
            items = self.call(lambda: self.api.list(kind, skip, top + 1))
            return 200, feed_xml(parts[1], items[:top], host, path, skip, top, top > 0 and len(items) > top)
        if not parts or any(not p for p in parts) or parts[0].startswith("$"):
            raise HttpError(400, f"'/{path}' names no queue, topic or subscription")
        # A queue's or topic's name may hold slashes (a/b/c); "Subscriptions" after it names its subscriptions
        cut = lower.index("subscriptions", 1) if "subscriptions" in lower[1:] else len(parts)
        entity, rest = "/".join(parts[:cut]), parts[cut + 1:]
        if cut < len(parts) and len(rest) in (2, 3) and rest[1].lower() == "rules":
            return self._rules(method, f"{entity}/Subscriptions/{rest[0]}", rest[2] if len(rest) == 3 else None,
                               path, skip, top, headers, body, host)
        if cut < len(parts) and not rest and method == "GET":
            items = self.call(lambda: self.api.list("subscription", skip, top + 1, topic=entity))
            return 200, feed_xml("Subscriptions", items[:top], host, path, skip, top, top > 0 and len(items) > top)
        if cut < len(parts) and len(rest) != 1:
            raise HttpError(400, f"'/{path}' names no queue, topic or subscription")
        subscription = rest[0] if rest else None
        entity_path = entity if subscription is None else f"{entity}/Subscriptions/{subscription}"
        if method == "GET":
            found = self.call(lambda: self.api.describe(entity_path))
            return 200, (entry_xml(found, host) if found is not None else empty_feed())
        if method == "DELETE":
            self.call(lambda: self.api.delete(entity_path))
            return 200, b""
        if method == "PUT":
            _check_names(entity, subscription)
            kind = "subscription" if subscription is not None else _put_kind(body)
            props, extras = parse_description(body, kind, lambda text: _entity_of(text, host))
            self._check_forwarding(props, headers, host)
            if (headers.get("If-Match") or "").strip():
                return 200, entry_xml(self.call(lambda: self.api.update(entity_path, kind, props, extras)), host)
            default_rule = parse_default_rule(body) if kind == "subscription" else None
            return 201, entry_xml(self.call(lambda: self.api.create(entity_path, kind, props, extras, default_rule)), host)
        raise HttpError(405, f"{method} is not supported on '/{path}'")

    def _check_forwarding(self, props: dict[str, Any], headers: Any, host: str) -> None:
        """Forwarding sends into the destination: its path must be covered by the request's token or by
        the one the SDKs send for it, ``ServiceBusSupplementaryAuthorization`` (dead letters:
        ``ServiceBusDlqSupplementaryAuthorization``; azure-servicebus ``_create_forward_to_header_tokens``:
        "forward_to requires providing a bearer token in headers for the referenced entity"). A token
        for the source alone made forwarding into any entity, sending where it had no right to."""
        for field, header in (("forward_to", "ServiceBusSupplementaryAuthorization"),
                              ("forward_dead_lettered_messages_to", "ServiceBusDlqSupplementaryAuthorization")):
            destination = props.get(field)
            if not destination:
                continue
            for token in (headers.get("Authorization") or "", headers.get(header) or ""):
                try:
                    check_token(token, f"sb://{host}/{destination}", self.server.keys)
                    break
                except TokenError:
                    continue
            else:
                raise HttpError(401, f"Unauthorized: forwarding to '{destination[:80]}' needs a token for it ({header})")

    def _rules(self, method: str, sub_path: str, name: str | None, path: str, skip: int, top: int, headers: Any, body: bytes,
               host: str) -> tuple[int, bytes]:
        """``/{topic}/Subscriptions/{sub}/Rules[/{rule}]``: Get, Create, Update (``If-Match: *``),
        Delete and List Rules (https://learn.microsoft.com/previous-versions/azure/reference/hh780760(v=azure.100)):
        201 on create, 409 if the rule exists, 404 if it or the subscription does not, 400 for
        a body or SQL the broker refuses (the model's error as the detail), 403 past the quota."""
        if name is None:
            if method != "GET":
                raise HttpError(405, f"{method} is not supported on a subscription's rules")
            items = self.call(lambda: self.api.rules(sub_path, skip, top + 1))
            return 200, rule_feed_xml(items[:top], host, path, skip, top, top > 0 and len(items) > top)
        if method == "GET":
            return 200, rule_entry_xml(self.call(lambda: self.api.rule(sub_path, name)), host)
        if method == "DELETE":
            self.call(lambda: self.api.delete_rule(sub_path, name))
            return 200, b""
        if method == "PUT":
            rule = parse_rule(body, name)
            if (headers.get("If-Match") or "").strip():
                return 200, rule_entry_xml(self.call(lambda: self.api.update_rule(sub_path, rule)), host)
            return 201, rule_entry_xml(self.call(lambda: self.api.create_rule(sub_path, rule)), host)
        raise HttpError(405, f"{method} is not supported on a rule")


#: a Host header: a name (letters, digits, '.', '-', '_': a container's name may hold one) or an IPv4 address,
#: or an IPv6 address in brackets, and an optional port (RFC 9110 7.2); never a '/', '@', '?' or '#'
_HOST = re.compile(r"^(?:[A-Za-z0-9_](?:[A-Za-z0-9._-]*)|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")

#: an entity name: letters, digits, periods, hyphens and underscores, starting and ending with a
#: letter or digit (service-bus-quotas / "Create queue": names up to 260 characters, subscriptions 50)
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _check_names(entity: str, subscription: str | None) -> None:
    """A queue or topic path: segments of letters, digits, '.', '-' and '_' separated by '/', at most
    260 characters; a subscription name: one such segment, at most 50 (Service Bus quotas)."""
    if len(entity) > 260 or not all(_NAME.match(segment) for segment in entity.split("/")):
        raise HttpError(400, f"'{entity[:80]}' is not a valid entity name: a path of segments of letters, digits, '.', '-' and '_', "
                             "each starting and ending with a letter or digit, at most 260 characters")
    if subscription is not None and (len(subscription) > 50 or not _NAME.match(subscription)):
        raise HttpError(400, f"'{subscription[:80]}' is not a valid entity name (a subscription): letters, digits, '.', '-' and '_', "
                             "starting and ending with a letter or digit, at most 50 characters")


def _int(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise HttpError(400, f"{name}: '{text[:20]}' is not an integer") from None
    if value < 0 or value > 1_000_000:
        raise HttpError(400, f"{name}: {value} is out of range")
    return value


def _put_kind(body: bytes) -> str:
    if b"QueueDescription" in body:
        return "queue"
    if b"TopicDescription" in body:
        return "topic"
    raise HttpError(400, "the request body holds no QueueDescription or TopicDescription")


def _entity_of(text: str, host: str) -> str:
    """'sb://host/q2', 'https://host/q2' or 'q2' -> 'q2' (a ForwardTo)."""
    if "://" in text:
        return urlsplit(text).path.strip("/")
    return text.strip("/")


def plain_http_transport() -> Any:
    """A transport for ``ServiceBusAdministrationClient`` that speaks plain HTTP.

    azure-servicebus 7.15 always builds ``https://<host>`` URLs, even from a connection string
    with ``UseDevelopmentEmulator=true``; this transport sends the same requests over plain
    HTTP to the port the connection string names::

        ServiceBusAdministrationClient.from_connection_string(
            "Endpoint=sb://localhost:5300;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true;",
            transport=plain_http_transport())
    """
    from azure.core.pipeline.transport import RequestsTransport

    class PlainHttpTransport(RequestsTransport):
        def send(self, request: Any, **kwargs: Any) -> Any:
            if request.url.startswith("https://"):
                request.url = "http://" + request.url[len("https://"):]
            return super().send(request, **kwargs)

    return PlainHttpTransport()
