"""The README's examples work as written: its Python runs, its sample Config.json loads, and
every ``sbconform`` command it shows is one the CLI accepts (options and values parse)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sbconform.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def blocks(language: str, text: str = README) -> list[str]:
    return [re.sub(r"^  ", "", b, flags=re.M) for b in re.findall(rf"^ *```{language}\n(.*?)^ *```", text, re.S | re.M)]


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + 1)
    nxt = README.find("\n### ", start + 1)
    return README[start: min(x for x in (end, nxt) if x > 0)]


def test_the_python_api_example_runs() -> None:
    code = [b for b in blocks("python", section("### Using the kit from Python")) if "make_target(" in b]
    assert code, "no make_target example in the README"
    exec(compile(code[0], "README.md", "exec"), {})


def test_the_sb_target_fixture_example_runs_in_a_foreign_test_suite(tmp_path: Path) -> None:
    code = [b for b in blocks("python", section("### Using the kit from Python")) if "def test_" in b]
    assert code
    (tmp_path / "test_my_broker.py").write_text(code[0])
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          str(tmp_path / "test_my_broker.py"), "--sb-target", "reference"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_the_sample_config_loads() -> None:
    pytest.importorskip("proton", reason="the sdk extra is not installed")
    from sbconform.server import load_config

    samples = [b for b in blocks("json") if '"UserConfig"' in b]
    assert samples, "no sample Config.json in the README"
    path = REPO / "build" / "readme-Config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(samples[0])
    json.loads(samples[0])
    config = load_config(str(path))
    assert [name for name, _ in config.queues] == ["orders", "sessions", "dedup"]


def commands() -> list[list[str]]:
    out = []
    for block in blocks("sh"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            line = re.sub(r"^(\w+=(\"[^\"]*\"|'[^']*'|\S+)\s+)+", "", line)  # VAR=value prefixes
            line = re.sub(r"\[(--[^\]]*)\]", r"\1", line)  # optional arguments shown as [--opt X]
            for prefix in (".venv/bin/sbconform ", "sbconform "):
                if line.startswith(prefix):
                    out.append(shlex.split(line[len(prefix):]))
    return out


def test_every_sbconform_command_in_the_readme_parses() -> None:
    found = commands()
    assert len(found) >= 15, found
    parser = build_parser()
    for argv in found:
        try:
            parser.parse_args(argv)
        except SystemExit as error:
            if argv == ["--version"] and error.code == 0:
                continue
            pytest.fail(f"README: `sbconform {' '.join(argv)}` is refused by the CLI")
