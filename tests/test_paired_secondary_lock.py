"""Pairings on a secondary namespace given by connection string take turns.

Backlog queues live at fixed paths on the secondary (PAIR-BACKLOG-001), so two test processes
pairing on one secondary at once (``certify --target sdk --option secondary=... --jobs 2``)
shared them: each saw the other's messages and deleted the other's queues, and 13 paired clauses
failed that pass with ``--jobs 1``. A pairing now holds a lock per secondary endpoint and primary
namespace, across processes, from the moment its secondary target opens until it closes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")
fcntl = pytest.importorskip("fcntl")

from serve_support import Serve  # noqa: E402

from sbconform.targets.paired_sdk import backlog_lock_path, namespace_name  # noqa: E402
from sbconform.targets.sdk import SdkTarget  # noqa: E402

PROBE = ("import fcntl, sys\n"
         "f = open(sys.argv[1], 'a')\n"
         "try:\n"
         "    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
         "except BlockingIOError:\n"
         "    print('held')\n"
         "else:\n"
         "    print('free')\n")


def another_process_finds(path) -> str:
    """What another process finds of the lock file at ``path``: 'held' or 'free'."""
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True).stdout.strip()


def test_a_pairing_holds_its_secondarys_backlog_paths_until_it_closes() -> None:
    primary, secondary = Serve(), Serve(extra=["--http-port", "-1"])
    target = SdkTarget(connection_string=primary.connection_string, secondary=secondary.connection_string)
    try:
        target.open()
        lock = backlog_lock_path(secondary.connection_string, namespace_name(target))
        assert another_process_finds(lock) == "free"
        paired = target.paired_namespace()
        try:
            assert another_process_finds(lock) == "held"  # another test process's pairing waits
            # another primary namespace's backlog paths are other queues: not held
            assert another_process_finds(backlog_lock_path(secondary.connection_string, "other")) == "free"
        finally:
            paired.close()
        assert another_process_finds(lock) == "free"
    finally:
        target.close()
        primary.stop()
        secondary.stop()
