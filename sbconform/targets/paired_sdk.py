"""Paired namespaces through the SDK target: a second namespace, backlog queues at fixed paths.

A pairing needs two namespaces. With ``serve=true`` the secondary is a second ``sbconform
serve`` process (one per test process, started on first use, like the Premium one); with a
connection string, ``secondary=<connection string>`` names it (any broker the SDK target can
drive: another emulator, another Azure namespace). Outages are injected in the primary through
its control node (``$sbconform``: ``entity-availability``), as for any scenario.

Backlog queues live at fixed paths (``<primary namespace>/x-servicebus-transfer/<i>``,
PAIR-BACKLOG-001), so they are created without the unique suffix the SDK target gives the
entities a test makes (``create_queue_at``); the target still deletes them when it closes, so the
next test on the same secondary server starts from an empty namespace.

The primary namespace's name is what the .NET client took from the factory's address: the first
label of the endpoint's host (``contoso`` for ``contoso.servicebus.windows.net``, ``localhost``
for a local emulator).
"""

from __future__ import annotations

import atexit
import hashlib
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .sdk import SdkTarget

_LOCK = threading.Lock()
_SECONDARY: Any = None


def secondary_server() -> Any:
    """``sbconform serve`` for the secondary namespace of pairings (one per process)."""
    global _SECONDARY
    from .sdk import ServeProcess

    with _LOCK:
        if _SECONDARY is None or _SECONDARY.process.poll() is not None:
            _SECONDARY = ServeProcess()
            atexit.register(_SECONDARY.stop)
        return _SECONDARY


def paired_namespace(target: "SdkTarget") -> "SdkTarget":
    """A fresh, open SDK target on the secondary namespace of ``target``. The caller closes it."""
    from .sdk import SdkTarget

    target.require("paired-namespaces")
    rest_port = None
    if target.serve:
        server = secondary_server()
        connection_string, rest_port = server.connection_string, server.http_port
    else:
        connection_string = target.secondary_connection_string
    secondary = SdkTarget(connection_string=connection_string, control=target.control_mode, prefix=target.prefix,
                          open_poll_ms=target.open_poll_ms)
    secondary.capabilities, secondary.lacking = target.capabilities, target.lacking
    secondary.rest_port = rest_port  # the backlog queues are created through its management REST API
    # with virtual time, the secondary endpoint's clock is moved on with the primary's (share_clock)
    secondary.virtual_time = getattr(target, "virtual_time", False)
    if not target.serve:
        hold_backlog_paths(secondary, connection_string or "", namespace_name(target))
    try:
        secondary.open()
        if not target.serve:
            clear_dead_backlog(secondary, namespace_name(target))
    except BaseException:
        secondary.release_pairing()
        raise
    return secondary


def clear_dead_backlog(secondary: "SdkTarget", primary_namespace: str, at_least: int = 10) -> list[str]:
    """Delete the backlog queues a dead run left on a secondary given by connection string.

    The target deletes the backlog queues it made when it closes; a run killed before that left
    them, messages and all, where the next pairing finds them and leaves them as they are
    (PAIR-BACKLOG-003), syphoning the dead run's messages. Called once the pairing holds the lock
    on these paths (``hold_backlog_paths``), when no live pairing uses them: indexes from 0, at
    least ``at_least`` (the default BacklogQueueCount, PAIR-OPT-001) and on while queues are found."""
    from sbreference import ErrorCode, ServiceBusError
    from sbreference.paired.backlog import backlog_path

    deleted: list[str] = []
    for index in range(10_000):
        path = backlog_path(primary_namespace, index)
        try:
            secondary._control().call("delete", path=path)
            deleted.append(path)
        except ServiceBusError as error:
            if error.code is not ErrorCode.ENTITY_NOT_FOUND:
                break  # cannot manage it here: the pairing's own scenario will say so
            if index + 1 >= at_least:
                break
    return deleted


