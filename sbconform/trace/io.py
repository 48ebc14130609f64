"""Reading and writing traces: JSON Lines (streaming append) and Parquet (large traces).

The format is ``schema.py`` / ``sbspec/trace-format.md``. Readers yield events as dicts
holding every field of ``schema.FIELDS`` (missing optional ones as ``None``), checked by
``schema.check_event``; ``Event(**row)`` makes an object of one.

- JSON Lines: the first line is the header (``schema.header``), then one event per line.
  ``JsonlWriter`` writes each event whole, in one ``write`` call, and flushes it, so a
  crash loses at most the event being written. ``read_jsonl`` checks every line; a bad
  line names ``file:line`` and the field. A file whose last line is cut (no newline, or
  not JSON) yields every event before it, then reports the cut (``TraceCut``).
- Parquet: ``arrow_schema()`` columns, the header as JSON in the key-value metadata under
  ``sbconform-trace`` (``parquet_metadata``: every Parquet trace the tool writes, ``generate``'s
  too), row groups of ``ROW_GROUP`` rows, page checksums (a damaged data page is an error, not
  garbage). Only valid once closed. ``parquet_header`` is the one reader of that metadata.

pyarrow is imported only when a Parquet function runs: the JSON Lines half needs nothing
but the standard library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from .schema import (FIELD_NAMES, META_KEY, OLD_META_KEY, OPERATIONS, PARQUET_OPTIONS, PHASES, REQUIRED, VERSION, Event,
                     TraceFormatError, check_event, header, loads, parquet_metadata)
from .schema import check_header as _check_header

JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
#: the longest line a JSON Lines trace may hold (an event's application properties are within
#: Service Bus's 64 KB header, its body is measured, not kept): longer is not a trace event
MAX_LINE = 16 * 1024 * 1024


def bounded_lines(f: Any, path: str, first: int = 1) -> Iterator[bytes]:
    """The lines of a binary file (numbered from ``first``), each at most ``MAX_LINE`` bytes: a
    longer one is a TraceFormatError naming ``path:line``, found without reading it whole."""
    number = first - 1
    while True:
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE:
            raise TraceFormatError(f"{path}:{number}: a line longer than {MAX_LINE:,} bytes: not a trace event")
        yield raw


#: rows per Parquet row group (the format allows any; readers should expect 64k-1M)
ROW_GROUP = 262_144


class TraceCut(TraceFormatError):
    """A JSON Lines trace that ends in the middle of a line (the writer stopped while
    writing it). Raised, or handed to ``on_cut``, only after every event before the cut
    has been yielded. ``path``, ``line`` (1-based) and ``events`` (how many were read)."""

    def __init__(self, path: str, line: int, events: int, detail: str) -> None:
        super().__init__(f"{path}:{line}: trace cut mid-line ({detail}); the {events} event(s) before it were read")
        self.path = path
        self.line = line
        self.events = events


def _as_row(event: Mapping[str, Any] | Event) -> dict[str, Any]:
    return event.as_dict() if isinstance(event, Event) else dict(event)


# ------------------------------------------------------------------ JSON Lines


class JsonlWriter:
    """Append events to a JSON Lines trace. A new (or empty) file gets the header line
    first; an existing trace is appended to if its header names the same trace id.

    Every event is one line written with a single ``os.write`` on a file opened for
    appending, so it reaches the file whole and at once (nothing is buffered in the
    process). Null fields are left out of the line. ``validate`` checks each event first
    (``check_event``): a bad event is refused, the file stays well formed.
    """

    def __init__(self, path: str | os.PathLike, trace: str, validate: bool = True, **meta: Any) -> None:
        self.path = Path(path)
        self.trace = trace
        self.validate = validate
        self.events = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size == 0:
            self._write_line(header(trace, **meta))
        else:
            with open(self.path, "rb") as existing:
                first = existing.readline()
            try:
                found = _check_header(loads(first, ""), f"{self.path}:1")
            except ValueError as error:
                os.close(self._fd)
                self._fd = None
                raise TraceFormatError(f"{self.path}:1: cannot append: {error}") from None
            if found["trace"] != trace:
                os.close(self._fd)
                self._fd = None
                raise TraceFormatError(f"{self.path}:1: cannot append trace {trace!r} to trace {found['trace']!r}")

    def _write_line(self, obj: Mapping[str, Any]) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: writer is closed")
        data = (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:  # a regular file takes it all at once; loop only on a short write
            view = view[os.write(self._fd, view):]

    def write(self, event: Mapping[str, Any] | Event) -> None:
        row = _as_row(event)
        if self.validate:
            row = check_event(row, f"{self.path}: event {self.events}")
            if row["trace"] != self.trace:
                raise TraceFormatError(f"{self.path}: event {self.events}: field 'trace' is {row['trace']!r}, the file's trace is {self.trace!r}")
        self._write_line({k: v for k, v in row.items() if v is not None})
        self.events += 1

    def write_all(self, events: Iterable[Mapping[str, Any] | Event]) -> None:
        for event in events:
            self.write(event)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def jsonl_header(path: str | os.PathLike) -> dict[str, Any]:
    """The header line of a JSON Lines trace, checked."""
    with open(path, "rb") as f:
        first = f.readline()
    if not first:
        raise TraceFormatError(f"{path}:1: empty file, no header line")
    try:
        return _check_header(loads(first, ""), f"{path}:1")
    except ValueError as error:
        raise TraceFormatError(f"{path}:1: header line is not JSON ({error})") from None


def read_jsonl(
    path: str | os.PathLike,
    on_cut: Callable[[TraceCut], None] | None = None,
    check_order: bool = True,
) -> Iterator[dict[str, Any]]:
    """Every event of a JSON Lines trace, checked, in file order.

    A bad line raises ``TraceFormatError`` naming ``file:line`` and the field. A last line
    that is cut (no final newline, or not JSON) ends the iteration with ``TraceCut`` once
    everything before it is yielded; pass ``on_cut`` to be handed the cut instead (the
    iteration then just ends). ``check_order``: ``pos`` must increase line by line and
    every event must carry the header's trace id.
    """
    path_s = str(path)
    with open(path, "rb") as f:
        first = next(bounded_lines(f, path_s), b"")
        if not first:
            raise TraceFormatError(f"{path_s}:1: empty file, no header line")
        if not first.endswith(b"\n"):
            cut = TraceCut(path_s, 1, 0, "the header line has no newline")
            if on_cut is None:
                raise cut
            on_cut(cut)
            return
        try:
            head = _check_header(loads(first, ""), f"{path_s}:1")
        except ValueError as error:
            raise TraceFormatError(f"{path_s}:1: header line is not JSON ({error})") from None
        trace = head["trace"]
        last_pos = -1
        count = 0
        lineno = 1
        pending: bytes | None = None  # a line read but not yet known not to be the last
        for raw in bounded_lines(f, path_s, 2):
            lineno += 1
            if not raw.endswith(b"\n"):
                pending = raw
                break
            if not raw.strip():
                continue
            where = f"{path_s}:{lineno}"
            try:
                obj = loads(raw, where)
            except TraceFormatError:
                raise
            except ValueError as error:
                if f.read().strip():  # more follows: a bad line, not a cut
                    raise TraceFormatError(f"{where}: not a JSON object ({error})") from None
                pending = raw
                break
            if not isinstance(obj, dict):
                raise TraceFormatError(f"{where}: not a JSON object (a {type(obj).__name__})")
            event = check_event(obj, where)
            if check_order:
                if event["trace"] != trace:
                    raise TraceFormatError(f"{where}: field 'trace' is {event['trace']!r}, the header's trace is {trace!r}")
                if event["pos"] <= last_pos:
                    raise TraceFormatError(f"{where}: field 'pos' is {event['pos']}, not after the previous event's {last_pos}")
                last_pos = event["pos"]
            count += 1
            yield event
        if pending is None:
            return
        try:
            loads(pending, "")
            detail = "the last line has no newline"
        except ValueError as error:  # a TraceFormatError too (nested too deeply)
            detail = f"the last line is incomplete JSON: {error}"
        cut = TraceCut(path_s, lineno, count, detail)
        if on_cut is None:
            raise cut
        on_cut(cut)


# --------------------------------------------------------------------- Parquet


def _columns_from_rows(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {name: [row.get(name) for row in rows] for name in FIELD_NAMES}


class ParquetWriter:
    """Write events to a Parquet trace (pyarrow): ``arrow_schema()`` columns, the header
    in the file's key-value metadata, a row group every ``row_group`` rows. The file is
    complete only once ``close``d (use JSON Lines to record a run that may crash)."""

    def __init__(self, path: str | os.PathLike, trace: str, row_group: int = ROW_GROUP, validate: bool = True, **meta: Any) -> None:
        import pyarrow.parquet as pq

        from .schema import arrow_schema

        self.path = Path(path)
        self.trace = trace
        self.row_group = row_group
        self.validate = validate
        self.events = 0
        self.schema = arrow_schema().with_metadata(parquet_metadata(trace, **meta))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(str(self.path), self.schema, **PARQUET_OPTIONS)
        self._rows: list[dict[str, Any]] = []

    def write(self, event: Mapping[str, Any] | Event) -> None:
        row = _as_row(event)
        if self.validate:
            row = check_event(row, f"{self.path}: event {self.events}")
            if row["trace"] != self.trace:
                raise TraceFormatError(f"{self.path}: event {self.events}: field 'trace' is {row['trace']!r}, the file's trace is {self.trace!r}")
        self._rows.append(row)
        self.events += 1
        if len(self._rows) >= self.row_group:
            self._flush_rows()

    def write_all(self, events: Iterable[Mapping[str, Any] | Event]) -> None:
        for event in events:
            self.write(event)

    def write_batch(self, batch: Any) -> None:
        """Write a ``pyarrow.RecordBatch`` or ``Table`` with the trace's columns as they are
        (fast path for generators: checked as ``read_parquet`` checks, not row by row)."""
        import pyarrow as pa

        self._flush_rows()
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        table = table.select(list(FIELD_NAMES)).cast(self.schema)
        _check_batch(table, f"{self.path}", self.events)
        self._writer.write_table(table, row_group_size=self.row_group)
        self.events += table.num_rows

    def _flush_rows(self) -> None:
        if not self._rows:
            return
        import pyarrow as pa

        table = pa.Table.from_pydict(_columns_from_rows(self._rows), schema=self.schema)
        self._writer.write_table(table, row_group_size=self.row_group)
        self._rows = []

    def close(self) -> None:
        if self._writer is not None:
            self._flush_rows()
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "ParquetWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parquet_header(path: str | os.PathLike) -> dict[str, Any]:
    """The header stored in a Parquet trace's metadata (``META_KEY``, or ``OLD_META_KEY`` in
    files of an older ``generate``), checked."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(str(path))
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError...
        raise TraceFormatError(f"{path}: not a readable Parquet file ({_first_line(error)})") from None
    metadata = schema.metadata or {}
    key = META_KEY if META_KEY in metadata else OLD_META_KEY
    raw = metadata.get(key)
    if raw is None:
        raise TraceFormatError(f"{path}: Parquet metadata has no {META_KEY.decode()!r} key (not a sbconform trace)")
    try:
        return _check_header(loads(raw, ""), f"{path}: metadata")
    except ValueError as error:
        raise TraceFormatError(f"{path}: metadata {key.decode()!r} is not JSON ({error})") from None


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(error).__name__


