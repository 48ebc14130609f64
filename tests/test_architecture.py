"""The layering, checked: nothing outside ``sbreference/`` reaches into the model's private parts.

The model's public surface (``Namespace.receiving_store``, ``sending_entity``,
``close_connection``, ``tick_due``, ``lock_deadlines``, ``sbreference.paths``) is what
targets, the server, the trace checker and the tests use; a name starting with ``_`` in
``sbreference/`` may change at any time. The walk is syntactic (no types), so it flags:

- ``from sbreference... import _name`` and ``sbreference.module._name``;
- ``expr._name`` where ``_name`` is a private name defined in ``sbreference/`` (a function,
  method, class or module attribute, or an instance attribute assigned there) and the
  file does not define a private name of its own spelled the same way; ``self._x`` and
  ``cls._x`` are the file's own business and are skipped.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "sbreference"
OUTSIDE = ("sbconform", "tests", "scripts", "benchmarks")

#: Files owned by other work in progress whose remaining uses are listed for the merger;
#: an entry here must still have a violation (else remove it), see ``test_known_list_is_current``.
KNOWN: dict[str, set[str]] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, assignments, ``self._x = ...``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    for node in ast.walk(tree):  # __slots__ = ("_a", "_b")
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            for elt in getattr(node.value, "elts", []):
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                    names.add(elt.value)
    return {n for n in names if _private(n)}


def _model_private() -> set[str]:
    names: set[str] = set()
    for path in MODEL.rglob("*.py"):
        names |= _defined(ast.parse(path.read_text(), str(path)))
    return names


def violations(path: Path, model_private: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    own = _defined(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sbreference":
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)]
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "sbreference" and any(_private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            dotted = ast.unparse(base)
            if dotted.split(".")[0] == "sbreference" or (node.attr in model_private and node.attr not in own):
                found.append(f"{node.lineno}: {dotted}.{node.attr}")
    return found


def _outside_files() -> list[Path]:
    files: list[Path] = []
    for top in OUTSIDE:
        files += sorted(p for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts)
    return files


def test_nothing_outside_the_model_uses_its_private_names() -> None:
    model_private = _model_private()
    bad = {}
    for path in _outside_files():
        rel = str(path.relative_to(ROOT))
        found = [v for v in violations(path, model_private) if v.split(": ", 1)[1] not in KNOWN.get(rel, set())]
        if found:
            bad[rel] = found
    assert not bad, "private names of sbreference/ used outside it:\n" + "\n".join(
        f"  {f}:{v}" for f, vs in bad.items() for v in vs)


def test_known_list_is_current() -> None:
    model_private = _model_private()
    for rel, allowed in KNOWN.items():
        used = {v.split(": ", 1)[1] for v in violations(ROOT / rel, model_private)}
        assert allowed <= used, f"{rel}: no longer uses {sorted(allowed - used)}; remove them from KNOWN"


@pytest.mark.parametrize("source, expected", [
    ("from sbreference.namespace import _x\n", 1),
    ("import sbreference\nsbreference.namespace._resolve\n", 1),
    ("import sbreference\nsbreference.namespace._other\n", 1),
    ("def f(ns):\n    return ns._receiving_store('q')\n", 1),
    ("class A:\n    def f(self):\n        return self._receiving_store('q')\n", 0),
    ("def f(ns):\n    return ns.receiving_store('q')\n", 0),
])
def test_the_check_itself_can_fail(tmp_path: Path, source: str, expected: int) -> None:
    path = tmp_path / "x.py"
    path.write_text(source)
    assert len(violations(path, {"_receiving_store", "_resolve", "_x"})) == expected


def test_the_model_imports_nothing_of_ours() -> None:
    for path in MODEL.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module.split(".")[0] not in ("sbconform", "sbspec"), f"{path}: imports {node.module}"
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] not in ("sbconform", "sbspec") for a in node.names), path


# ------------------------------------------------------------------ entity paths

from hypothesis import given, strategies as st  # noqa: E402

from sbreference.paths import ENTITY_KEY_PATTERNS, EntityPath, entity_key, parse  # noqa: E402


@pytest.mark.parametrize("path, parsed", [
    ("q", EntityPath("q")),
    ("Q1/$DeadLetterQueue", EntityPath("Q1", None, True)),
    ("t/Subscriptions/S", EntityPath("t", "S")),
    ("t/subscriptions/s/$deadletterqueue", EntityPath("t", "s", True)),
    ("/q/", EntityPath("q")),
])
def test_one_parser_reads_every_form(path: str, parsed: EntityPath) -> None:
    assert parse(path) == parsed
    assert str(parse(path)).lower() == path.strip("/").lower()


PART = st.sampled_from(["q", "T", "a.b", "/", "Subscriptions", "subscriptions", "$DeadLetterQueue", "$deadletterqueue", "s-1", ""])


@given(st.lists(PART, max_size=6).map("/".join))
def test_the_spark_pattern_agrees_with_the_parser(path: str) -> None:
    """Spark computes the piece with ``regexp_replace`` of ``ENTITY_KEY_PATTERNS``; the checker with ``entity_key``."""
    import re

    key = path
    for pattern in ENTITY_KEY_PATTERNS:
        key = re.sub(pattern, "", key)
    assert key.lower() == entity_key(path)


# ------------------------------------------------------------------ target wrappers


def test_the_target_wrapper_delegates_every_operation() -> None:
    """A Target method without a delegation in TargetWrapper would silently run the base
    class's default (``require`` + NotImplementedError) under recording or metering."""
    from sbconform.targets.base import Target, TargetWrapper

    own = {"require", "unwrap"}
    missing = [name for name, value in vars(Target).items()
               if callable(value) and not name.startswith("_") and name not in own and name not in vars(TargetWrapper)]
    assert not missing, f"TargetWrapper does not delegate {missing}"


