"""Replay traces through the reference model: on Spark, or in one process.

Inputs (``locate``):

- a **by-piece** directory (``_layout.json`` present, as ``sbconform generate`` writes it):
  every event of a piece in one bucket file, in position order. Spark reads each file as
  one split (the job sets ``spark.sql.files.maxPartitionBytes`` and ``openCostInBytes``
  above the largest file) and checks it where it lies: no shuffle.
- anything else: Parquet files or JSON Lines in position order (a recorder's output).
  Spark repartitions the events by piece and sorts each partition by piece and position
  (a shuffle), then checks them.

Either way each Spark task runs ``check_partition`` (``mapInArrow``, in ``spark_replay``) and returns one row
per piece (valid, violation, unknown, error); the driver never collects the trace,
only those rows after they are written (``--out``).

Exit codes: 0 every piece valid, 1 a violation found, 2 could not decide (a piece
unknown, or input the checker cannot read).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from sbreference.paths import parse as parse_path

from .batches import CONFIGURING, DICTIONARY_FIELDS, UNREAD, by_piece, column_values, configuring, going_back, rows_of  # noqa: F401 (importable from here)
from .checker import _HANDLERS, ARGS, DEFAULT_SEARCH_BOUND, ENTITY, OP, PHASE, POS, PieceModel, piece_key
from .io import JSONL_SUFFIXES, PARQUET_SUFFIXES, kind_of, trace_files  # noqa: F401 (PARQUET_SUFFIXES importable)
from .schema import FIELDS, FIELD_NAMES, REQUIRED, TraceFormatError
from .layout import REMOTE_TIMEOUT, _open, _remote_layout, checked_layout  # noqa: F401 (importable from here)
from .search import PieceChecker

# ------------------------------------------------------------------ batches and results

RESULT_FIELDS = (("piece", "string"), ("entity", "string"), ("events", "int64"), ("status", "string"),
                 ("pos", "int64"), ("message_id", "string"), ("seq", "int64"), ("kind", "string"),
                 ("clause", "string"), ("expected", "string"), ("observed", "string"), ("reason", "string"),
                 ("forwards_to", "string"))  # JSON list of the pieces this one auto-forwards to (settle_forwarding)


def result_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64()}
    return pa.schema([pa.field(n, types[t]) for n, t in RESULT_FIELDS])


class Unplaceable(TraceFormatError):
    """Events the checker cannot give to their pieces as they are, whatever it would answer a
    false verdict: refused. Raised without the file (``check_batches`` reads batches);
    ``at(file)`` names it."""

    def __init__(self, text: str, where: str | None = None) -> None:
        self.text = text
        super().__init__((f"{where}: " if where else "") + text)

    def at(self, where: str) -> "Unplaceable":
        return type(self)(self.text, where)


class OutOfOrder(Unplaceable):
    """A piece's events not in increasing ``pos`` (a file sorted otherwise, a ``pos`` twice):
    read in file order, overlapping operations would look sequential and the reverse. Refused,
    not sorted (sorting needs the whole piece in memory; Spark replay of a time-ordered trace
    sorts it)."""

    @classmethod
    def of(cls, piece: str | None, pos: int, before: int) -> "OutOfOrder":
        return cls(f"field 'pos' {pos} comes after {before} in piece {piece!r}: events out of position order "
                   f"(files are read in path order; sort the trace by pos)")


#: the operations the checker applies to its piece's state (all but observations): one without an
#: entity would be applied to a piece of its own and missed by its entity's
NEEDS_ENTITY = frozenset(op for op, handler in _HANDLERS.items() if handler is not PieceModel._nothing)


def _entityless(rows) -> None:
    """An operation the checker applies, without an entity (null, or empty as an anonymous link's):
    its entity's piece never sees it, a false verdict either way (a drop-connection missed: the
    redelivery after it reads as a double delivery; a receive missed: a lost message)."""
    for row in rows:
        if row[OP] in NEEDS_ENTITY:
            raise Unplaceable(f"pos {row[POS]}: a {row[OP]} without an entity: the pieces of its client's links cannot "
                              f"be told (each event of a piece names its entity: trace-replay.md)")


def check_batches(batches: Iterable, search_bound: int = DEFAULT_SEARCH_BOUND,
                  progress: Callable[[int, str | None, int, int], None] | None = None) -> list[dict[str, Any]]:
    """Check every piece found in ``batches`` (rows of each piece in position order; pieces
    may interleave). Returns one result per piece. ``progress(rows, piece, pieces, violations)``
    after each batch: the rows just checked, the piece of the last one, the pieces seen so far
    and those of them with a violation found already.

    Each batch is grouped by piece (``by_piece``) and decoded column-wise, then fed to the
    checkers one run of rows of an entity at a time (``PieceChecker.feed_rows``): one
    lookup per run, not per row."""
    checkers: dict[str, PieceChecker] = {}
    by_entity: dict[str | None, PieceChecker] = {}
    checker: PieceChecker | None = None
    forwards: dict[str, set[str]] = {}  # piece key of an auto-forwarding source -> its destinations' keys
    for batch in batches:
        order, runs, last = by_piece(batch)
        rows = rows_of(batch, order)
        for i in going_back(batch, order):  # none, or a piece's first row after another piece's
            key = piece_key(rows[i][ENTITY])
            if key == piece_key(rows[i - 1][ENTITY]):
                raise OutOfOrder.of(key, rows[i][POS], rows[i - 1][POS])
        for i in configuring(batch, order):
            if rows[i][OP] in CONFIGURING and rows[i][PHASE] == "invoke":
                _note_forwarding(rows[i], forwards)
        for start, end in runs:
            entity = rows[start][ENTITY]
            if not entity:
                _entityless(rows[start:end])
            checker = by_entity.get(entity)
            if checker is None:
                key = piece_key(entity)
                checker = checkers.get(key)
                if checker is None:
                    checker = checkers[key] = PieceChecker(key, search_bound)
                    checker.entity = entity
                if entity is not None and parse_path(entity).subscription is not None and not checker.done:
                    checker.unknown = f"subscriptions are not modelled by the replay checker yet ({entity})"
                    checker.done = True
                by_entity[entity] = checker
            if rows[start][POS] <= checker.last_pos:  # going back from an earlier batch (or file)
                raise OutOfOrder.of(checker.key, rows[start][POS], checker.last_pos)
            checker.last_pos = rows[end - 1][POS]
            checker.feed_rows(rows[start:end] if start or end < len(rows) else rows)
        if progress is not None:
            if rows:
                checker = by_entity[rows[last][ENTITY]]  # the piece of the batch's last event
            progress(batch.num_rows, checker.key if checker is not None else None, len(checkers),
                     sum(1 for c in checkers.values() if c.violation is not None))
    results = [c.finish() for c in checkers.values()]
    for result in results:
        destinations = forwards.get(result["piece"])
        result["forwards_to"] = json.dumps(sorted(destinations)) if destinations else None
    return results


def _note_forwarding(row: tuple, forwards: dict[str, set[str]]) -> None:
    """Where a create-entity's description, or an update-entity's properties, forward to."""
    try:
        args = json.loads(row[ARGS]) if row[ARGS] else {}
    except (TypeError, ValueError):
        return
    if not isinstance(args, dict):
        return
    for fields in (args, args.get("properties")):  # create: the description; update: {"properties": ...}
        for field in ("forward_to", "forward_dead_lettered_messages_to"):
            destination = fields.get(field) if isinstance(fields, dict) else None
            if isinstance(destination, str) and destination:
                forwards.setdefault(piece_key(row[ENTITY]), set()).add(piece_key(destination))


def settle_forwarding(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A piece that receives auto-forwarded messages holds messages no send of its own put there
    (SETTLE-FWD-*): the checker does not model forwarding, so what looks like a violation there
    is no verdict; "unknown", never "violation", where the model cannot decide.

    Run over every piece's result at once (the source's events may lie in another file, bucket
    or Spark task than the destination's): each result names the pieces it forwards to."""
    sources: dict[str, str] = {}
    for result in results:
        for destination in json.loads(result.get("forwards_to") or "[]"):
            sources.setdefault(destination, result["entity"] or result["piece"])
    return [_forwarded_into(result, sources.get(result["piece"])) for result in results]


