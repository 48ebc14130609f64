"""Where a trace lies: a file opened locally or through pyarrow's file systems (``_open``), and
a by-piece directory's ``_layout.json``, checked (``checked_layout``) and looked for at a remote
root in bounded time (``_remote_layout``). ``replay.locate`` uses them."""

from __future__ import annotations

import json
from pathlib import Path

from .schema import TraceFormatError


def _open(path: str):
    """A readable file for a local path or any URI pyarrow's file systems know (hdfs://,
    s3://, gs://, ...)."""
    if "://" not in path:
        return open(path, "rb")
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(path)
    return filesystem.open_input_file(inner)


#: seconds a remote file system may take to say whether ``_layout.json`` is there: without
#: network or credentials pyarrow's (GCS, S3) retry for minutes before Spark even starts
REMOTE_TIMEOUT = 20.0


def checked_layout(text: str | bytes, where: str) -> dict:
    """A ``_layout.json``'s content, checked: a JSON object whose ``files`` are names of files in
    its directory (hand-edited or damaged, it made a traceback, exit 1, or named a file anywhere)."""
    try:
        layout = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise TraceFormatError(f"{where}: not JSON ({str(error)[:100]})") from None
    if not isinstance(layout, dict):
        raise TraceFormatError(f"{where}: not a JSON object")
    files = layout.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise TraceFormatError(f"{where}: 'files' should be the list of its bucket files' names")
    for name in files:
        if name.startswith(("/", "\\")) or ".." in Path(name).parts or "://" in name:
            raise TraceFormatError(f"{where}: lists {name!r}, not a file of its directory")
    for key in ("max_file_bytes", "buckets"):
        if not isinstance(layout.get(key, 0), int) or isinstance(layout.get(key), bool):
            raise TraceFormatError(f"{where}: {key!r} should be a whole number")
    return layout


def _remote_layout(root: str) -> dict | None:
    import threading

    found: list = []

    def look() -> None:
        try:
            with _open(root.rstrip("/") + "/_layout.json") as f:
                text = f.read()
        except Exception:  # no layout file, or a file system pyarrow cannot open: Spark reads it
            found.append(None)
            return
        try:
            found.append(checked_layout(text, root.rstrip("/") + "/_layout.json"))
        except TraceFormatError as error:
            found.append(error)

    looking = threading.Thread(target=look, name="sbconform-remote-layout", daemon=True)
    looking.start()
    looking.join(REMOTE_TIMEOUT)
    if not found:  # still waiting (the thread is left to its retries: a daemon, it ends with the process)
        raise TraceFormatError(f"{root}: its file system did not answer in {REMOTE_TIMEOUT:g} s (looking for "
                               f"_layout.json): no network, or no credentials?; no verdict")
    if isinstance(found[0], TraceFormatError):
        raise found[0]
    return found[0]
