"""Preflight: is the target reachable and are we allowed in, before any test runs?

A wrong key, a closed port, a host that does not resolve, a string that is not a connection
string, a missing container engine: each is the user's set-up, not the broker's behaviour,
so it must never become a clause verdict. :func:`check` runs the steps a client takes, in
order, and stops at the first that fails with a :class:`PreflightError` naming the cause in
one line:

1. parse the connection string (``Endpoint=sb://host[:port]``, a key name and a key, or a
   shared access signature);
2. resolve the host;
3. connect to the AMQP port (5672 for ``UseDevelopmentEmulator=true``, else 5671 with TLS);
4. authenticate: a CBS ``put-token`` for the namespace (the exchange every Service Bus client
   makes before it opens a link: https://learn.microsoft.com/azure/service-bus-messaging/service-bus-amqp-protocol-guide#claims-based-authorization);
5. management rights: the ``$sbconform`` control node (control=amqp), or the administration
   API (control=admin, a real Azure namespace: listing needs the ``Manage`` claim).

The key never appears in a message (``sbconform.secrets.mask``).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from ..secrets import mask


class PreflightError(Exception):
    """The target cannot be used as configured; the text is one line for the user."""


def check(name: str, options: dict[str, Any], timeout: float = 10.0) -> None:
    """Preflight the target ``name`` as ``make_target(name, **options)`` would build it."""
    if name == "container":
        check_engine()
        check_image(str(options.get("image") or ""))
        return
    if name == "emulator":  # the engine, and a trial start of the emulator and its SQL Server
        from .emulator import preflight

        preflight(options)
        return
    if name != "sdk":
        return
    connection_string = options.get("connection_string")
    if not connection_string:
        return  # serve=true: the target starts its own server
    check_connection_string(str(connection_string), str(options.get("control", "auto")), timeout)


def check_image(image: str) -> None:
    """Our image (``sbconform serve``'s), built now if the engine lacks it: once, before the test
    processes start (they would each try, side by side), and a build that fails is one line
    here rather than a failure of every scenario."""
    from ..containers import SERVE_IMAGE, EngineUnavailable, ensure_serve_image

    tag = image or SERVE_IMAGE
    if "sbconform-serve" not in tag:  # another broker's image: here, or pulled now (a typo was every clause failing)
        from ..containers import engine

        eng = engine()
        if eng.has_image(tag):
            return
        print(f"sbconform: pulling {tag}", flush=True)
        pulled = eng.run("pull", tag, capture_output=True, text=True)
        if pulled.returncode != 0:
            said = [line.strip() for line in (pulled.stderr or pulled.stdout or "").splitlines() if line.strip()]
            raise PreflightError(f"the image {tag} is not here and could not be pulled ({said[-1][:300] if said else 'no reason given'})")
        return
    try:
        ensure_serve_image(tag, log=lambda line: print(line, flush=True))
    except EngineUnavailable as error:
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), "failed")
        raise PreflightError(f"the image {tag} could not be built ({first}); `sbconform container build` shows the whole output") from None


def check_engine() -> None:
    from ..containers import EngineUnavailable, engine

    try:
        engine()
    except EngineUnavailable as error:
        raise PreflightError(f"no container engine: {error}") from None


def parse(connection_string: str) -> dict[str, Any]:
    """The parts of a connection string the kit needs; a PreflightError if it is not one."""
    parts: dict[str, str] = {}
    for piece in connection_string.split(";"):
        key, sep, value = piece.strip().partition("=")
        if sep:
            parts[key.strip().lower()] = value.strip()
    endpoint = parts.get("endpoint", "")
    shown = mask(connection_string)[:80]
    if not endpoint:
        raise PreflightError(f"not a Service Bus connection string ({shown!r}): expected "
                             "Endpoint=sb://HOST;SharedAccessKeyName=NAME;SharedAccessKey=KEY")
    if not endpoint.lower().startswith("sb://"):
        raise PreflightError(f"the connection string's Endpoint {endpoint!r} does not start with sb://")
    host_port = endpoint[5:].strip("/").split("/", 1)[0]
    host, _, port_text = host_port.partition(":")
    if not host:
        raise PreflightError(f"the connection string's Endpoint {endpoint!r} names no host")
    emulator = parts.get("usedevelopmentemulator", "").lower() == "true"
    try:
        port = int(port_text) if port_text else (5672 if emulator else 5671)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise PreflightError(f"the connection string's Endpoint {endpoint!r} has no valid port") from None
    signature = parts.get("sharedaccesssignature")
    if not signature and not (parts.get("sharedaccesskeyname") and parts.get("sharedaccesskey")):
        raise PreflightError(f"the connection string for {endpoint} has no SharedAccessKeyName and SharedAccessKey "
                             "(nor a SharedAccessSignature)")
    return {"endpoint": f"sb://{host_port}", "host": host, "port": port, "tls": not emulator,
            "key_name": parts.get("sharedaccesskeyname", ""), "key": parts.get("sharedaccesskey", ""),
            "signature": signature, "emulator": emulator}


def check_connection_string(connection_string: str, control: str = "auto", timeout: float = 10.0) -> None:
    p = parse(connection_string)
    host, port, endpoint = p["host"], p["port"], p["endpoint"]
    connect_host = "127.0.0.1" if host == "localhost" else host
    try:
        addresses = socket.getaddrinfo(connect_host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise PreflightError(f"cannot resolve {host!r} (from {endpoint}): {error.strerror}") from None
    family, kind, proto, _, address = addresses[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(timeout)
            probe.connect(address)
    except ConnectionRefusedError:
        raise PreflightError(f"nothing listens on {host}:{port} ({endpoint}): is the broker running?") from None
    except (socket.timeout, TimeoutError):
        raise PreflightError(f"no answer from {host}:{port} ({endpoint}) within {timeout:g} s") from None
    except OSError as error:
        raise PreflightError(f"cannot connect to {host}:{port} ({endpoint}): {error.strerror or error}") from None
    _authenticate(p, connect_host, timeout)
    if control == "admin" or (control == "auto" and not p["emulator"]):
        _check_admin(connection_string, endpoint)
    elif control == "amqp" or (control == "auto" and p["emulator"]):
        # auto on a local endpoint means the $sbconform node (sdk.SdkTarget.open): without one the
        # target would declare entity management it cannot do, and every scenario creating an
        # entity would fail instead of being skipped
        _check_control_node(p, connect_host, timeout, auto=control == "auto")


def _authenticate(p: dict[str, Any], host: str, timeout: float) -> None:
    """A CBS put-token for the namespace over a fresh AMQP connection."""
    try:
        from proton import Message as AmqpMessage, SSLDomain
        from proton.utils import BlockingConnection, SyncRequestResponse
    except ImportError:  # without proton the SDK's own first call will say it
        return
    from ..amqp.sas import make_token

    audience = f"{p['endpoint'].rstrip('/')}/"
    token = p["signature"] or make_token(audience, p["key_name"], p["key"])
    url = f"{'amqps' if p['tls'] else 'amqp'}://{host}:{p['port']}"
    try:
        connection = BlockingConnection(url, allowed_mechs="ANONYMOUS", timeout=timeout,
                                        ssl_domain=SSLDomain(SSLDomain.MODE_CLIENT) if p["tls"] else None)
    except Exception as error:
        raise PreflightError(f"{p['endpoint']} does not speak AMQP 1.0 on port {p['port']}: {_one_line(error)}") from None
    try:
        cbs = SyncRequestResponse(connection, "$cbs")
        request = AmqpMessage(body=token, properties={
            "operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience})
        answer = cbs.call(request).properties or {}
    except Exception as error:
        raise PreflightError(f"{p['endpoint']} did not answer an authentication request: {_one_line(error)}") from None
    finally:
        try:
            connection.close()
        except Exception:
            pass
    status = int(answer.get("status-code", answer.get("statusCode", 500)))
    if status in (401, 403):
        raise PreflightError(f"authentication refused by {p['endpoint']}: wrong key or key name? "
                             f"(key name {p['key_name']!r}; {mask(str(answer.get('status-description', '')))})")
    if not 200 <= status < 300:
        raise PreflightError(f"{p['endpoint']} answered the authentication request with status {status}: "
                             f"{mask(str(answer.get('status-description', '')))}")


def _check_control_node(p: dict[str, Any], host: str, timeout: float, auto: bool = False) -> None:
    from .sdk import ControlClient

    def refused(what: str, error: BaseException) -> PreflightError:
        if auto:
            return PreflightError(
                f"{p['endpoint']} has no $sbconform control node to create the entities scenarios need "
                f"(control=auto; {_one_line(error)}): for Microsoft's emulator use --target emulator, for a broker "
                "whose entities come from its config --option control=none")
        return PreflightError(f"{what}: {_one_line(error)}")

    try:
        client = ControlClient(host, p["port"], p["key_name"], p["key"])
    except Exception as error:
        raise refused(f"cannot reach the $sbconform control node of {p['endpoint']}", error) from None
    try:
        client.call("now")
    except Exception as error:
        raise refused(f"{p['endpoint']} refused management (control=amqp: the $sbconform node)", error) from None
    finally:
        client.close()


def _check_admin(connection_string: str, endpoint: str) -> None:
    try:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
        from azure.servicebus.management import ServiceBusAdministrationClient
    except ImportError:
        return
    started = time.monotonic()
    try:
        with ServiceBusAdministrationClient.from_connection_string(connection_string) as admin:
            admin.get_namespace_properties()
    except ClientAuthenticationError as error:
        raise PreflightError(f"{endpoint} refused management: the key needs the Manage right to create entities "
                             f"({_one_line(error)})") from None
    except HttpResponseError as error:
        if getattr(error, "status_code", None) in (401, 403):
            raise PreflightError(f"{endpoint} refused management: the key needs the Manage right to create entities") from None
        raise PreflightError(f"{endpoint}'s management API answered {getattr(error, 'status_code', '?')}: "
                             f"{_one_line(error)}") from None
    except Exception as error:
        raise PreflightError(f"cannot reach {endpoint}'s management API after {time.monotonic() - started:.0f} s: "
                             f"{_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return mask(text[0][:200] if text else type(error).__name__)
