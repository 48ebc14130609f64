"""Clause coverage: which scenarios and tests name which clauses.

Reads the feature files (with pytest-bdd's own Gherkin parser) and the Python tests
(``pytest.mark.clauses(...)`` found statically, with ``ast``), then checks them against
the catalog:

- every scenario names at least one clause;
- every clause named exists (an unknown id is reported with file and line);
- per area, which clauses are still uncovered; an area marked ``complete`` in
  ``sbspec/vocabulary.toml`` must have none.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from sbspec import Catalog, load_catalog
from sbspec.catalog import CLAUSE_ID

CLAUSE_TAG = CLAUSE_ID  # the one clause-id pattern (sbspec/catalog.py)
REPO = Path(__file__).resolve().parent.parent
#: where an installed wheel keeps the features and the tests (``setup.py`` puts them there)
INSTALLED_KIT = Path(__file__).resolve().parent / "_kit"


def kit_root() -> Path:
    """The directory holding ``features/`` and ``tests/``: the checkout this module runs
    from, else the copy inside the installed package."""
    if (REPO / "features").is_dir() and (REPO / "tests" / "conftest.py").is_file():
        return REPO
    return INSTALLED_KIT


@dataclass(frozen=True)
class Use:
    """One place that names a clause."""

    clause: str
    kind: str  # "scenario" or "test"
    where: str  # "features/settlement/locks.feature:12" or "tests/test_x.py:40"
    name: str


@dataclass
class Coverage:
    catalog: Catalog
    uses: list[Use] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def by_clause(self) -> dict[str, list[Use]]:
        out: dict[str, list[Use]] = {cid: [] for cid in self.catalog.clauses}
        for use in self.uses:
            out.setdefault(use.clause, []).append(use)
        return out

    def uncovered(self, area: str) -> list[str]:
        covered = {u.clause for u in self.uses}
        return sorted(c.id for c in self.catalog.by_area(area) if c.id not in covered)

    def failures(self) -> list[str]:
        """Problems, plus uncovered clauses of every area declared complete."""
        out = list(self.problems)
        for area, info in self.catalog.areas.items():
            if info.get("complete"):
                missing = self.uncovered(area)
                if missing:
                    out.append(f"area {area!r} is declared complete but {len(missing)} clauses are uncovered: {', '.join(missing)}")
        return out

    def summary(self) -> str:
        lines = [f"{'area':<14}{'clauses':>8}{'covered':>9}{'uncovered':>11}  complete"]
        for area, info in self.catalog.areas.items():
            total = len(self.catalog.by_area(area))
            missing = self.uncovered(area)
            lines.append(f"{area:<14}{total:>8}{total - len(missing):>9}{len(missing):>11}  {'yes' if info.get('complete') else 'no'}")
            if missing and not info.get("complete"):
                lines.append(f"  uncovered: {', '.join(missing)}")
        for problem in self.failures():
            lines.append(f"PROBLEM: {problem}")
        return "\n".join(lines)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def scan_features(features_dir: Path, coverage: Coverage, root: Path) -> None:
    from pytest_bdd.parser import FeatureParser

    known = coverage.catalog.clauses
    for path in sorted(features_dir.rglob("*.feature")):
        rel = _rel(path, root)
        try:
            feature = FeatureParser(str(path.parent), path.name).parse()
        except Exception as error:  # a Gherkin syntax error names its own line
            coverage.problems.append(f"{rel}: cannot parse: {error}")
            continue
        inherited = set(feature.tags)
        for scenario in feature.scenarios.values():
            tags = inherited | set(scenario.tags) | set(getattr(scenario, "rule", None) and scenario.rule.tags or ())
            for example in getattr(scenario, "examples", None) or []:
                tags |= set(getattr(example, "tags", ()) or ())
            where = f"{rel}:{scenario.line_number}"
            clauses = sorted(t for t in tags if CLAUSE_TAG.match(t))
            if not clauses:
                coverage.problems.append(f"{where}: scenario {scenario.name!r} names no clause")
            for cid in clauses:
                if cid not in known:
                    coverage.problems.append(f"{where}: scenario {scenario.name!r} names unknown clause {cid}")
                coverage.uses.append(Use(cid, "scenario", where, scenario.name))
            for tag in tags:
                if tag.startswith("needs:") and tag[6:] not in coverage.catalog.capabilities:
                    coverage.problems.append(f"{where}: unknown capability {tag[6:]!r}")


def _is_clauses_marker(node: ast.Call) -> bool:
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "clauses") or (isinstance(func, ast.Name) and func.id == "clauses")


def scan_tests(tests_dir: Path, coverage: Coverage, root: Path) -> None:
    known = coverage.catalog.clauses
    for path in sorted(tests_dir.rglob("*.py")):
        rel = _rel(path, root)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError as error:
            coverage.problems.append(f"{rel}:{error.lineno}: {error.msg}")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_clauses_marker(node):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and CLAUSE_TAG.match(arg.value):
                        where = f"{rel}:{node.lineno}"
                        if arg.value not in known:
                            coverage.problems.append(f"{where}: names unknown clause {arg.value}")
                        coverage.uses.append(Use(arg.value, "test", where, path.stem))


def check(root: Path | str | None = None, catalog: Catalog | None = None) -> Coverage:
    """Scan ``root``'s features/ and tests/ against the catalog."""
    root = Path(root) if root is not None else kit_root()
    coverage = Coverage(catalog or load_catalog())
    if (root / "features").is_dir():
        scan_features(root / "features", coverage, root)
    if (root / "tests").is_dir():
        scan_tests(root / "tests", coverage, root)
    return coverage


#: The test module that runs every scenario of features/ (``scenarios(".")``).
FEATURES_MODULE = "tests/test_features.py"


def collection_paths(root: Path, clauses: list[str], catalog: Catalog | None = None, coverage: Coverage | None = None) -> list[str]:
    """What a run selecting ``clauses`` (``--clause`` patterns: ids, globs, areas; commas split
    too) has pytest collect: the test files naming a selected clause (scenarios run in
    ``FEATURES_MODULE``), found statically, for collecting every module costs seconds per test
    process. No selection, or nothing found: the whole tests directory, as before. ``coverage``:
    ``check(root, catalog)`` done already."""
    from .report import clause_patterns, selects

    patterns = clause_patterns(clauses)
    files: set[str] = set()
    if patterns:
        coverage = coverage or check(root, catalog)
        for use in coverage.uses:
            clause = coverage.catalog.clauses.get(use.clause)
            if clause is not None and any(selects(p, clause) for p in patterns):
                files.add(FEATURES_MODULE if use.kind == "scenario" else use.where.rsplit(":", 1)[0])
    return [str(Path(root) / f) for f in sorted(files)] or [str(Path(root) / "tests")]
