"""Replay traces through the reference model: on Spark, or in one process.

Inputs (``locate``):

- a **by-piece** directory (``_layout.json`` present, as ``sbconform generate`` writes it):
  every event of a piece in one bucket file, in position order. Spark reads each file as
  one split (the job sets ``spark.sql.files.maxPartitionBytes`` and ``openCostInBytes``
  above the largest file) and checks it where it lies: no shuffle.
- anything else: Parquet files or JSON Lines in position order (a recorder's output).
  Spark repartitions the events by piece and sorts each partition by piece and position
  (a shuffle), then checks them.

Either way each Spark task runs ``check_partition`` (``mapInArrow``) and returns one row
per piece (valid, violation, unknown, error); the driver never collects the trace,
only those rows after they are written (``--out``).

Exit codes: 0 every piece valid, 1 a violation found, 2 could not decide (a piece
unknown, or input the checker cannot read).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from reference.paths import ENTITY_KEY_PATTERNS, parse as parse_path

from .checker import ARGS, DEFAULT_SEARCH_BOUND, ENTITY, OP, PHASE, piece_key
from .schema import FIELDS, FIELD_NAMES, REQUIRED, TraceFormatError
from .search import PieceChecker

# ------------------------------------------------------------------ batches and results

RESULT_FIELDS = (("piece", "string"), ("entity", "string"), ("events", "int64"), ("status", "string"),
                 ("pos", "int64"), ("message_id", "string"), ("seq", "int64"), ("kind", "string"),
                 ("clause", "string"), ("expected", "string"), ("observed", "string"), ("reason", "string"))


def result_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64()}
    return pa.schema([pa.field(n, types[t]) for n, t in RESULT_FIELDS])


def rows_of(batch) -> Iterator[tuple]:
    """Row tuples (FIELD_NAMES order) of an Arrow record batch, column-wise conversion."""
    names = batch.schema.names
    n = batch.num_rows
    cols = []
    for name in FIELD_NAMES:
        if name in names and name not in ("trace",):
            cols.append(batch.column(names.index(name)).to_pylist())
        else:
            cols.append([None] * n)
    return zip(*cols)


def check_batches(batches: Iterable, search_bound: int = DEFAULT_SEARCH_BOUND) -> list[dict[str, Any]]:
    """Check every piece found in ``batches`` (rows of each piece in position order; pieces
    may interleave). Returns one result per piece."""
    checkers: dict[str, PieceChecker] = {}
    by_entity: dict[str | None, PieceChecker] = {}
    last_entity: Any = object()  # rows of one entity come in runs: look the checker up once per run
    checker: PieceChecker | None = None
    forwarded: dict[str, str] = {}  # piece key of an auto-forwarding destination -> the source
    for batch in batches:
        for row in rows_of(batch):
            if row[OP] == "create-entity" and row[PHASE] == "invoke":
                _note_forwarding(row, forwarded)
            entity = row[ENTITY]
            if entity is last_entity or entity == last_entity:
                checker.feed(row)  # type: ignore[union-attr]
                continue
            last_entity = entity
            checker = by_entity.get(entity)
            if checker is None:
                entity = row[ENTITY]
                key = piece_key(entity)
                checker = checkers.get(key)
                if checker is None:
                    checker = checkers[key] = PieceChecker(key, search_bound)
                    checker.entity = entity
                if entity is not None and parse_path(entity).subscription is not None and not checker.done:
                    checker.unknown = f"subscriptions are not modelled by the replay checker yet ({entity})"
                    checker.done = True
                by_entity[entity] = checker
            checker.feed(row)
    return [_forwarded_into(c.finish(), forwarded) for c in checkers.values()]


def _note_forwarding(row: tuple, forwarded: dict[str, str]) -> None:
    try:
        args = json.loads(row[ARGS]) if row[ARGS] else {}
    except (TypeError, ValueError):
        return
    for field in ("forward_to", "forward_dead_lettered_messages_to"):
        destination = args.get(field) if isinstance(args, dict) else None
        if isinstance(destination, str) and destination:
            forwarded[piece_key(destination)] = str(row[ENTITY])


def _forwarded_into(result: dict[str, Any], forwarded: dict[str, str]) -> dict[str, Any]:
    """A piece that receives auto-forwarded messages holds messages no send of its own put there
    (SETTLE-FWD-*): the checker does not model forwarding, so what looks like a violation there
    is no verdict; "unknown", never "violation", where the model cannot decide."""
    source = forwarded.get(result["piece"])
    if source is None or result["status"] != "violation":
        return result
    return {**result, "status": "unknown", "clause": None, "kind": None,
            "reason": f"receives messages auto-forwarded from '{source}', which the replay checker does not model "
                      f"(it would have said {result['clause']}: expected {result['expected']}, observed {result['observed']})"}


def error_row(reason: str) -> dict[str, Any]:
    """The result row of input that could not be read (status ``error``)."""
    return {"piece": None, "entity": None, "events": 0, "status": "error", "pos": None, "message_id": None,
            "seq": None, "kind": None, "clause": None, "expected": None, "observed": None, "reason": reason}


SPARK_TYPES = {"string": "STRING", "int64": "BIGINT", "int32": "INT"}
TRACE_DDL = ", ".join(f"`{name}` {SPARK_TYPES[kind]}" for name, kind, _ in FIELDS)
RESULT_DDL = ", ".join(f"`{name}` {SPARK_TYPES[kind]}" for name, kind in RESULT_FIELDS)
_REQUIRED = [n for n in FIELD_NAMES if n in REQUIRED]


# ------------------------------------------------------------------ locating input


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _open(path: str):
    """A readable file for a local path or any URI pyarrow's file systems know (hdfs://,
    s3://, gs://, ...)."""
    if "://" not in path:
        return open(path, "rb")
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(path)
    return filesystem.open_input_file(inner)