def _forwarded_into(result: dict[str, Any], source: str | None) -> dict[str, Any]:
    if source is None or result["status"] != "violation":
        return result
    return {**result, "status": "unknown", "clause": None, "kind": None,
            "reason": f"receives messages auto-forwarded from '{source}', which the replay checker does not model "
                      f"(it would have said {result['clause']}: expected {result['expected']}, observed {result['observed']})"}


def error_row(reason: str) -> dict[str, Any]:
    """The result row of input that could not be read (status ``error``)."""
    return {"piece": None, "entity": None, "events": 0, "status": "error", "pos": None, "message_id": None,
            "seq": None, "kind": None, "clause": None, "expected": None, "observed": None, "reason": reason,
            "forwards_to": None}


SPARK_TYPES = {"string": "STRING", "int64": "BIGINT", "int32": "INT"}
TRACE_DDL = ", ".join(f"`{name}` {SPARK_TYPES[kind]}" for name, kind, _ in FIELDS)
RESULT_DDL = ", ".join(f"`{name}` {SPARK_TYPES[kind]}" for name, kind in RESULT_FIELDS)
_REQUIRED = [n for n in FIELD_NAMES if n in REQUIRED]


# ------------------------------------------------------------------ locating input


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def is_jsonl(path: str) -> bool:
    """A JSON Lines file (else Parquet), by its suffix as ``io.kind_of`` tells them apart."""
    return Path(path).suffix in JSONL_SUFFIXES


