"""Load and lint the clause catalog.

A clause is one testable statement: an id (``SETTLE-LOCK-003``), the seed and section
(or documentation page) it comes from with a verbatim quote, the statement in English,
a level (MUST / SHOULD / MAY / INFO), the capabilities a target needs to test it, and
tags. Discrepancies between or within seeds are recorded with the reading chosen.

Every problem is reported with the file and line it comes from; all problems are
collected before raising, so one run shows them all.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parent
CLAUSE_ID = re.compile(r"^[A-Z]+(?:-[A-Z]+)+-\d{3}$")


class CatalogError(ValueError):
    """The catalog is malformed; ``problems`` lists every finding as 'file:line: text'."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("clause catalog is invalid:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class Source:
    seed: str | None = None
    section: str | None = None
    url: str | None = None
    quote: str = ""

    def describe(self) -> str:
        if self.seed:
            return f"{self.seed} §{self.section}" if self.section else self.seed
        return self.url or "?"


@dataclass(frozen=True)
class Clause:
    id: str
    area: str
    level: str
    text: str
    sources: tuple[Source, ...]
    needs: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    note: str = ""
    file: str = ""
    line: int = 0


@dataclass(frozen=True)
class Discrepancy:
    id: str
    area: str
    description: str
    resolution: str
    sources: tuple[Source, ...]
    clauses: tuple[str, ...] = ()


@dataclass
class Catalog:
    clauses: dict[str, Clause]
    discrepancies: list[Discrepancy]
    areas: dict[str, dict]
    capabilities: dict[str, str]
    tags: dict[str, str]
    seeds: dict[str, str]
    levels: tuple[str, ...] = field(default=("MUST", "SHOULD", "MAY", "INFO"))

    def by_area(self, area: str) -> list[Clause]:
        return [c for c in self.clauses.values() if c.area == area]

    def area_of(self, clause_id: str) -> str | None:
        for name, area in self.areas.items():
            if clause_id.startswith(area["prefix"] + "-"):
                return name
        return None