def _remote_layout(root: str) -> dict | None:
    try:
        with _open(root.rstrip("/") + "/_layout.json") as f:
            return json.loads(f.read())
    except Exception:  # no layout file, or a file system pyarrow cannot open: Spark reads it
        return None


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
        return {"layout": "time", "files": paths, "format": "json" if all(p.endswith(".jsonl") for p in paths) else "parquet",
                "max_file_bytes": 0}
    if len(paths) == 1 and Path(paths[0]).is_dir() and (Path(paths[0]) / "_layout.json").exists():
        root = Path(paths[0])
        layout = json.loads((root / "_layout.json").read_text())
        files = [str(root / f) for f in layout["files"]]
        return {"layout": "by-piece", "files": files, "format": "parquet", "max_file_bytes": layout.get("max_file_bytes", 0),
                "buckets": layout.get("buckets")}
    files: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files += sorted(str(f) for f in path.glob("*.parquet")) + sorted(str(f) for f in path.glob("*.jsonl"))
        elif path.exists():
            files.append(str(path))
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    if not files:
        raise FileNotFoundError(f"{' '.join(paths)}: no .parquet or .jsonl trace files")
    kinds = {"json" if f.endswith(".jsonl") else "parquet" for f in files}
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
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(_open(path) if "://" in path else path)
    # the trace id (the same on every row) is neither checked nor read by the checker: not decoded
    columns = [n for n in FIELD_NAMES if n in pf.schema_arrow.names and n != "trace"]
    for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
        validate_batch(batch, path)
        yield batch


def _jsonl_batches(path: str, batch_size: int = 65_536, report: list | None = None) -> Iterator:
    """JSON Lines, the header first; a line cut short at the end is reported and skipped."""
    import pyarrow as pa

    from .schema import arrow_schema, check_event

    schema = arrow_schema()
    rows: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                if not line.endswith("\n"):
                    if report is not None:
                        report.append(f"{path}:{number}: last line cut short; everything before it was checked")
                    break
                raise TraceFormatError(f"{path}:{number}: not JSON ({error})") from None
            if "format" in obj and "pos" not in obj:
                continue  # the header
            rows.append(check_event(obj, f"{path}:{number}"))
            if len(rows) >= batch_size:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
                rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def replay_local(paths: list[str], search_bound: int = DEFAULT_SEARCH_BOUND, notes: list | None = None) -> list[dict[str, Any]]:
    """Check the trace in this process; one result per piece. By-piece layouts are
    checked file by file (each file holds whole pieces), so memory stays bounded."""
    where = locate(paths)
    results: list[dict[str, Any]] = []
    if where["layout"] == "by-piece":
        for f in where["files"]:
            results += check_batches(_parquet_batches(f), search_bound)
        return results

    def batches():
        for f in where["files"]:
            yield from (_jsonl_batches(f, report=notes) if f.endswith(".jsonl") else _parquet_batches(f))
    return check_batches(batches(), search_bound)


def run_local(paths: list[str], search_bound: int = DEFAULT_SEARCH_BOUND, out: str | None = None) -> dict[str, Any]:
    """``sbconform replay --local``: check in this process and return the summary; with
    ``out``, write ``out/summary.json`` and ``out/pieces.jsonl`` (one row per piece)."""
    started = time.perf_counter()
    notes: list[str] = []
    results = replay_local(paths, search_bound, notes)
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


# ------------------------------------------------------------------ on Spark


def check_partition(batches: Iterable, search_bound: int = DEFAULT_SEARCH_BOUND) -> Iterator:
    """The ``mapInArrow`` function: the pieces of one Spark partition -> one row each."""
    import pyarrow as pa

    try:
        def validated():
            for batch in batches:
                validate_batch(batch, "trace")
                yield batch
        results = check_batches(validated(), search_bound)
    except TraceFormatError as error:
        results = [error_row(str(error))]
    if results:
        yield pa.RecordBatch.from_pylist(results, schema=result_schema())


def _bound_checker(search_bound: int):
    def run(batches):
        return check_partition(batches, search_bound)
    return run


