"""Build hook: the wheel carries the kit itself (features and the tests that grade clauses).

``sbconform certify`` runs the Gherkin features and the clause-naming tests against a
target. From a checkout it finds them beside the package; an installed wheel has no
checkout, so the build copies them into ``sbconform/_kit/`` with a ``pytest.ini``
(``sbconform.coverage.kit_root`` picks whichever exists). Only what certification runs is
copied: ``features/``, the step definitions, ``conftest.py`` and its helpers, and the test
modules that name clauses (``pytest.mark.clauses``) or run the features. Everything else
is in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent

PYTEST_INI = """[pytest]
bdd_features_base_dir = features/
addopts = -p no:cacheprovider
filterwarnings =
    error::pytest.PytestUnknownMarkWarning
"""


def kit_files(root: Path = ROOT) -> list[Path]:
    """The files of the kit, relative to ``root``."""
    tests = root / "tests"
    files = [p for p in (root / "features").rglob("*.feature")]
    files += [p for p in (tests / "steps").glob("*.py")]
    for path in tests.glob("*.py"):
        if not path.name.startswith("test_") or path.name == "test_features.py" \
                or "pytest.mark.clauses" in path.read_text(encoding="utf-8"):
            files.append(path)
    return sorted(p.relative_to(root) for p in files)


class build_py_with_kit(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or not (ROOT / "features").is_dir():
            return  # an editable install runs the checkout's kit
        kit = Path(self.build_lib) / "sbconform" / "_kit"
        shutil.rmtree(kit, ignore_errors=True)
        for rel in kit_files():
            (kit / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, kit / rel)
        (kit / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")


setup(cmdclass={"build_py": build_py_with_kit})