def _normalise(text: str) -> str:
    """Compare quotes loosely on typography only: quotes, apostrophes, spaces, case."""
    text = unicodedata.normalize("NFKC", text)
    for fancy, plain in (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"'), ("\u00ab", '"'), ("\u00bb", '"')):
        text = text.replace(fancy, plain)
    return re.sub(r"\s+", " ", text).strip().lower()


def _line_of(lines: list[str], needle: str) -> int:
    for number, line in enumerate(lines, 1):
        if needle in line:
            return number
    return 0


def _seed_text(seed_dir: Path, name: str, cache: dict[str, str]) -> str | None:
    if name not in cache:
        path = seed_dir / name
        if not path.exists():
            return None
        raw = path.read_text(encoding="utf-8")
        # The Portuguese seed interleaves <span> markup with the English text inline.
        cache[name] = _normalise(re.sub(r"</?[A-Za-z][^<>]*>", " ", raw))
    return cache[name]


def load_catalog(spec_dir: Path | str | None = None) -> Catalog:
    """Read and lint the catalog; raises ``CatalogError`` listing every problem."""
    spec_dir = Path(spec_dir) if spec_dir is not None else SPEC_DIR
    problems: list[str] = []
    vocab_path = spec_dir / "vocabulary.toml"
    try:
        vocab = tomllib.loads(vocab_path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CatalogError([f"{vocab_path}: {error}"]) from error
    levels = tuple(vocab.get("levels", ()))
    areas = vocab.get("areas", {})
    capabilities = vocab.get("capabilities", {})
    tags = vocab.get("tags", {})
    seeds = vocab.get("seeds", {})
    seed_dir = spec_dir / "seeds"
    seed_cache: dict[str, str] = {}

    clauses: dict[str, Clause] = {}
    discrepancies: list[Discrepancy] = []
    for path in sorted((spec_dir / "clauses").glob("*.toml")):
        rel = path.relative_to(spec_dir.parent) if spec_dir.parent in path.parents else path
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            problems.append(f"{rel}: {error}")
            continue
        area = data.get("area")
        if area not in areas:
            problems.append(f"{rel}:1: area {area!r} is not in vocabulary.toml (known: {sorted(areas)})")
            continue
        prefix = areas[area]["prefix"]

        def where(needle: str) -> str:
            return f"{rel}:{_line_of(lines, needle)}"

        def read_sources(owner: str, entries: list, at: str) -> tuple[Source, ...]:
            out = []
            if not entries:
                problems.append(f"{at}: {owner} cites no source")
            for entry in entries:
                source = Source(
                    seed=entry.get("seed"), section=entry.get("section"), url=entry.get("url"), quote=entry.get("quote", "")
                )
                if not source.seed and not source.url:
                    problems.append(f"{at}: {owner} has a source with neither a seed nor a url")
                if not source.quote:
                    problems.append(f"{at}: {owner} has a source without a quote")
                if source.seed:
                    if source.seed not in seeds:
                        problems.append(f"{at}: {owner} cites unknown seed {source.seed!r}")
                    else:
                        body = _seed_text(seed_dir, source.seed, seed_cache)
                        if body is None:
                            problems.append(f"{at}: {owner}: seed file {seed_dir / source.seed} is missing")
                        else:
                            if source.quote and _normalise(source.quote) not in body:
                                problems.append(
                                    f"{at}: {owner}: quote not found in {source.seed}: {source.quote[:80]!r}"
                                )
                            if source.section and _normalise(source.section) not in body:
                                problems.append(f"{at}: {owner}: section {source.section!r} not found in {source.seed}")
                elif source.url and not source.url.startswith("https://"):
                    problems.append(f"{at}: {owner}: url must be https: {source.url!r}")
                out.append(source)
            return tuple(out)

        for entry in data.get("clause", []):
            cid = entry.get("id", "")
            at = where(f'"{cid}"') if cid else f"{rel}:0"
            if not CLAUSE_ID.match(cid):
                problems.append(f"{at}: malformed clause id {cid!r} (expected like {prefix}-LOCK-003)")
                continue
            if not cid.startswith(prefix + "-"):
                problems.append(f"{at}: clause {cid} does not start with its area's prefix {prefix}-")
            if cid in clauses:
                problems.append(f"{at}: duplicate clause id {cid} (first in {clauses[cid].file}:{clauses[cid].line})")
                continue
            level = entry.get("level")
            if level not in levels:
                problems.append(f"{at}: clause {cid}: level {level!r} is not one of {list(levels)}")
            if not entry.get("text", "").strip():
                problems.append(f"{at}: clause {cid} has no text")
            for cap in entry.get("needs", []):
                if cap not in capabilities:
                    problems.append(f"{at}: clause {cid} needs unknown capability {cap!r}")
            for tag in entry.get("tags", []):
                if tag not in tags:
                    problems.append(f"{at}: clause {cid} has unknown tag {tag!r}")
            unknown_keys = set(entry) - {"id", "level", "text", "sources", "needs", "tags", "note"}
            if unknown_keys:
                problems.append(f"{at}: clause {cid} has unknown fields {sorted(unknown_keys)}")
            clauses[cid] = Clause(
                id=cid,
                area=area,
                level=level or "",
                text=" ".join(entry.get("text", "").split()),
                sources=read_sources(f"clause {cid}", entry.get("sources", []), at),
                needs=tuple(entry.get("needs", [])),
                tags=tuple(entry.get("tags", [])),
                note=" ".join(entry.get("note", "").split()),
                file=str(rel),
                line=int(at.rsplit(":", 1)[1]),
            )
        for entry in data.get("discrepancy", []):
            did = entry.get("id", "")
            at = where(f'"{did}"') if did else f"{rel}:0"
            for key in ("description", "resolution"):
                if not entry.get(key, "").strip():
                    problems.append(f"{at}: discrepancy {did} has no {key}")
            discrepancies.append(
                Discrepancy(
                    id=did,
                    area=area,
                    description=" ".join(entry.get("description", "").split()),
                    resolution=" ".join(entry.get("resolution", "").split()),
                    sources=read_sources(f"discrepancy {did}", entry.get("sources", []), at),
                    clauses=tuple(entry.get("clauses", [])),
                )
            )
    for d in discrepancies:
        for cid in d.clauses:
            if cid not in clauses:
                problems.append(f"discrepancy {d.id}: names unknown clause {cid}")
    if problems:
        raise CatalogError(problems)
    return Catalog(clauses, discrepancies, areas, capabilities, tags, seeds, levels)