def test_wrappers_unwrap_to_the_target_and_keep_their_own_name() -> None:
    from sbreference import Message
    from sbconform.targets.base import TargetWrapper, unwrap
    from sbconform.targets.reference import ReferenceTarget

    class Named(TargetWrapper):
        name = "named"

    inner = ReferenceTarget()
    plain, named = TargetWrapper(inner), Named(TargetWrapper(inner))
    assert plain.name == inner.name and named.name == "named"
    assert named.unwrap() is inner and unwrap(named) is inner and unwrap(inner) is inner
    assert unwrap(named, Named) is named.inner
    assert plain.capabilities == inner.capabilities and plain.namespace is inner.namespace  # read through
    path = plain.create_queue("q")
    plain.send(plain.sender(path), [Message(b"x", message_id="m")])
    assert [m.message_id for m in inner.peek(inner.receiver(path))] == ["m"]


def test_every_clock_the_model_is_given_is_a_clock() -> None:
    from sbreference import Clock, VirtualClock
    from sbconform.server.server import WallClock

    assert isinstance(VirtualClock(), Clock) and isinstance(WallClock(), Clock)
    assert not isinstance(object(), Clock)


# ------------------------------------------------------------------ the model's public surface


def test_the_model_surface_a_server_uses() -> None:
    from sbreference import ErrorCode, Message, Namespace, ServiceBusError

    ns = Namespace()
    ns.create_queue("q", lock_duration=5_000)
    ns.create_queue("idle")
    ns.create_topic("t")
    ns.create_subscription("t", "s")
    conn = ns.connect()
    assert ns.sending_entity("Q").path == "q"
    assert ns.receiving_store("q/$DeadLetterQueue").is_dead_letter
    assert ns.receiving_store("t/Subscriptions/S") is ns.entities["t"].subscriptions["s"].store
    for bad, code in (("t/Subscriptions/s", ErrorCode.INVALID_OPERATION), ("nope", ErrorCode.ENTITY_NOT_FOUND)):
        try:
            ns.sending_entity(bad)
        except ServiceBusError as error:
            assert error.code is code
        else:
            raise AssertionError(f"sending to {bad!r} was allowed")
    ns.send(conn, "q", [Message(b"a", message_id="a")])
    (delivery,) = ns.receive(conn, "q")
    assert ns.lock_deadlines() == [delivery.locked_until] == [5_000]
    assert ns.tick_due(4_999) == []  # nothing due yet
    ns.clock.advance(5_000)
    assert ns.tick_due() == ["q"]  # the lock expired: only q changed
    assert ns.lock_deadlines() == []
    assert ns.tick_due(keys=["idle", "missing"]) == []
    ns.close_connection(conn)
    assert conn not in ns.open_connections


def test_every_module_is_under_500_lines() -> None:
    """Issue 12: each room does one job; the largest module stays under 500 lines."""
    big = {str(p.relative_to(ROOT)): n for top in ("sbconform", "sbreference", "sbspec") for p in (ROOT / top).rglob("*.py")
           if "_kit" not in p.parts and (n := len(p.read_text(encoding="utf-8").splitlines())) >= 500}
    assert not big, f"modules of 500 lines or more: {big}"


def test_the_packages_have_distinctive_names() -> None:
    """The wheel installs ``sbconform``, ``sbreference`` and ``sbspec``: no generic top-level
    ``reference`` or ``spec`` in everyone's site-packages."""
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(include) == ["sbconform*", "sbreference*", "sbspec*"]
    assert not (ROOT / "reference").exists() and not (ROOT / "spec").exists()


def test_amqp_framing_is_written_once() -> None:
    """The frame header's layout and the performative codes live in ``sbconform/amqp/framing.py``;
    the server's scanner and the proxy import them (issue 12: the proxy had its own framing)."""
    layout, codes = 'Struct(">IBBH")', "range(0x10, 0x19)"
    places = {str(p.relative_to(ROOT)) for p in (ROOT / "sbconform").rglob("*.py")
              if layout in p.read_text(encoding="utf-8") or codes in p.read_text(encoding="utf-8")}
    assert places == {"sbconform/amqp/framing.py"}, places
