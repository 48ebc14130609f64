"""Child processes the kit starts (``sbconform serve``, podman's API service)."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen | None, grace: float = 5.0) -> None:
    """Ask a child to stop (SIGTERM); kill it if it is still there after ``grace`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
