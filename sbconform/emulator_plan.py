"""The Config.json fallback of the emulator target: for emulator versions without a management API.

Microsoft's emulator first read its entities only from its Config.json, at start ("You must supply
any changes in JSON configuration before you run the emulator. Changes aren't honored on the fly. For
changes to take effect, you must restart the container": the overview page, "Quota configuration
changes", https://learn.microsoft.com/azure/service-bus-messaging/overview-emulator; its "Known
limitations" then said "It doesn't support on-the-fly management operations through a client-side
SDK"). With ``--option control=config`` the emulator target creates no entity at run time: it
restarts the emulator with a generated Config.json holding the entities the coming tests need.

**The plan** says which entities each test creates, recorded from a run of the same tests on the
reference target (where creating is free): this module is also a pytest plugin that, loaded with
``-p sbconform.emulator_plan`` and ``SBCONFORM_PLAN_OUT=FILE``, appends one JSON line per entity the
reference target creates (test id, kind, name, properties)::

    python -m sbconform.emulator_plan record plan.jsonl --sb-clause settlement
    sbconform certify --target emulator --option accept_eula=Y --option control=config --option plan=plan.jsonl ...

**Batches**: at a test's first entity the target restarts the emulator once with the entities of
that test and of the tests that follow it in the plan, as many whole tests as the emulator's
documented quota of 50 queues and topics allows; the tests of a batch then find their entities
there without a restart. Without a plan (or for an entity the plan did not foresee) it restarts
for the entities the test has asked for so far. Entity names carry a key of the test
(``<name>-<6 hex digits>``), so a plan's names and the target's agree. A restart loses messages
(the emulator keeps nothing across restarts), which is why a test's entities go in together.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PLAN_ENV = "SBCONFORM_PLAN_OUT"


def current_test() -> str:
    """The test running now (pytest sets PYTEST_CURRENT_TEST to '<nodeid> (<phase>)')."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def test_key(test: str) -> str:
    return hashlib.sha1(test.encode()).hexdigest()[:6]


def entity_name(name: str, test: str) -> str:
    return f"{name}-{test_key(test)}"


# ------------------------------------------------------------------ recording (a pytest plugin)
def pytest_configure(config: Any) -> None:
    out = os.environ.get(PLAN_ENV)
    if out:
        _record_into(Path(out))


def _record_into(out: Path) -> None:
    from .targets.reference import ReferenceTarget

    def wrap(kind: str, method: Any) -> Any:
        def recorded(self: Any, *args: Any, **properties: Any) -> str:
            path = method(self, *args, **properties)
            entry: dict[str, Any] = {"test": current_test(), "kind": kind, "properties": properties}
            if kind == "subscription":
                entry["topic"], entry["name"] = args[0], args[1]
            else:
                entry["name"] = args[0]
            with out.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry, default=str) + "\n")
            return path
        return recorded

    ReferenceTarget.create_queue = wrap("queue", ReferenceTarget.create_queue)  # type: ignore[method-assign]
    ReferenceTarget.create_topic = wrap("topic", ReferenceTarget.create_topic)  # type: ignore[method-assign]
    ReferenceTarget.create_subscription = wrap("subscription", ReferenceTarget.create_subscription)  # type: ignore[method-assign]


def record(out: Path, pytest_args: list[str], cwd: Path | None = None) -> int:
    """Run the kit's tests (narrowed by ``pytest_args``) on the reference target, recording the plan."""
    root = Path(__file__).resolve().parent.parent
    out = Path(out).resolve()
    out.unlink(missing_ok=True)
    out.touch()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "sbconform.emulator_plan",
               "--rootdir", str(root), str(root / "tests"), "--sb-target", "reference", "--sb-certify", *pytest_args]
    done = subprocess.run(command, cwd=cwd or root, env={**os.environ, PLAN_ENV: str(out)}, stdout=subprocess.DEVNULL)
    return 0 if done.returncode in (0, 1) else done.returncode  # failures on the model do not spoil the plan