def locate(paths: list[str]) -> dict[str, Any]:
    """What the paths hold: ``{"layout": "by-piece" | "time", "files": [...], "format":
    "parquet" | "json", "max_file_bytes": n}``. Remote (Hadoop) paths are passed to
    Spark as given and treated as position-ordered unless ``--layout by-piece``."""
    if len(paths) == 1 and _is_remote(paths[0]):
        layout = _remote_layout(paths[0])
        if layout is not None:
            root = paths[0].rstrip("/")
            return {"layout": "by-piece", "files": [f"{root}/{f}" for f in layout["files"]], "format": "parquet",
                    "max_file_bytes": layout.get("max_file_bytes", 0), "buckets": layout.get("buckets")}
    if any(_is_remote(p) for p in paths):
        return {"layout": "time", "files": paths, "format": "json" if all(map(is_jsonl, paths)) else "parquet",
                "max_file_bytes": 0}
    if len(paths) == 1 and Path(paths[0]).is_dir() and (Path(paths[0]) / "_layout.json").exists():
        root = Path(paths[0])
        where = str(root / "_layout.json")
        layout = checked_layout((root / "_layout.json").read_bytes(), where)
        files = [str(root / f) for f in layout["files"]]
        missing = next((f for f in layout["files"] if not (root / f).is_file()), None)
        if missing is not None:
            raise TraceFormatError(f"{where}: lists {missing!r}, which is not in {root}")
        return {"layout": "by-piece", "files": files, "format": "parquet", "max_file_bytes": layout.get("max_file_bytes", 0),
                "buckets": layout.get("buckets")}
    files: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():  # and its subdirectories, as convert and diff read it (trace_files)
            files += [str(f) for f in trace_files(path)]
        elif path.exists():
            kind_of(path)  # a file named as neither encoding is refused here, naming it and its suffix
            files.append(str(path))
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    if not files:
        raise FileNotFoundError(f"{' '.join(paths)}: no .parquet or .jsonl trace files")
    kinds = {"json" if is_jsonl(f) else "parquet" for f in files}
    if len(kinds) > 1:
        raise TraceFormatError("mixed Parquet and JSON Lines inputs: replay one encoding at a time (sbconform convert)")
    return {"layout": "time", "files": files, "format": kinds.pop(), "max_file_bytes": max(Path(f).stat().st_size for f in files)}


# ------------------------------------------------------------------ validation


def validate_batch(batch, where: str) -> None:
    """Required fields present and not null: TraceFormatError naming the file, the row
    (its ``pos`` when known) and the field."""
    import pyarrow.compute as pc

    names = batch.schema.names
    for name in _REQUIRED:
        if name == "trace":
            continue
        if name not in names:
            raise TraceFormatError(f"{where}: field {name!r} is missing (not a sbconform trace?)")
        col = batch.column(names.index(name))
        if col.null_count:
            i = pc.index(pc.is_null(col), True).as_py()
            pos = batch.column(names.index("pos"))[i].as_py() if "pos" in names else None
            raise TraceFormatError(f"{where}: row {i} of this batch (pos {pos}): field {name!r} is required")


# ------------------------------------------------------------------ in one process


