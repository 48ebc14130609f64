"""Replay on Spark: each task checks the pieces of its partition (``check_partition``,
``mapInArrow``) and returns one row per piece; the driver gets those rows, never the events.
The layouts, the readers and the exit codes are described in ``trace.replay``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from sbreference.paths import ENTITY_KEY_PATTERNS

from ..progress import LiveLine, SparkStages
from .checker import DEFAULT_SEARCH_BOUND
from .replay import (_REQUIRED, Unplaceable, RESULT_DDL, TRACE_DDL, UNREAD, _is_remote, _jsonl_batches, _parquet_batches, check_batches,
                     error_row, locate, result_schema, settle_forwarding, summarize, validate_batch)
from .schema import FIELD_NAMES, TraceFormatError

#: JSON Lines on Spark: Spark's reader (permissive) makes a line it cannot parse a row of nulls,
#: its text in ``CORRUPT``. Such a row, or one lacking a required field, is a bad line: ``BAD``
#: holds its file (null on every good line). It is never checked, never dropped: its task
#: returns a ``BAD_LINE`` row and the driver settles it (``_settle_bad_lines``).
CORRUPT = "_corrupt_record"
BAD = "_bad_file"
BAD_LINE = "bad-line"

# ------------------------------------------------------------------ on Spark


def check_partition(batches: Iterable, search_bound: int = DEFAULT_SEARCH_BOUND) -> Iterator:
    """The ``mapInArrow`` function: the pieces of one Spark partition -> one row each (and one
    ``BAD_LINE`` row per input file with lines that are not trace events)."""
    import pyarrow as pa

    bad: dict[str, list] = {}
    try:
        def validated():
            for batch in batches:
                if BAD in batch.schema.names:
                    batch = _set_aside(batch, bad)
                validate_batch(batch, "trace")
                yield batch
        results = check_batches(validated(), search_bound)
    except TraceFormatError as error:
        results = [error_row(str(error))]
    # a bad line's row: kind BAD_LINE, observed its file (Spark's URI), seq how many such lines
    # this task saw in that file, reason the first one's text
    results += [{**error_row(first), "kind": BAD_LINE, "observed": file, "seq": n} for file, (n, first) in bad.items()]
    if results:
        yield pa.RecordBatch.from_pylist(results, schema=result_schema())


def _set_aside(batch, bad: dict[str, list]):
    """The batch without its bad lines (counted in ``bad``: file -> [count, first text]) and
    without the ``BAD`` / ``CORRUPT`` columns."""
    import pyarrow.compute as pc

    names = batch.schema.names
    files = batch.column(names.index(BAD))
    extra = [BAD, CORRUPT]
    if files.null_count < len(files):
        mask = pc.is_valid(files)
        texts = batch.column(names.index(CORRUPT)).filter(mask).to_pylist()
        positions = batch.column(names.index("pos")).filter(mask).to_pylist()
        for file, text, pos in zip(files.filter(mask).to_pylist(), texts, positions):
            seen = bad.setdefault(file, [0, text if text is not None else f"an event (pos {pos}) lacking a required field"])
            seen[0] += 1
        batch = batch.filter(pc.invert(mask))
    return batch.drop_columns([c for c in extra if c in names])


def _parquet_events(spark, files: list[str]):
    """The events of Parquet trace files, read by Spark with page checksums verified (our writers
    write them; a damaged page that still decodes is an error, as in the local reader, never a
    verdict on the broker). Given as a read option: a user's session is not reconfigured."""
    return spark.read.schema(TRACE_DDL).option("parquet.page.verify-checksum.enabled", "true").parquet(*files)


def _json_events(spark, files: list[str]):
    """The events of JSON Lines files, the header lines left out, and ``BAD`` set on every
    line that is not a trace event."""
    from pyspark.sql import functions as F

    df = (spark.read.schema(f"{TRACE_DDL}, `format` STRING, `{CORRUPT}` STRING")
          .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT).json(files))
    header = F.col("format").isNotNull() & F.col("pos").isNull() & F.col(CORRUPT).isNull()  # as _jsonl_batches
    bad = F.col(CORRUPT).isNotNull()
    for name in _REQUIRED:
        bad = bad | F.col(name).isNull()
    return df.where(~header).withColumn(BAD, F.when(bad, F.input_file_name()))