def parquet_file(path: Any, **options: Any):
    """A ``pyarrow.parquet.ParquetFile`` that verifies page checksums where the file has them."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, page_checksum_verification=True, **options)


def corrupt_parquet_batches(batches: Iterator[Any], where: str) -> Iterator[Any]:
    """The batches of a Parquet file, a failure to decode one (a damaged data page: a bad
    checksum, undecodable compression or encoding) raised as one ``TraceFormatError`` naming
    the file."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as error:  # pyarrow: OSError, ArrowInvalid...
            raise TraceFormatError(f"{where}: corrupt Parquet data, the file is damaged ({_first_line(error)})") from None
        yield batch


def _check_schema(schema: Any, where: str) -> None:
    from .schema import arrow_schema

    expected = arrow_schema()
    names = set(schema.names)
    for field in expected:
        if field.name not in names:
            raise TraceFormatError(f"{where}: column {field.name!r} is missing")
        found = schema.field(field.name).type
        if found != field.type:
            raise TraceFormatError(f"{where}: column {field.name!r} is {found}, expected {field.type}")
    extra = names - set(expected.names)
    if extra:
        raise TraceFormatError(f"{where}: unknown column(s) {sorted(extra)}")


def check_trace_ids(file: Any, where: str) -> None:
    """Rows of another trace than the header's (two recordings in one file): TraceFormatError.
    Told by each row group's statistics; one whose statistics differ (or are cut short, as some
    writers cut long strings) has its ``trace`` column read to be sure."""
    schema = file.schema_arrow
    metadata = schema.metadata or {}
    raw = metadata.get(META_KEY) or metadata.get(OLD_META_KEY)
    if raw is None or "trace" not in schema.names:
        return
    try:
        trace = json.loads(raw).get("trace")
    except (ValueError, AttributeError):  # said where the header is read (parquet_header)
        return
    column = schema.get_field_index("trace")
    for group in range(file.metadata.num_row_groups):
        stats = file.metadata.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max or stats.min == trace == stats.max:
            continue
        others = sorted(set(file.read_row_group(group, columns=["trace"]).column(0).to_pylist()) - {trace, None})
        if others:
            raise TraceFormatError(f"{where}: field 'trace' holds {others[0]!r}, the header's trace is {trace!r}: "
                                   f"events of two traces in one file")


