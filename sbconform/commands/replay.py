"""sbconform replay: check traces against the reference model, on Spark (or --local in this process)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from ..progress import LiveLine, count
from .cost import positive


#: the master URLs Spark takes (its "Master URLs" table): anything else makes its JVM exit at start
MASTER = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[[1-9]\d*,[1-9]\d*,[1-9]\d*\]"
                    r"|yarn|(spark|k8s|mesos)://\S+")


def master(text: str) -> str:
    if not MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Spark master URL: local, local[N], local[*], "
                                         f"spark://HOST:PORT, yarn, k8s://URL")
    return text


def print_summary(summary: dict, out: str | None) -> None:
    print(f"{summary['events']} events in {summary['pieces']} pieces ({summary['layout']} layout, {summary['files']} files): "
          f"{summary['valid']} valid, {summary['violations']} with a violation, {summary['unknown']} unknown, "
          f"{summary['errors']} unreadable; {summary['seconds']} s, {summary['events_per_s']} events/s"
          + (f"; {summary['reader']}" if summary.get("reader") else ""))
    for p in summary.get("problems", [])[:50]:
        if p["status"] == "violation":
            print(f"  VIOLATION {p['clause']} {p['kind']} at pos {p['pos']} entity {p['entity']} message {p['message_id']} "
                  f"seq {p['seq']}: expected {p['expected']}; observed {p['observed']}")
        else:
            print(f"  {p['status'].upper()} {p['piece'] or ''}: {p['reason']}")
    for note in summary.get("notes", []):
        print(f"  note: {note}")
    if out:
        print(f"results: {out}")


def preflight(paths: list[str], out: str | None, local: bool = False) -> str | None:
    """One line naming what is wrong with the inputs or the output, else None (local paths only:
    a remote path is Spark's to read)."""
    from ..trace.replay import _is_remote, is_jsonl, locate

    remote = [p for p in paths if _is_remote(p)]
    if remote and local:  # read with open() ("No such file") or a pyarrow file system it may not have
        return f"{remote[0]}: a remote path: --local reads local files; replay it on Spark (without --local), or copy it here"
    if remote and len(paths) > 1:  # Spark would read them as one trace, unchecked (two traces, two encodings)
        other = next(p for p in paths if p != remote[0]) if remote[0] == paths[0] else remote[0]
        return (f"{other}: replay one remote trace at a time, as one path (its directory, or its one file): "
                f"the inputs beside {paths[0]} cannot be checked here to be one trace in one encoding")

    if out and not _is_remote(out):
        target = Path(out)
        if target.exists() and not target.is_dir():
            return f"--out {out}: is a file, not a directory"
        try:  # its folders are made as needed (README's `--out replay/run1` on a fresh clone)
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            return f"--out {out}: cannot create the directory {target.parent}: {error.strerror or error}"
    if any(_is_remote(p) for p in paths):
        return None
    if out and any(Path(p).is_dir() and os.path.realpath(p) == os.path.realpath(out) for p in paths):
        return f"--out {out}: is an input directory: the results (.jsonl among them) would be read as traces next time"
    where = locate(paths)
    if where["layout"] == "by-piece":  # only the bucket files _layout.json lists are read: another would be skipped
        from ..trace.io import trace_files

        listed = {os.path.realpath(f) for f in where["files"]}
        skipped = [str(f) for f in trace_files(paths[0]) if os.path.realpath(f) not in listed]
        if skipped:
            return (f"{skipped[0]}: in a by-piece trace directory (_layout.json) but not one of its bucket files: its "
                    f"events would not be checked; move it out, or replay it on its own")
    for name in where["files"]:
        path = Path(name)
        if path.stat().st_size == 0:
            return f"{name}: empty file: not a trace (no header)"
        if not is_jsonl(name):
            try:
                import pyarrow.parquet as pq

                pq.ParquetFile(name).close()
            except ImportError as error:
                return f"reading Parquet needs pyarrow (pip install 'sbconform[spark]'): {error}"
            except Exception as error:  # pyarrow.ArrowInvalid, OSError
                return f"{name}: not a readable Parquet file ({str(error).splitlines()[0][:200]})"
    return _one_trace(where["files"])


def _one_trace(files: list[str]) -> str | None:
    """The inputs are checked as one trace (pieces by entity): a file named twice would have
    every operation checked twice, and two traces' events interleaved, each found 'violations'."""
    from ..trace.io import read_header

    seen: dict[str, str] = {}
    for name in files:
        real = os.path.realpath(name)
        if real in seen:
            return f"{name}: given twice (also as {seen[real]}): its events would be checked twice"
        seen[real] = name
        read_header(name)  # readable, with its trace id (several traces are checked each on its own)
    return None


def traces_of(paths: list[str]) -> dict[str, list[str]] | None:
    """The inputs' files by trace id, in the order met (certify --trace writes one trace a test, each
    numbered from pos 0 with its own entities: checked as one trace they would be judged together);
    None for inputs that are one trace by construction (remote, by-piece)."""
    from ..trace.io import read_header
    from ..trace.replay import _is_remote, locate

    if any(_is_remote(p) for p in paths):
        return None
    where = locate(paths)
    if where["layout"] == "by-piece":
        return None
    groups: dict[str, list[str]] = {}
    for name in where["files"]:
        groups.setdefault(str(read_header(name).get("trace")), []).append(name)
    return groups


def replay_many(groups: dict[str, list[str]], args: argparse.Namespace, live: LiveLine) -> list[dict]:
    """Each trace checked on its own (its results in ``out/NNN-<trace>/``), one Spark session for all."""
    from ..trace.replay import exit_code, replay_spark, run_local, spark_session

    out = args.out or (None if args.local else "replay-out")
    done: list[dict] = []

    def each(spark=None) -> None:
        for i, (trace, files) in enumerate(groups.items(), 1):
            sub = f"{i:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', trace)[:60]}"
            where = str(Path(out) / sub) if out else None
            if args.local:
                summary = run_local(files, args.search_bound, where)
            else:
                live.show(f"  trace {i}/{len(groups)} ...", force=True)
                summary = replay_spark(files, where, args.master, args.search_bound, spark=spark, layout=args.layout,
                                       reader=args.reader, progress=live)
            verdict = {0: "valid", 1: "violation"}.get(exit_code(summary), "undecided") if summary.get("events") else "undecided"
            done.append({"trace": trace, "files": files, "out": sub, "verdict": verdict, "summary": summary})

    if args.local:
        each()
        return done
    from pyspark.sql import SparkSession

    live.show(f"  starting Spark ({args.master}) ...", force=True)
    with spark_log() as log:
        try:
            active = SparkSession.getActiveSession()  # a notebook's or a test run's: used, left running
            spark = active or spark_session(args.master)
            try:
                each(spark)
            finally:
                if active is None:
                    spark.stop()
        except Exception as error:
            error.spark_log = log  # type: ignore[attr-defined]
            raise
    return done


def many_verdict(done: list[dict], out: str | None) -> int:
    """Each trace's summary, then one line for all: exit 1 if any has a violation, else 2 if any is
    undecided (unknown pieces, unreadable, or no events: an empty trace proves nothing), else 0."""
    for d in done:
        print(f"trace {d['trace']!r} ({len(d['files'])} file{'s' if len(d['files']) > 1 else ''}): {d['verdict']}")
        print_summary(d["summary"], None)
    counts = {v: sum(d["verdict"] == v for d in done) for v in ("valid", "violation", "undecided")}
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "summary.json").write_text(json.dumps(
            {"traces": [{k: d[k] for k in ("trace", "files", "out", "verdict")} for d in done], **counts}, indent=1))
    print(f"{len(done)} traces: {counts['valid']} valid, {counts['violation']} with a violation, "
          f"{counts['undecided']} undecided" + (f"; results: {out}" if out else ""))
    return 1 if counts["violation"] else 2 if counts["undecided"] else 0