def _parquet_batches(path: str, batch_size: int = 65_536) -> Iterator:
    from .io import _check_schema, check_trace_ids, corrupt_parquet_batches, parquet_file

    source = _open(path) if "://" in path else path
    try:
        schema = parquet_file(source).schema_arrow
        present = schema.names
        pf = parquet_file(source, read_dictionary=[n for n in DICTIONARY_FIELDS if n in present])
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise TraceFormatError(f"{path}: not a readable Parquet file ({str(error).splitlines()[0][:200]})") from None
    _check_schema(schema, path)  # columns of the format's types, as read_parquet (convert, diff) checks them
    check_trace_ids(pf, path)  # one trace: from the footer's statistics
    # the trace id (the same on every row) and the error texts are not read by the checker: not decoded
    columns = [n for n in FIELD_NAMES if n in pf.schema_arrow.names and n not in UNREAD]
    for batch in corrupt_parquet_batches(pf.iter_batches(batch_size=batch_size, columns=columns), path):
        validate_batch(batch, path)
        yield batch


def _jsonl_batches(path: str, batch_size: int = 65_536, report: list | None = None) -> Iterator:
    """JSON Lines, the header first; a line cut short at the end is reported and skipped."""
    import pyarrow as pa

    from .io import bounded_lines
    from .schema import arrow_schema, check_event, loads

    schema = arrow_schema()
    rows: list[dict] = []
    last_pos = -1
    trace = None  # the header's
    with open(path, "rb") as f:  # bytes, as read_jsonl reads them: a byte order mark read past, bad UTF-8 named by line
        for number, line in enumerate(bounded_lines(f, path), 1):
            if not line.strip():
                continue
            try:
                obj = loads(line, f"{path}:{number}")  # nested too deeply: TraceFormatError naming the line
            except UnicodeDecodeError as error:
                raise TraceFormatError(f"{path}:{number}: not UTF-8 text ({error})") from None
            except json.JSONDecodeError as error:
                if not line.endswith(b"\n"):
                    if report is not None:
                        report.append(f"{path}:{number}: last line cut short; everything before it was checked")
                    break
                raise TraceFormatError(f"{path}:{number}: not JSON ({error})") from None
            if not isinstance(obj, dict):
                raise TraceFormatError(f"{path}:{number}: not a JSON object (a {type(obj).__name__})")
            if "format" in obj and "pos" not in obj:
                trace = obj.get("trace")
                continue  # the header
            rows.append(check_event(obj, f"{path}:{number}"))
            if rows[-1]["trace"] != trace and trace is not None:  # two recordings in one file: as read_jsonl refuses it
                raise TraceFormatError(f"{path}:{number}: field 'trace' is {rows[-1]['trace']!r}, the header's trace is "
                                       f"{trace!r}")
            if rows[-1]["pos"] <= last_pos:  # checked in file order: out of order is not the trace read_jsonl takes
                raise TraceFormatError(f"{path}:{number}: field 'pos' is {rows[-1]['pos']}, not after the previous "
                                       f"event's {last_pos}")
            last_pos = rows[-1]["pos"]
            if len(rows) >= batch_size:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
                rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def trace_events(where: dict[str, Any]) -> int | None:
    """How many events the located trace holds, without reading them: the row counts in the
    Parquet footers; the lines of a JSON Lines file but its header. None for remote files."""
    total = 0
    for f in where["files"]:
        if _is_remote(f):
            return None
        if is_jsonl(f):
            with open(f, "rb") as handle:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
            total += max(lines - 1, 0)
        else:
            import pyarrow.parquet as pq

            total += pq.ParquetFile(f).metadata.num_rows
    return total


class LocalProgress:
    """What ``replay --local`` has checked: events of the total, files, the current piece."""

    def __init__(self, show: Callable[["LocalProgress"], None], where: dict[str, Any]) -> None:
        self.show = show
        self.files = len(where["files"])
        self.file = 0
        self.events = 0
        self.total = trace_events(where)
        self.piece: str | None = None
        self.pieces = 0  # pieces of the files checked before this one
        self.in_file = 0  # pieces of this file so far (by-piece: each file is checked on its own)
        self.by_file = where["layout"] == "by-piece"
        self.violations = 0  # pieces with a violation, in the files checked before this one
        self.in_file_violations = 0

    def start_file(self, index: int) -> None:
        self.file = index + 1
        if self.by_file:
            self.pieces += self.in_file
            self.violations += self.in_file_violations
            self.in_file = self.in_file_violations = 0

    @property
    def pieces_seen(self) -> int:
        return self.pieces + self.in_file

    def __call__(self, rows: int, piece: str | None, pieces: int, violations: int) -> None:
        self.events += rows
        self.piece, self.in_file, self.in_file_violations = piece, pieces, violations
        self.show(self)

    @property
    def violations_found(self) -> int:
        return self.violations + self.in_file_violations