def _check_batch(batch: Any, where: str, first_row: int) -> None:
    """Vectorised ``check_event`` for a batch whose schema is right: required fields set,
    phase and op in the vocabulary, args/result JSON objects. Names the first bad row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def bad(mask: Any, field: str, why: str) -> None:
        index = pc.index(mask, True).as_py()
        if index >= 0:
            raise TraceFormatError(f"{where}: row {first_row + index}: field {field!r} {why}")

    for name in REQUIRED:
        column = batch.column(name)
        if column.null_count:
            bad(pc.is_null(column), name, "is required")
    bad(pc.invert(pc.is_in(batch.column("phase"), value_set=pa.array(PHASES))), "phase",
        f"is not one of {', '.join(PHASES)}")
    bad(pc.invert(pc.is_in(batch.column("op"), value_set=pa.array(list(OPERATIONS)))), "op",
        f"is not an operation of format version {VERSION}")
    for name in ("args", "result"):
        column = batch.column(name)
        if column.null_count == len(column):
            continue
        starts = pc.starts_with(pc.utf8_trim_whitespace(column), "{")
        bad(pc.invert(pc.fill_null(starts, True)), name, "is not a JSON object")


def read_parquet(path: str | os.PathLike, batch_size: int = 65_536, columns: list[str] | None = None) -> Iterator[Any]:
    """The ``pyarrow.RecordBatch``es of a Parquet trace, checked (schema, header, required
    fields, vocabulary; errors name the file, row and field). ``columns`` reads a subset
    (the checks then cover those columns)."""
    where = str(path)
    parquet_header(path)
    try:
        file = parquet_file(where)
    except Exception as error:
        raise TraceFormatError(f"{where}: not a readable Parquet file ({_first_line(error)})") from None
    _check_schema(file.schema_arrow, where)
    check_trace_ids(file, where)
    row = 0
    for batch in corrupt_parquet_batches(file.iter_batches(batch_size=batch_size, columns=columns), where):
        if columns is None:
            _check_batch(batch, where, row)
        row += batch.num_rows
        yield batch


def read_parquet_events(path: str | os.PathLike, batch_size: int = 65_536) -> Iterator[dict[str, Any]]:
    """The events of a Parquet trace as dicts, each checked by ``check_event``."""
    row = 0
    for batch in read_parquet(path, batch_size):
        for event in batch.to_pylist():
            yield check_event(event, f"{path}: row {row}")
            row += 1


# ------------------------------------------------------------------ dispatching


def trace_files(path: str | os.PathLike) -> list[Path]:
    """The trace files a path names: itself, or every JSON Lines / Parquet file under a
    directory (recursively, sorted by path)."""
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in JSONL_SUFFIXES + PARQUET_SUFFIXES)
    if not p.exists():
        raise TraceFormatError(f"{p}: no such file or directory")
    return [p]


def kind_of(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    raise TraceFormatError(f"{path}: unknown trace encoding (suffix {suffix!r}; expected .jsonl or .parquet)")


def read_header(path: str | os.PathLike) -> dict[str, Any]:
    return jsonl_header(path) if kind_of(path) == "jsonl" else parquet_header(path)


def read_events(path: str | os.PathLike, on_cut: Callable[[TraceCut], None] | None = None) -> Iterator[dict[str, Any]]:
    """Every event of a trace file (by suffix) or of every trace file in a directory."""
    for file in trace_files(path):
        if kind_of(file) == "jsonl":
            yield from read_jsonl(file, on_cut=on_cut)
        else:
            yield from read_parquet_events(file)


def open_writer(path: str | os.PathLike, trace: str, **meta: Any) -> JsonlWriter | ParquetWriter:
    return JsonlWriter(path, trace, **meta) if kind_of(path) == "jsonl" else ParquetWriter(path, trace, **meta)


def __getattr__(name: str) -> Any:
    """``convert`` and ``convert_dir`` live in ``conversion`` (importable from here, as before)."""
    if name in ("convert", "convert_dir"):
        from . import conversion

        return getattr(conversion, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "JsonlWriter", "ParquetWriter", "TraceCut", "TraceFormatError", "convert", "convert_dir", "jsonl_header",
    "kind_of", "open_writer", "parquet_file", "parquet_header", "parquet_metadata", "read_events", "read_header",
    "read_jsonl", "read_parquet", "read_parquet_events", "trace_files",
]