def use_this_interpreter() -> None:
    """Spark's Python workers run the interpreter running sbconform (which has pyarrow and
    pandas), unless the user chose one (PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@contextlib.contextmanager
def spark_log():
    """Spark's JVM and workers write their logs (and every failed task's Java stack) to the
    standard error they inherit: point it at a file while Spark starts and runs, so the user
    sees one line, and the file (named in the error) holds the rest. Removed after a success."""
    fd, path = tempfile.mkstemp(prefix="sbconform-spark-", suffix=".log")
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    failed = False
    try:
        yield path
    except BaseException:
        failed = True
        raise
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
        if not failed:
            os.unlink(path)


def unreadable_file(java_error: str) -> str | None:
    """Spark's failure to read a trace file (a Py4JJavaError's text, whose first line names only a
    JVM object) said as the file and the innermost cause; None when the text says no such thing."""
    import re
    from urllib.parse import unquote, urlparse

    path = re.search(r"reading file (\S+?)\.?\s", java_error)
    if path is None:
        return None
    causes = re.findall(r"Caused by: ([\w.$]+): ([^\n]*)", java_error)
    cause = f"{causes[-1][0].rsplit('.', 1)[-1]}: {causes[-1][1].strip()[:300]}" if causes else "unreadable"
    url = urlparse(path.group(1))
    name = unquote(url.path) if url.scheme == "file" else path.group(1)
    return f"{name}: cannot be read ({cause}); damaged, or not a trace written as Parquet?; no verdict"


def run(args: argparse.Namespace) -> int:
    from ..trace.replay import exit_code, replay_spark, run_local
    from ..trace.schema import TraceFormatError

    try:
        problem = preflight(args.paths, args.out, args.local)
    except (TraceFormatError, FileNotFoundError) as error:
        problem = str(error)
    except RecursionError:
        problem = f"{' '.join(args.paths)}: JSON nested too deeply for a trace; no verdict"
    except Exception as error:  # never a traceback: its exit 1 would read as 'a violation found'
        problem = f"cannot read the inputs, no verdict: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
    if problem:
        print(f"sbconform replay: {problem}", file=sys.stderr)
        return 2
    live = LiveLine()  # a live line on a terminal only; the summary below either way
    groups, done = traces_of(args.paths), None
    try:
        try:
            if groups is not None and len(groups) > 1:
                done = replay_many(groups, args, live)
            elif args.local:
                line = _LocalLine(live)
                summary = run_local(args.paths, args.search_bound, args.out, progress=line if live.live else None)
                line.last()
            else:
                use_this_interpreter()
                out = args.out or "replay-out"
                live.show(f"  starting Spark ({args.master}) ...", force=True)  # the JVM takes seconds
                with spark_log() as log:
                    try:
                        summary = replay_spark(args.paths, out, args.master, args.search_bound, layout=args.layout,
                                               reader=args.reader, progress=live)
                    except Exception as error:
                        error.spark_log = log  # type: ignore[attr-defined]
                        raise
        finally:
            live.finish()
    except (TraceFormatError, FileNotFoundError) as error:
        print(f"sbconform replay: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"sbconform replay: Spark replay needs pyspark, pyarrow and pandas (pip install 'sbconform[spark]'; "
              f"or --local): {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sbconform replay: interrupted; no verdict", file=sys.stderr)
        return 130
    except RecursionError:  # json.loads of a line like [[[[...
        print(f"sbconform replay: {' '.join(args.paths)}: a line nests its JSON too deeply for a trace event; "
              f"no verdict", file=sys.stderr)
        return 2
    except Exception as error:  # a crash is never a verdict: 1 means violations found
        lines = [line for line in str(error).splitlines() if line.strip()]
        log = getattr(error, "spark_log", None)
        said = unreadable_file(str(error)) or f"the replay failed, no verdict: {type(error).__name__}: {lines[0][:300] if lines else ''}"
        print(f"sbconform replay: {said}" + (f" (Spark's log: {log})" if log else ""), file=sys.stderr)
        return 2
    if done is not None:
        return many_verdict(done, args.out or (None if args.local else "replay-out"))
    print_summary(summary, args.out or (None if args.local else "replay-out"))
    if not summary.get("events"):
        print("sbconform replay: no events: an empty trace proves nothing (not valid)", file=sys.stderr)
        return 2
    return exit_code(summary)


class _LocalLine:
    """``replay --local``'s live line: events checked of the total, the file (of several),
    the pieces seen (and those with a violation found), the piece being checked, elapsed.
    ``last()`` shows the final state (the rate limit may have skipped it) before the line
    gives way to the summary."""

    def __init__(self, live: LiveLine) -> None:
        self.live = live
        self.seen = None

    def __call__(self, seen, force: bool = False) -> None:
        self.seen = seen
        self.live.show(f"  {count(seen.events, seen.total, 'events')} checked"
                       + (f", file {seen.file}/{seen.files}" if seen.files > 1 else "")
                       + f", {seen.pieces_seen:,} pieces"
                       + (f" ({seen.violations_found:,} with a violation)" if seen.violations_found else "")
                       + f", now {seen.piece or '-'}, {self.live.elapsed():.0f} s", force)

    def last(self) -> None:
        if self.seen is not None:
            self(self.seen, force=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="check traces against the reference model on Spark; exit 0 valid, 1 violations, 2 undecided")
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories (local or any Hadoop-compatible URI)")
    p.add_argument("--master", type=master, default="local[*]", help="Spark master (default local[*]; under spark-submit use scripts/spark_replay_job.py)")
    p.add_argument("--out", metavar="DIR", help="results: pieces.parquet (one row per piece), violations.jsonl, summary.json "
                        "(with --local: pieces.jsonl, summary.json) (default: replay-out with Spark; nothing written "
                        "with --local)")
    p.add_argument("--local", action="store_true", help="check in this process, without Spark")
    p.add_argument("--layout", choices=("by-piece", "time"), help="override the detected layout (remote inputs)")
    p.add_argument("--reader", choices=("arrow", "spark"), default="arrow",
                   help="by-piece layouts: tasks read their bucket files with pyarrow (arrow, default: local paths and "
                        "URIs pyarrow opens) or through Spark's Parquet reader (spark: any Hadoop-compatible path)")
    p.add_argument("--search-bound", type=positive, default=2000, metavar="N",
                   help="model steps tried per window of overlapping operations before answering unknown (default 2000)")
    p.set_defaults(func=run)