def _file_checker(search_bound: int):
    """For the by-piece layout: each task gets bucket file names and reads them itself
    with pyarrow (every piece lies whole in one file), so no event passes through the
    JVM at all."""
    def run(batches):
        import pyarrow as pa

        for batch in batches:
            for path in batch.column(0).to_pylist():
                try:
                    results = check_batches(_parquet_batches(path), search_bound)
                except TraceFormatError as error:
                    results = [error_row(str(error))]
                if results:
                    yield pa.RecordBatch.from_pylist(results, schema=result_schema())
    return run


def spark_session(master: str | None, app: str = "sbconform-replay", extra: dict | None = None):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        "spark.sql.shuffle.partitions": "8",
        "spark.python.worker.reuse": "true",
        **(extra or {}),
    }
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def replay_spark(paths: list[str], out: str, master: str | None = "local[*]", search_bound: int = DEFAULT_SEARCH_BOUND,
                 spark=None, layout: str | None = None, partitions: int | None = None, reader: str = "arrow") -> dict[str, Any]:
    """Run the replay job; writes ``out/pieces.parquet`` (one row per piece; a directory
    ``out/pieces`` written by Spark when ``out`` is remote) and returns
    the summary (also ``out/summary.json`` and ``out/violations.jsonl`` when ``out`` is
    local)."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    where = locate(paths)
    if layout is not None:
        where["layout"] = layout
    own = spark is None
    spark = spark or spark_session(master)
    try:
        if where["layout"] == "by-piece" and reader == "arrow":  # tasks read their bucket files themselves
            files = where["files"]
            names = spark.createDataFrame(spark.sparkContext.parallelize([(f,) for f in files], len(files)), "file STRING")
            result = names.mapInArrow(_file_checker(search_bound), RESULT_DDL)
        else:
            if where["layout"] == "by-piece":
                split = str(max(128 * 1024 * 1024, int(where["max_file_bytes"]) + 1))
                spark.conf.set("spark.sql.files.maxPartitionBytes", split)
                spark.conf.set("spark.sql.files.openCostInBytes", split)  # one file per task, never split
                df = spark.read.schema(TRACE_DDL).parquet(*where["files"])
            else:
                if where["format"] == "json":
                    df = spark.read.schema(TRACE_DDL).json(where["files"]).where(F.col("pos").isNotNull())
                else:
                    df = spark.read.schema(TRACE_DDL).parquet(*where["files"])
                piece = F.col("entity")
                for pattern in ENTITY_KEY_PATTERNS:  # reference.paths.entity_key, in Spark SQL
                    piece = F.regexp_replace(piece, pattern, "")
                piece = F.lower(piece)
                n = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
                df = df.withColumn("_piece", F.coalesce(piece, F.lit(""))).repartition(n, "_piece").sortWithinPartitions("_piece", "pos")
            df = df.select(*[c for c in FIELD_NAMES if c != "trace"])  # the trace id is the same on every row: not shipped
            result = df.mapInArrow(_bound_checker(search_bound), RESULT_DDL)
        if _is_remote(out):  # written where the cluster writes, then read back (one row per piece)
            result.write.mode("overwrite").parquet(f"{out}/pieces")
            rows = [r.asDict() for r in spark.read.parquet(f"{out}/pieces").collect()]
        else:
            # One row per piece comes back to the driver (never an event): far fewer rows
            # than events, and one Spark job instead of a write and a read
            rows = [r.asDict() for r in result.collect()]
            _write_results(rows, Path(out))
    finally:
        if own:
            spark.stop()
    counts: dict[str, tuple[int, int]] = {}
    seen: dict[str, int] = {}
    for r in rows:
        n, e = counts.get(r["status"], (0, 0))
        counts[r["status"]] = (n + 1, e + (r["events"] or 0))
        if r["piece"] is not None:
            seen[r["piece"]] = seen.get(r["piece"], 0) + 1
    duplicated = sorted(k for k, v in seen.items() if v > 1)[:5]
    shown = sorted((r for r in rows if r["status"] != "valid"), key=lambda r: (r["status"], r["piece"] or ""))
    summary = summarize(counts, where, time.perf_counter() - started)
    summary["reader"] = ("tasks read bucket files with pyarrow (no shuffle)" if where["layout"] == "by-piece" and reader == "arrow"
                         else "Spark's reader, one bucket file per task (no shuffle)" if where["layout"] == "by-piece"
                         else "Spark's reader, repartitioned by piece (shuffle)")
    if duplicated:
        summary["errors"] = summary.get("errors", 0) + 1
        summary["notes"].append(f"pieces split across tasks (layout not by piece?): {duplicated}")
    summary["problems"] = shown
    if not _is_remote(out):
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        with open(Path(out) / "violations.jsonl", "w", encoding="utf-8") as f:
            for r in shown:
                f.write(json.dumps(r, default=str) + "\n")
    return summary


def _write_results(rows: list[dict], out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=result_schema()), str(out / "pieces.parquet"))


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