def replay_local(paths: list[str], search_bound: int = DEFAULT_SEARCH_BOUND, notes: list | None = None,
                 progress: Callable[[LocalProgress], None] | None = None) -> list[dict[str, Any]]:
    """Check the trace in this process; one result per piece. By-piece layouts are
    checked file by file (each file holds whole pieces), so memory stays bounded.
    ``progress`` is shown after every batch of rows (a ``LocalProgress``)."""
    where = locate(paths)
    seen = LocalProgress(progress, where) if progress is not None else None
    size = 16_384 if seen is not None else 65_536  # smaller batches: a livelier line
    results: list[dict[str, Any]] = []
    if where["layout"] == "by-piece":
        for i, f in enumerate(where["files"]):
            if seen is not None:
                seen.start_file(i)
            try:
                results += check_batches(_parquet_batches(f, size), search_bound, seen)
            except Unplaceable as error:
                raise error.at(f) from None
        return settle_forwarding(results)
    reading: list[str] = []  # the file being read

    def batches():
        for i, f in enumerate(where["files"]):
            if seen is not None:
                seen.start_file(i)
            reading[:] = [f]
            yield from (_jsonl_batches(f, size, report=notes) if is_jsonl(f) else _parquet_batches(f, size))
    try:
        return settle_forwarding(check_batches(batches(), search_bound, seen))
    except Unplaceable as error:
        raise error.at(reading[0]) from None


def run_local(paths: list[str], search_bound: int = DEFAULT_SEARCH_BOUND, out: str | None = None,
              progress: Callable[[LocalProgress], None] | None = None) -> dict[str, Any]:
    """``sbconform replay --local``: check in this process and return the summary; with
    ``out``, write ``out/summary.json`` and ``out/pieces.jsonl`` (one row per piece)."""
    started = time.perf_counter()
    notes: list[str] = []
    results = replay_local(paths, search_bound, notes, progress)
    summary = local_summary(results, locate(paths), time.perf_counter() - started)
    summary["notes"] += notes
    if out:
        root = Path(out)
        root.mkdir(parents=True, exist_ok=True)
        (root / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        with open(root / "pieces.jsonl", "w", encoding="utf-8") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    return summary


def summarize(counts: dict[str, tuple[int, int]], where: dict, seconds: float) -> dict[str, Any]:
    events = sum(e or 0 for _, e in counts.values())
    return {"layout": where["layout"], "files": len(where["files"]), "events": events,
            "pieces": sum(n for n, _ in counts.values()),
            "valid": counts.get("valid", (0, 0))[0], "violations": counts.get("violation", (0, 0))[0],
            "unknown": counts.get("unknown", (0, 0))[0], "errors": counts.get("error", (0, 0))[0],
            "seconds": round(seconds, 3), "events_per_s": round(events / seconds) if seconds > 0 else None, "notes": []}


def local_summary(results: list[dict], where: dict, seconds: float) -> dict[str, Any]:
    counts: dict[str, tuple[int, int]] = {}
    for r in results:
        n, e = counts.get(r["status"], (0, 0))
        counts[r["status"]] = (n + 1, e + r["events"])
    summary = summarize(counts, where, seconds)
    summary["problems"] = sorted((r for r in results if r["status"] != "valid"), key=lambda r: (r["status"], r["piece"] or ""))
    return summary


def exit_code(summary: dict[str, Any]) -> int:
    if summary["violations"]:
        return 1
    if summary["unknown"] or summary["errors"]:
        return 2
    return 0


# The Spark half lives in ``spark_replay`` (it imports this module); its names stay
# importable from here, as before, without importing it (nor pyspark) eagerly.
_SPARK_NAMES = ("check_partition", "replay_spark", "spark_session", "_bound_checker", "_file_checker", "_write_results")


def __getattr__(name: str) -> Any:
    if name in _SPARK_NAMES:
        from . import spark_replay

        return getattr(spark_replay, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