def _settle_bad_lines(rows: list[dict], files: list[str], notes: list[str]) -> list[dict]:
    """The tasks' ``BAD_LINE`` rows, settled as ``replay --local`` would: a local file is read
    line by line by the local reader, which raises its own ``file:line`` error; a line cut at
    the very end (the only bad line of its file) is a note, as in the local replay. Anything
    else (a remote file, a line Spark refuses that the local reader takes) is an error row."""
    bad = [r for r in rows if r["kind"] == BAD_LINE]
    if not bad:
        return rows
    kept = [r for r in rows if r["kind"] != BAD_LINE]
    by_file: dict[str, list[dict]] = {}
    for r in bad:
        by_file.setdefault(r["observed"], []).append(r)
    for uri, found in sorted(by_file.items()):
        count = sum(r["seq"] for r in found)
        path = _local_path(uri, files)
        if path is not None:
            cut: list[str] = []
            for _ in _jsonl_batches(path, report=cut):  # a bad line raises TraceFormatError here
                pass
            if cut and count == 1:
                notes += cut
                continue
        kept.append(error_row(f"{path or uri}: {count} line(s) Spark's JSON reader could not read as trace events "
                              f"(the first: {str(found[0]['reason'])[:120]!r})"))
    return kept


def _local_path(uri: str, files: list[str]) -> str | None:
    """The input file (as given) that Spark's ``input_file_name()`` URI names; None if remote."""
    from urllib.parse import unquote, urlparse

    if _is_remote(uri):
        return None
    target = Path(unquote(urlparse(uri).path) if uri.startswith("file:") else uri).resolve()
    for f in files:
        if not _is_remote(f) and Path(f.removeprefix("file://")).resolve() == target:
            return f
    return None


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
                except Unplaceable as error:
                    results = [error_row(str(error.at(path)))]
                except TraceFormatError as error:
                    results = [error_row(str(error))]
                if results:
                    yield pa.RecordBatch.from_pylist(results, schema=result_schema())
    return run


def _largest_first(files: list[str]) -> list[str]:
    """Bucket files, largest first: Spark starts tasks in partition order as cores come free,
    so the small files fill in at the end and the cores finish together (a large file
    started last would leave the other cores idle while it runs). Remote files keep their
    order (their sizes are not looked up)."""
    if any(_is_remote(f) for f in files):
        return files
    return sorted(files, key=lambda f: -Path(f.removeprefix("file://")).stat().st_size)


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
                 spark=None, layout: str | None = None, partitions: int | None = None, reader: str = "arrow",
                 progress: LiveLine | None = None) -> dict[str, Any]:
    """Run the replay job; writes ``out/pieces.parquet`` (one row per piece; a directory
    ``out/pieces`` written by Spark when ``out`` is remote) and returns
    the summary (also ``out/summary.json`` and ``out/violations.jsonl`` when ``out`` is
    local). With a live ``progress`` line: the partitions checked of each running stage."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    where = locate(paths)
    if layout is not None:
        where["layout"] = layout
    own = spark is None
    if own:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:  # this process's session (a notebook's, a test run's): used as it is, left running
            spark, own = active, False
        else:
            spark = spark_session(master)
    try:
        if where["layout"] == "by-piece" and reader == "arrow":  # tasks read their bucket files themselves
            files = _largest_first(where["files"])
            names = spark.createDataFrame(spark.sparkContext.parallelize([(f,) for f in files], len(files)), "file STRING")
            result = names.mapInArrow(_file_checker(search_bound), RESULT_DDL)
        else:
            if where["layout"] == "by-piece":
                split = str(max(128 * 1024 * 1024, int(where["max_file_bytes"]) + 1))
                spark.conf.set("spark.sql.files.maxPartitionBytes", split)
                spark.conf.set("spark.sql.files.openCostInBytes", split)  # one file per task, never split
                df = _parquet_events(spark, where["files"])
            else:
                if where["format"] == "json":
                    df = _json_events(spark, where["files"])
                else:
                    df = _parquet_events(spark, where["files"])
                piece = F.col("entity")
                for pattern in ENTITY_KEY_PATTERNS:  # sbreference.paths.entity_key, in Spark SQL
                    piece = F.regexp_replace(piece, pattern, "")
                piece = F.lower(piece)
                n = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
                df = df.withColumn("_piece", F.coalesce(piece, F.lit(""))).repartition(n, "_piece").sortWithinPartitions("_piece", "pos")
            # the trace id (the same on every row) and the error texts are not read: not shipped
            df = df.select(*[c for c in FIELD_NAMES if c not in UNREAD], *([BAD, CORRUPT] if BAD in df.columns else []))
            result = df.mapInArrow(_bound_checker(search_bound), RESULT_DDL)
        live = progress if progress is not None else LiveLine(live=False)
        with SparkStages(spark.sparkContext.statusTracker(), live):
            if _is_remote(out):  # written where the cluster writes, then read back (one row per piece)
                result.write.mode("overwrite").parquet(f"{out}/pieces")
                rows = [r.asDict() for r in spark.read.parquet(f"{out}/pieces").collect()]
            else:
                # One row per piece comes back to the driver (never an event): far fewer rows
                # than events, and one Spark job instead of a write and a read
                rows = [r.asDict() for r in result.collect()]
        notes: list[str] = []
        rows = settle_forwarding(_settle_bad_lines(rows, where["files"], notes))  # across tasks: on the driver
        if not _is_remote(out):
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
    summary["notes"] += notes
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