# ------------------------------------------------------------------ reading and batching
class Plan:
    """The recorded entities, test by test, in the order the tests ran."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.tests: list[str] = []
        self.entities: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            test = entry["test"]
            if test not in self.entities:
                self.tests.append(test)
                self.entities[test] = []
            self.entities[test].append(entry)

    @classmethod
    def load(cls, path: str | Path | None) -> "Plan":
        if path is None:
            return cls([])
        entries = []
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    entry = json.loads(line)
                    entry["test"], entry["kind"], entry["name"]  # noqa: B018 - the fields a plan line must have
                except (ValueError, KeyError, TypeError) as error:
                    raise ValueError(f"plan {path}:{number}: not a plan line ({error})") from None
                entries.append(entry)
        return cls(entries)

    def following(self, test: str) -> list[str]:
        """``test`` and the tests after it in the plan ([test] alone if the plan does not know it)."""
        if test not in self.entities:
            return [test]
        return self.tests[self.tests.index(test):]


def translate(entry: dict[str, Any], test: str) -> tuple[str, str, str | None, dict[str, Any]]:
    """A plan entry as the emulator target names it: (kind, name, topic, properties), the names and
    the forwarding destinations (reference paths of the same test) keyed with the test."""
    props = dict(entry.get("properties") or {})
    for field in ("forward_to", "forward_dead_lettered_messages_to"):
        if isinstance(props.get(field), str) and props[field]:
            props[field] = keyed_path(props[field], test)
    if entry["kind"] == "subscription":
        return "subscription", entry["name"], keyed_path(entry["topic"], test), props
    return entry["kind"], entity_name(entry["name"], test), None, props


def keyed_path(path: str, test: str) -> str:
    head, sep, rest = path.partition("/")
    return entity_name(head, test) + sep + rest


class ConfigBuilder:
    """The entities of one Config.json: queues, and topics with their subscriptions."""

    def __init__(self) -> None:
        self.queues: dict[str, dict[str, Any]] = {}
        self.topics: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {}

    def count(self) -> int:
        return len(self.queues) + len(self.topics)

    def has(self, kind: str, name: str, topic: str | None = None) -> bool:
        if kind == "queue":
            return name.lower() in {q.lower() for q in self.queues}
        if kind == "topic":
            return name.lower() in {t.lower() for t in self.topics}
        return any(t.lower() == (topic or "").lower() and name.lower() in {s.lower() for s in subs}
                   for t, (_, subs) in self.topics.items())

    def add(self, kind: str, name: str, topic: str | None, props: dict[str, Any]) -> None:
        if kind == "queue":
            self.queues.setdefault(name, props)
        elif kind == "topic":
            self.topics.setdefault(name, (props, {}))
        else:
            for t, (_, subs) in self.topics.items():
                if t.lower() == (topic or "").lower():
                    subs.setdefault(name, props)
                    return
            self.topics[topic or ""] = ({}, {name: props})  # a topic the plan created before it was known

    def document(self) -> dict[str, Any]:
        """The Config.json (the emulator's schema: no Sku, no keys, which are our serve's extensions)."""
        from .server.config import Config, config_json

        config = Config(queues=[(n, clean(p)) for n, p in self.queues.items()],
                        topics=[(n, clean(p), [(s, clean(sp)) for s, sp in subs.items()]) for n, (p, subs) in self.topics.items()])
        document = config_json(config)
        for ns in document["UserConfig"]["Namespaces"]:
            ns.pop("Sku", None)
            ns.pop("SharedAccessKeys", None)
        return document


#: what Config.json can say of an entity (the emulator's schema, sbconform.server.config)
CONFIG_FIELDS = frozenset({
    "lock_duration", "max_delivery_count", "default_message_time_to_live", "dead_lettering_on_message_expiration",
    "requires_duplicate_detection", "duplicate_detection_history_time_window", "requires_session", "forward_to",
    "max_message_size", "dead_lettering_on_filter_evaluation_exceptions",
})


def unsupported(props: dict[str, Any]) -> list[str]:
    """Properties a Config.json cannot set (the scenario needing them is skipped in config mode)."""
    from sbreference.clock import TIMESPAN_MAX

    return sorted(k for k, v in props.items()
                  if k not in CONFIG_FIELDS and v not in (None, False) and not (isinstance(v, int) and v >= TIMESPAN_MAX))


def clean(props: dict[str, Any]) -> dict[str, Any]:
    from sbreference.clock import TIMESPAN_MAX

    return {k: v for k, v in props.items()
            if k in CONFIG_FIELDS and v is not None and not (k.endswith(("_to_live", "_window", "_duration")) and v >= TIMESPAN_MAX)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "record":
        print("usage: python -m sbconform.emulator_plan record PLAN.jsonl [pytest arguments, e.g. --sb-clause settlement]",
              file=sys.stderr)
        return 2
    code = record(Path(args[1]), args[2:])
    if code == 0:
        print(f"plan: {len(Plan.load(args[1]).tests)} tests creating entities, in {args[1]}")
    return code


if __name__ == "__main__":
    sys.exit(main())
