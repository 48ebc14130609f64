"""Where the proxy's events go: one trace (one recording), written as JSON Lines
(streamed: the events of each batch of frames the relay read are written with one
``os.write`` as soon as that batch is interpreted, ``flush``) or Parquet, split into
numbered files of a bounded size (``<trace>-00001.jsonl``, ``-00002``...). All files of
a recording carry the same trace id and continue its ``pos`` and ``op_id`` numbering,
so the directory replays as one trace (``sbconform replay --local DIR``).

A recording failure (disk full, a bad event) never reaches the relay: ``write`` catches
it, reports it once through ``on_error`` and, from then on, drops events (``failed``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..trace.io import JsonlWriter, ParquetWriter
from ..trace.schema import FIELDS, OPERATIONS, PHASES, TraceFormatError

_KINDS = {name: kind for name, kind, _ in FIELDS}


def _encoder(separators: tuple[str, str], sort_keys: bool, ensure_ascii: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(...).encode`` with its C encoder made once, not at every call (the
    proxy writes several events per message); the plain encoder where there is no C one."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    plain = json.JSONEncoder(default=str, sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=separators).encode
    if c_make_encoder is None:
        return plain
    basestring = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    made = c_make_encoder(None, str, basestring, None, separators[1], separators[0], sort_keys, False, True)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return basestring(value)
        return "".join(made(value, 0))
    return encode


_OBJECT = _encoder((", ", ": "), True, True)  # args and result as JSON text (json.dumps(..., sort_keys=True))


_LINE = _encoder((",", ":"), False, False)  # what JsonlWriter writes


class BufferedJsonlWriter(JsonlWriter):
    """A ``JsonlWriter`` whose lines wait in memory until ``flush`` writes them all with one
    ``os.write`` (the relay flushes after each batch of frames: one system call per batch,
    not per event). Events come without null fields (``TraceSink.write`` leaves them out)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.pending: list[str] = []
        super().__init__(*args, **kwargs)
        #: the file's size once the pending lines are written (characters for bytes: rotation is approximate)
        self.size = os.fstat(self._fd).st_size

    def write(self, event: dict) -> None:  # type: ignore[override]
        line = _LINE(event)
        self.pending.append(line)
        self.size += len(line) + 1
        self.events += 1

    def flush(self) -> None:
        if not self.pending:
            return
        if self._fd is None:
            raise ValueError(f"{self.path}: writer is closed")
        data = ("\n".join(self.pending) + "\n").encode("utf-8")
        self.pending = []
        view = memoryview(data)
        while view:  # a regular file takes it all at once; loop only on a short write
            view = view[os.write(self._fd, view):]

    def close(self) -> None:
        try:
            self.flush()
        finally:
            super().close()


#: a trace id begins the name of every file of the recording: at most this many bytes of it
TRACE_ID_BYTES = 200


def trace_id_problem(trace: str) -> str | None:
    """What keeps ``trace`` from beginning the recording's file names in its directory
    (``<trace>-00001.jsonl``): a path (``/``, ``\\``, ``..``), NUL or another control
    character, a leading ``.`` (hidden; ``..``), more than ``TRACE_ID_BYTES``; else None."""
    if not isinstance(trace, str) or not trace:
        return "a trace id is a non-empty text"
    if trace.startswith(".") or any(c in trace for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in trace):
        return (f"{trace[:60]!r}: a trace id names the trace's files in --out: no '/', '\\', NUL or control "
                f"characters, no leading '.'")
    if len(trace.encode("utf-8", "surrogatepass")) > TRACE_ID_BYTES:
        return f"{trace[:40]!r}...: a trace id is at most {TRACE_ID_BYTES} bytes (it begins the trace's file names)"
    return None


#: files of one recording, numbered <trace>-00001 ... -99999 and read in name order: a 100,000th
#: (<trace>-100000) would sort before <trace>-10001; past the last the last file grows
MAX_FILES = 99_999


#: the recording's Parquet row group: small enough for rotation by size to follow the file
PARQUET_ROWS = 4096

#: a Parquet part is closed (readable) once this old: a Parquet file without its footer is
#: unreadable, so a recorder killed outright (SIGKILL, the machine lost) loses its open part
#: only, the last minute or so, not the whole recording (JSON Lines loses nothing flushed)
PART_SECONDS = 60.0


