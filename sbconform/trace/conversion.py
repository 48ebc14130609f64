"""Converting a trace between JSON Lines and Parquet (``sbconform convert``): file by file,
written under a temporary name and renamed when complete."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .io import JsonlWriter, ParquetWriter, TraceCut, kind_of, read_header, read_jsonl, read_parquet, read_parquet_events, trace_files
from .schema import TraceFormatError


def convert(src: str | os.PathLike, dst: str | os.PathLike, on_cut: Callable[[TraceCut], None] | None = None) -> int:
    """Convert a trace between JSON Lines and Parquet (by the suffixes); a directory is
    converted file by file into ``dst`` (a directory, with ``--to``'s suffix chosen from
    the files found). Returns the number of events written. A cut JSON Lines source is
    converted up to the cut, the output closed, then the cut raised (or given to ``on_cut``)."""
    src, dst = Path(src), Path(dst)
    if src.is_dir():
        raise TraceFormatError(f"{src}: is a directory; convert one file at a time (see convert_dir)")
    if dst.exists() and dst.resolve() == src.resolve():
        raise TraceFormatError(f"{dst}: the destination is the source")
    head = read_header(src)
    meta = {k: v for k, v in head.items() if k not in ("format", "version", "trace")}
    kind_of(dst)
    tmp = dst.with_name(dst.name + ".partial")
    tmp.unlink(missing_ok=True)
    cuts: list[TraceCut] = []
    writer = JsonlWriter(tmp, head["trace"], validate=False, **meta) if kind_of(dst) == "jsonl" else ParquetWriter(tmp, head["trace"], validate=False, **meta)
    try:
        if kind_of(src) == "parquet" and isinstance(writer, ParquetWriter):
            for batch in read_parquet(src):
                writer.write_batch(batch)
        else:
            writer.write_all(read_jsonl(src, on_cut=cuts.append) if kind_of(src) == "jsonl" else read_parquet_events(src))
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(tmp, dst)
    if cuts:
        if on_cut is None:
            raise cuts[0]
        on_cut(cuts[0])
    return writer.events


def convert_dir(src: str | os.PathLike, dst: str | os.PathLike, to: str, on_cut: Callable[[TraceCut], None] | None = None) -> int:
    """Every trace file under ``src`` converted to encoding ``to`` (jsonl | parquet) under
    ``dst``, keeping relative paths. Returns the events written."""
    src, dst = Path(src), Path(dst)
    suffix = {"jsonl": ".jsonl", "parquet": ".parquet"}[to]
    total = 0
    for file in trace_files(src):
        out = dst / file.relative_to(src).with_suffix(suffix)
        out.parent.mkdir(parents=True, exist_ok=True)
        total += convert(file, out, on_cut=on_cut)
    return total