def backlog_lock_path(secondary_connection_string: str, primary_namespace: str) -> Path:
    """The lock file of one secondary endpoint's backlog queues for one primary namespace."""
    from .sdk import parse_connection_string

    endpoint = parse_connection_string(secondary_connection_string).get("endpoint", "").lower().rstrip("/")
    key = hashlib.sha256(f"{endpoint}|{primary_namespace.lower()}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"sbconform-pairing-{key}.lock"


def hold_backlog_paths(secondary: "SdkTarget", secondary_connection_string: str, primary_namespace: str) -> None:
    """Backlog queues live at fixed paths (PAIR-BACKLOG-001): two test processes pairing on one
    secondary namespace given by connection string (``certify --jobs N``) would share them, each
    seeing the other's messages and deleting its queues. One pairing at a time per secondary
    endpoint and primary namespace, across processes: a lock file, held until ``secondary``
    closes (``SdkTarget.release_pairing``). With ``serve=true`` each process has its own secondary."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (not POSIX): pairings on one secondary need --jobs 1
        return
    handle = open(backlog_lock_path(secondary_connection_string, primary_namespace), "a")
    fcntl.flock(handle, fcntl.LOCK_EX)  # waits while another process's pairing runs
    secondary.pairing_lock = handle


def create_queue_at(target: "SdkTarget", path: str, properties: dict[str, Any]) -> str:
    """Create a queue at exactly ``path`` (no suffix); deleted when ``target`` closes."""
    created = target._control().call("create-queue", name=path, properties=properties)["path"]
    target.created.append(created)
    return created


def namespace_name(target: "SdkTarget") -> str:
    """The first label of the endpoint's host: ``contoso`` for contoso.servicebus.windows.net."""
    from .sdk import parse_connection_string

    endpoint = parse_connection_string(target.connection_string or "").get("endpoint", "")
    host = endpoint.split("://", 1)[-1].strip("/").split(":", 1)[0]
    return host.split(".", 1)[0] or target.name


def share_clock(target: "SdkTarget", other: Any) -> None:
    """Both targets measure time from the same instant, so that times one reports (a lock's
    expiry in a backlog queue) mean the same instant to a client timing on the other. With
    virtual time the two endpoints' clocks are first brought to one reading (the one behind is
    moved on), since each was moved on by the tests that used it before.

    Each broker's stamps are read with its own clock's offset (``sdk_offset``, measured when each
    target opened, once per endpoint): ``t0_epoch_ms`` is the client's wall clock at the shared
    zero plus this broker's offset. (Copying the other's took the two brokers' clocks to agree: a
    secondary whose clock is d ms behind the primary's had its stamps, backlog locks among them,
    read d ms early.)"""
    inner = other
    for _ in range(8):  # through recording and metering wrappers
        if hasattr(inner, "t0_epoch_ms") and hasattr(inner, "t0"):
            if getattr(target, "time_control", False) and getattr(inner, "time_control", False) and inner is not target:
                _align_endpoint_clocks(target, inner)  # then both read the one wire time (offsets 0)
            client_epoch_ms = inner.t0_epoch_ms - _offset(inner)
            target.t0, target.t0_epoch_ms, target.skew = inner.t0, client_epoch_ms + _offset(target), inner.skew
            return
        inner = getattr(inner, "_target", None) or getattr(inner, "target", None)
        if inner is None:
            return


def _offset(target: Any) -> int:
    """The target's broker's clock minus the client's (ms): 0 where not measured (one clock)."""
    return int(getattr(getattr(target, "broker_clock", None), "offset", 0) or 0)


def _align_endpoint_clocks(a: "SdkTarget", b: "SdkTarget") -> None:
    """Move the endpoint whose wire clock (epoch + now) is behind to the other's reading."""
    def read(t: "SdkTarget") -> int:
        clock = t.control.call("now")
        return int(clock["epoch"]) + int(clock["now"])

    behind = read(b) - read(a)
    if behind > 0:
        a.control.call("advance-time", ms=behind)
    elif behind < 0:
        b.control.call("advance-time", ms=-behind)