class TraceSink:
    def __init__(self, out: str | Path, trace: str | None = None, fmt: str = "jsonl", rotate_bytes: int = 256 * 1024 * 1024,
                 on_error: Callable[[str], None] | None = None, clock: Callable[[], float] | None = None,
                 part_seconds: float = PART_SECONDS, **meta: Any) -> None:
        if fmt not in ("jsonl", "parquet"):
            raise ValueError(f"unknown trace format {fmt!r} (jsonl or parquet)")
        problem = trace_id_problem(trace) if trace is not None else None
        if problem:  # refused here, not only by the command line: the library writes the files
            raise ValueError(problem)
        self.dir = Path(out)
        self.dir.mkdir(parents=True, exist_ok=True)
        # event times: ms on a clock that never steps (time.monotonic), since the start; the wall
        # clock, which NTP or a person may step between a receive and its complete (a false lock
        # expiry, a false double delivery), gives the start's epoch only
        self.clock = clock or time.monotonic
        self.started = self.clock()
        self.wall_started = time.time() if clock is None else self.started
        self.trace = trace or "record-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.wall_started))
        self.fmt = fmt
        self.rotate_bytes = max(1, rotate_bytes)
        self.meta = {"recorder": "sbconform record", "epoch_ms": int(self.wall_started * 1000), **meta}
        self.on_error = on_error or (lambda text: print(f"sbconform record: {text}", file=sys.stderr))
        self.pos = 0
        self.next_op = 0
        self.files: list[Path] = []
        self.writer: JsonlWriter | ParquetWriter | None = None
        self.events_in_file = 0
        self.failed: str | None = None
        self.events = 0
        self.full = False  # MAX_FILES reached: the last file grows
        self.part_seconds = part_seconds  # Parquet: a part this old is closed at the next flush
        self.opened = 0.0  # when the open part began (clock)
        self.writing: Path | None = None  # the open file (a Parquet part: files[-1] + '.partial')

    def now(self) -> int:
        """ms since the recording started: the trace's clock."""
        return int((self.clock() - self.started) * 1000)

    def epoch_ms(self) -> int:
        return int(self.wall_started * 1000)

    def op(self) -> int:
        self.next_op += 1
        return self.next_op - 1

    def _open(self) -> None:
        path = self.dir / f"{self.trace}-{len(self.files) + 1:05d}.{self.fmt}"
        # Parquet: written as <name>.partial (no trace suffix: skipped by replay, convert and diff) and
        # renamed once closed, so that a directory left by a recorder killed outright replays as it is
        self.writing = path.with_name(path.name + ".partial") if self.fmt == "parquet" else path
        meta = {**self.meta, "part": len(self.files) + 1}
        # events are built field by field to the format's types above (what check_event
        # verifies), so the writers need not parse each event again; the tests read every
        # recording back through the checking readers
        # Parquet in row groups of PARQUET_ROWS: what is on disk (the rotation's measure)
        # trails what was written by one row group at most, not by the reader's 262,144 rows
        self.writer = (BufferedJsonlWriter(path, self.trace, validate=False, **meta) if self.fmt == "jsonl"
                       else ParquetWriter(self.writing, self.trace, row_group=PARQUET_ROWS, validate=False, **meta))
        self.files.append(path)
        self.events_in_file = 0
        self.opened = self.clock()

    def write(self, client: str, op_id: int, op: str, phase: str, time_ms: int | None = None, **fields: Any) -> None:
        if self.failed is not None:
            return
        event = {"trace": self.trace, "pos": self.pos, "time": self.now() if time_ms is None else int(time_ms),
                 "client": str(client), "op_id": int(op_id), "op": op, "phase": phase}
        for k, v in fields.items():
            if v is None:
                continue
            kind = _KINDS.get(k)
            if kind is None:
                self.on_error(f"event not recorded: unknown field {k!r} ({op} {phase})")
                return
            t = type(v)
            if k == "args" or k == "result":
                v = _OBJECT(v)
            elif kind == "string":
                if t is not str:
                    v = str(v)
            elif t is not int:  # bool and int subclasses too: plain ints in the trace
                v = int(v)
            event[k] = v
        if op not in OPERATIONS or phase not in PHASES:
            self.on_error(f"event not recorded: {op!r} {phase!r} is not an operation and phase of the format")
            return
        try:
            if self.writer is None or self.events_in_file % 16 == 0 and self._size() >= self.rotate_bytes and self._may_rotate():
                if self.writer is not None:
                    self._close_writer()
                self._open()
            self.writer.write(event)
        except TraceFormatError as error:  # an event the interpreter got wrong: said, skipped, recording goes on
            self.on_error(f"event not recorded: {error}")
            return
        except Exception as error:  # a recording failure must not reach the relay
            self.failed = f"recording stopped at event {self.pos}: {type(error).__name__}: {error}"
            self.on_error(self.failed)
            return
        self.pos += 1
        self.events += 1
        self.events_in_file += 1

    def _may_rotate(self) -> bool:
        """Whether a new file may begin (fewer than MAX_FILES so far); said once when not."""
        if len(self.files) < MAX_FILES:
            return True
        if not self.full:
            self.full = True
            self.on_error(f"the recording has {MAX_FILES} files: no more rotation, {self.files[-1].name} grows")
        return False

    def flush(self) -> None:
        """Write the events gathered since the last flush (JSON Lines); Parquet: close the open
        part once it is ``part_seconds`` old (the next event opens the next part)."""
        if self.failed is not None or self.writer is None:
            return
        if not isinstance(self.writer, BufferedJsonlWriter):
            if self.clock() - self.opened >= self.part_seconds and self._may_rotate():
                try:
                    self._close_writer()
                except Exception as error:  # a recording failure must not reach the relay
                    self.failed = f"recording stopped at event {self.pos}: {type(error).__name__}: {error}"
                    self.on_error(self.failed)
            return
        try:
            self.writer.flush()
        except Exception as error:  # a recording failure must not reach the relay
            self.writer.pending = []
            self.failed = f"recording stopped at event {self.pos}: {type(error).__name__}: {error}"
            self.on_error(self.failed)

    def _size(self) -> int:
        if isinstance(self.writer, BufferedJsonlWriter):
            return self.writer.size
        try:
            return self.writing.stat().st_size
        except (OSError, IndexError):
            return 0

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            try:
                self._close_writer()
            except Exception as error:
                self.on_error(f"closing the trace: {type(error).__name__}: {error}")
            self.writer = None

    def _close_writer(self) -> None:
        """Close the open file (a Parquet part renamed to its name once whole)."""
        try:
            self.writer.close()
            if self.writing != self.files[-1]:
                os.replace(self.writing, self.files[-1])
        finally:
            self.writer = None
