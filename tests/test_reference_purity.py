"""The reference model needs nothing but the standard library, and draws no randomness."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {"random", "secrets", "uuid", "time", "datetime", "os", "socket", "threading", "asyncio", "io", "pathlib", "subprocess"}


def test_reference_imports_with_the_standard_library_alone() -> None:
    code = (
        "import sys; sys.path.insert(0, %r); import sbreference; "
        "mods = {m.split('.')[0] for m in sys.modules}; "
        "extra = sorted(m for m in mods if m not in sys.stdlib_module_names and m not in ('sbreference', '__main__')); "
        "print(extra); assert not extra, extra" % str(REPO)
    )
    # -I: isolated (no user site, no PYTHONPATH); -S: no site-packages at all
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout


def test_reference_uses_no_clock_randomness_or_io() -> None:
    for path in sorted((REPO / "sbreference").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module.split(".")[0]]
            bad = set(names) & FORBIDDEN
            assert not bad, f"{path.relative_to(REPO)}:{node.lineno} imports {sorted(bad)}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("open", "input", "print"):
                raise AssertionError(f"{path.relative_to(REPO)}:{node.lineno} calls {node.func.id}()")
