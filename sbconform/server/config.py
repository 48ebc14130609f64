"""The endpoint's configuration, in the schema of Microsoft's Service Bus emulator.

```json
{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
   "Queues": [{"Name": "q1", "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 3}}],
   "Topics": [{"Name": "t1", "Properties": {},
               "Subscriptions": [{"Name": "s1", "Properties": {"RequiresSession": true}}]}]}],
  "Logging": {"Type": "Console"}}}
```

Extensions (absent from the emulator's schema): on a namespace ``Sku`` (Basic, Standard,
Premium), ``PartitionCount`` (Premium: 1, 2 or 4), ``SharedAccessKeys`` (a list of
``{"KeyName": ..., "Key": ...}``; default: the emulator's
``RootManageSharedAccessKey`` / ``SAS_KEY_VALUE``); on a queue or topic
``EnablePartitioning``, ``MaxSizeInMegabytes`` and ``MaxMessageSizeInKilobytes``.
Every error names the JSON path of what is wrong (``UserConfig.Namespaces[0].Queues[2].Properties.LockDuration``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbreference import Namespace, ServiceBusError
from sbreference.status import normal as normal_status
from sbreference.clock import TIMESPAN_MAX
from sbreference.entity import KB

from .rules import config_rules, config_rules_json

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)

#: emulator property name -> (EntityDescription field, kind of value)
_PROPERTIES = {
    "LockDuration": ("lock_duration", "duration"),
    "MaxDeliveryCount": ("max_delivery_count", "int"),
    "DefaultMessageTimeToLive": ("default_message_time_to_live", "duration"),
    "DeadLetteringOnMessageExpiration": ("dead_lettering_on_message_expiration", "bool"),
    "RequiresDuplicateDetection": ("requires_duplicate_detection", "bool"),
    "DuplicateDetectionHistoryTimeWindow": ("duplicate_detection_history_time_window", "duration"),
    "RequiresSession": ("requires_session", "bool"),
    "ForwardTo": ("forward_to", "path"),
    "ForwardDeadLetteredMessagesTo": ("forward_dead_lettered_messages_to", "path"),
    "EnablePartitioning": ("enable_partitioning", "bool"),
    "MaxSizeInMegabytes": ("max_size_in_megabytes", "int"),
    "MaxMessageSizeInKilobytes": ("max_message_size", "kilobytes"),
    "DeadLetteringOnFilterEvaluationExceptions": ("dead_lettering_on_filter_evaluation_exceptions", "bool"),
    "Status": ("status", "status"),  # Active, Disabled, SendDisabled, ReceiveDisabled (SETTLE-STATUS-*)
}
#: QueueProperties.MaxDeliveryCount is an Int32 (.NET, and the REST API's xs:int); the sizes are Int64 (long)
_LARGEST = {"MaxDeliveryCount": 2**31 - 1}
#: accepted but without effect in the model. AutoDeleteOnIdle is not in the emulator's Config.json schema (no
#: queue, topic or subscription property of https://github.com/Azure/azure-service-bus-emulator-installer/blob/main/ServiceBus-Emulator/Schema/Config-schema.json),
#: so it is not applied: a temporary entity is made through the REST API or $sbconform (SETTLE-IDLE-001)
_IGNORED = {"AutoDeleteOnIdle", "EnableBatchedOperations", "UserMetadata"}

#: the keys each object of the file may hold (the emulator's schema and our extensions);
#: any other key is an error naming its JSON path
_KEYS = {
    "root": {"UserConfig"},
    "user": {"Namespaces", "Logging"},
    "logging": {"Type"},
    "namespace": {"Name", "Sku", "PartitionCount", "SharedAccessKeys", "Queues", "Topics"},
    "key": {"KeyName", "Key"},
    "queue": {"Name", "Properties"},
    "topic": {"Name", "Properties", "Subscriptions"},
    "subscription": {"Name", "Properties", "Rules"},
}

# Entity names as Service Bus allows them: a queue or topic path is at most 260 characters,
# cannot start or end with a slash (QueueProperties.Name,
# https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.queueproperties.name),
# and "Entity segments can contain only letters, numbers, periods (.), hyphens (-), and
# underscores (_)" (the service's 400 answer, SubCode 40000); a subscription name is one such
# segment of at most 50 characters. So no name can be '$cbs', '$management' or
# 'q/$DeadLetterQueue'. A path with a 'Subscriptions' segment would be routed to a topic's
# subscription (``t/Subscriptions/s``), never to it: refused as unreachable.
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


class ConfigError(ValueError):
    """A configuration problem, naming the file and the JSON path."""


@dataclass
class Config:
    namespace_name: str = "sbemulatorns"
    sku: str = "standard"
    partition_count: int | None = None
    keys: dict[str, str] = field(default_factory=lambda: {DEFAULT_KEY_NAME: DEFAULT_KEY})
    queues: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    topics: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]]] = field(default_factory=list)
    source: str = "<defaults>"
    #: (topic, subscription) -> the subscription's rules, replacing $Default (sbconform/server/rules.py)
    rules: dict[tuple[str, str], list] = field(default_factory=dict)

    def build(self) -> Namespace:
        """A model namespace holding the configured entities."""
        ns = Namespace(self.namespace_name, sku=self.sku, partition_count=self.partition_count)
        # two passes: a forwarding destination must exist when forwarding is set (SETTLE-FWD-001),
        # and a config may list it after its source: forwarding is set once everything exists
        later: list[tuple[str, dict]] = []

        def without_forwarding(path: str, props: dict) -> dict:
            forwarding = {k: v for k, v in props.items() if k in FORWARDING and v is not None}
            if forwarding:
                later.append((path, forwarding))
            return {k: v for k, v in props.items() if k not in forwarding}

        for name, props in self.queues:
            ns.create_queue(name, **without_forwarding(name, props))
        for name, props, subs in self.topics:
            ns.create_topic(name, **without_forwarding(name, props))
            for sub, sub_props in subs:
                ns.create_subscription(name, sub, **without_forwarding(f"{name}/Subscriptions/{sub}", sub_props))
                if (name, sub) in self.rules:
                    path = f"{name}/Subscriptions/{sub}"
                    ns.remove_rule(path, "$Default")
                    for rule in self.rules[(name, sub)]:
                        ns.add_rule(path, rule)
        for path, forwarding in later:
            ns.update(path, **forwarding)
        return ns


#: entity properties naming another entity, set after every entity exists
FORWARDING = ("forward_to", "forward_dead_lettered_messages_to")
_FORWARDING_KEYS = {"forward_to": "ForwardTo", "forward_dead_lettered_messages_to": "ForwardDeadLetteredMessagesTo"}


def _forwards(at: str, name: str, props: dict) -> list[tuple[str, str, str]]:
    """(JSON path, entity, destination) of each forwarding property set on one entity."""
    return [(f"{at}.Properties.{key}", name, props[field]) for field, key in _FORWARDING_KEYS.items()
            if props.get(field) is not None]


def iso_duration_ms(text: str) -> int:
    """'PT1M' -> 60000 (days, hours, minutes, seconds; the emulator's durations)."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if m is None or text in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO 8601 duration like 'PT1M' or 'P1DT2H'")
    d, h, mi, s = (m[k] for k in "dhms")
    total = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60) * 1000
    return total + round(float(s or 0) * 1000)


def _keys(entry: Any, kind: str, where: str) -> None:
    """Unknown keys are errors (a misspelt ``Queues`` must not silently mean no queues)."""
    if isinstance(entry, dict):
        for key in entry:
            if key not in _KEYS[kind]:
                at = f"{where}.{key}" if where else str(key)
                raise ConfigError(f"{at}: unknown key (known here: {', '.join(sorted(_KEYS[kind]))})")


def check_entity_name(name: str, subscription: bool = False) -> str | None:
    """Why ``name`` cannot be an entity's name, or None."""
    limit = 50 if subscription else 260
    if len(name) > limit:
        return f"{name[:40]!r}...: longer than {limit} characters"
    segments = [name] if subscription else name.split("/")
    for segment in segments:
        if not _SEGMENT.match(segment):
            if subscription and "/" in name:
                return f"{name!r}: a subscription name is one segment, without '/'"
            if segment == "":
                return f"{name!r}: empty segment (a name cannot start or end with '/', nor hold '//')"
            return (f"{name!r}: segment {segment!r} holds characters Service Bus does not allow (letters, digits, "
                    f"'.', '-' and '_' only; '$' names such as '$cbs' or '$DeadLetterQueue' are the broker's)")
    if not subscription and "/subscriptions/" in name.lower() + "/":
        return f"{name!r}: unreachable, its 'Subscriptions' segment routes to a topic's subscription"
    return None


def _properties(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected an object of properties, got {type(raw).__name__}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        at = f"{where}.{key}"
        if key in _IGNORED:
            continue
        if key not in _PROPERTIES:
            raise ConfigError(f"{at}: unknown property (known: {', '.join(sorted(_PROPERTIES))})")
        name, kind = _PROPERTIES[key]
        if kind == "duration":
            try:
                out[name] = iso_duration_ms(value)
            except ValueError as error:
                raise ConfigError(f"{at}: {error}") from None
            if out[name] <= 0:
                raise ConfigError(f"{at}: expected a positive duration, got {value!r}")
            if out[name] > TIMESPAN_MAX + 1:  # + 1: TimeSpan.MaxValue itself, its last 0.58 ms rounded up
                raise ConfigError(f"{at}: {value!r} is longer than TimeSpan.MaxValue (P10675199DT2H48M5.4775807S), "
                                  "the longest duration Service Bus holds")
            out[name] = min(out[name], TIMESPAN_MAX)
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: expected true or false, got {value!r}")
            out[name] = value
        elif kind in ("int", "kilobytes"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{at}: expected an integer, got {value!r}")
            if value <= 0:
                raise ConfigError(f"{at}: expected a positive integer, got {value!r}")
            largest = _LARGEST.get(key, 2**63 - 1)
            if value > largest:
                raise ConfigError(f"{at}: {value} is more than {largest}, the largest Service Bus holds there "
                                  f"({'an Int32' if largest == 2**31 - 1 else 'an Int64'})")
            out[name] = value * KB if kind == "kilobytes" else value
        elif kind == "path":
            if value in ("", None):
                continue
            if not isinstance(value, str):
                raise ConfigError(f"{at}: expected an entity name, got {value!r}")
            out[name] = value
        elif kind == "status":
            try:
                out[name] = normal_status(value)
            except ServiceBusError as error:
                raise ConfigError(f"{at}: {error.text}") from None
    return out


def _once(named: dict[str, str], name: str, at: str, where: str) -> str:
    """``name``, the first time it is given (entity names are case-insensitive): a second time is
    an error at its own JSON path, naming the first (the model said only "already exists")."""
    first = named.setdefault(name.lower(), at)
    if first != at:
        raise ConfigError(f"{at}.Name: {name!r} is already the name of {first[len(where) + 1:]}")
    return name


def _name(entry: Any, where: str, kind: str | None = None) -> str:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object, got {type(entry).__name__}")
    if kind is not None:
        _keys(entry, kind, where)
    name = entry.get("Name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.Name: expected a non-empty string, got {name!r}")
    if kind in ("queue", "topic", "subscription"):
        problem = check_entity_name(name, subscription=kind == "subscription")
        if problem is not None:
            raise ConfigError(f"{where}.Name: {problem}")
    return name


def _list(parent: dict, key: str, where: str) -> list:
    value = parent.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}.{key}: expected a list, got {type(value).__name__}")
    return value


def parse_config(data: Any, source: str = "<config>") -> Config:
    """Check a parsed Config.json; every error names the JSON path."""
    def fail(where: str, text: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {text}")

    if not isinstance(data, dict) or not isinstance(data.get("UserConfig"), dict):
        raise fail("UserConfig", "missing (expected {\"UserConfig\": {\"Namespaces\": [...]}})")
    user = data["UserConfig"]
    try:
        _keys(data, "root", "")
        _keys(user, "user", "UserConfig")
        logging = user.get("Logging")
        if logging is not None:
            if not isinstance(logging, dict):
                raise ConfigError(f"UserConfig.Logging: expected an object, got {type(logging).__name__}")
            _keys(logging, "logging", "UserConfig.Logging")
        namespaces = _list(user, "Namespaces", "UserConfig")
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    if len(namespaces) != 1:
        raise fail("UserConfig.Namespaces", f"expected exactly one namespace, found {len(namespaces)}")
    config = Config(source=source)
    where = "UserConfig.Namespaces[0]"
    try:
        ns = namespaces[0]
        config.namespace_name = _name(ns, where, "namespace")
        sku = ns.get("Sku", "Standard")
        if not isinstance(sku, str) or sku.lower() not in ("basic", "standard", "premium"):
            raise ConfigError(f"{where}.Sku: expected Basic, Standard or Premium, got {sku!r}")
        config.sku = sku.lower()
        count = ns.get("PartitionCount")
        if count is not None and (config.sku != "premium" or count not in (1, 2, 4)):
            raise ConfigError(f"{where}.PartitionCount: 1, 2 or 4, on a Premium namespace only (got {count!r} on {sku})")
        config.partition_count = count
        if "SharedAccessKeys" in ns:  # absent: the emulator's well-known key; present: never empty
            keys = _list(ns, "SharedAccessKeys", where)
            if not keys:
                raise ConfigError(f"{where}.SharedAccessKeys: empty (omit it for the emulator's default key, or list at least one key)")
            config.keys = {}
            for i, entry in enumerate(keys):
                at = f"{where}.SharedAccessKeys[{i}]"
                if not isinstance(entry, dict):
                    raise ConfigError(f"{at}: expected {{\"KeyName\": string, \"Key\": string}}")
                _keys(entry, "key", at)
                for field_name in ("KeyName", "Key"):
                    if not isinstance(entry.get(field_name), str) or not entry[field_name]:
                        raise ConfigError(f"{at}.{field_name}: expected a non-empty string, got {entry.get(field_name)!r}")
                if entry["KeyName"] in config.keys:
                    raise ConfigError(f"{at}.KeyName: {entry['KeyName']!r} is listed twice")
                config.keys[entry["KeyName"]] = entry["Key"]
        forwards: list[tuple[str, str, str]] = []  # (JSON path, entity, target)
        named: dict[str, str] = {}  # queues and topics share one set of names, case-insensitive
        for i, q in enumerate(_list(ns, "Queues", where)):
            at = f"{where}.Queues[{i}]"
            name = _once(named, _name(q, at, "queue"), at, where)
            config.queues.append((name, _properties(q.get("Properties"), f"{at}.Properties")))
            forwards += _forwards(at, name, config.queues[-1][1])
        for i, t in enumerate(_list(ns, "Topics", where)):
            at = f"{where}.Topics[{i}]"
            name = _once(named, _name(t, at, "topic"), at, where)
            subs = []
            sub_names: dict[str, str] = {}
            for j, s in enumerate(_list(t if isinstance(t, dict) else {}, "Subscriptions", at)):
                sat = f"{at}.Subscriptions[{j}]"
                sub = _once(sub_names, _name(s, sat, "subscription"), sat, where)
                subs.append((sub, _properties(s.get("Properties"), f"{sat}.Properties")))
                try:
                    rules = config_rules(s.get("Rules"), f"{sat}.Rules")
                except ValueError as error:
                    raise ConfigError(str(error)) from None
                if rules is not None:
                    config.rules[(name, subs[-1][0])] = rules
                forwards += _forwards(sat, f"{name}/Subscriptions/{subs[-1][0]}", subs[-1][1])
            config.topics.append((name, _properties(t.get("Properties"), f"{at}.Properties"), subs))
            forwards += _forwards(at, name, config.topics[-1][1])
        entities = {n.lower() for n, _ in config.queues} | {n.lower() for n, _, _ in config.topics}
        for at, name, target in forwards:
            if target is None:
                continue
            if target.lower() not in entities:
                raise ConfigError(f"{at}: {target!r} names no queue or topic of this namespace")
            if target.lower() == name.lower():
                raise ConfigError(f"{at}: {name!r} cannot forward to itself")
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    try:
        config.build()  # the model's own checks (lock duration range, duplicates...)
    except ServiceBusError as error:
        raise ConfigError(f"{source}: {where}: {error.text}") from None
    return config


def load_config(path: str | Path | None) -> Config:
    if path is None:
        return Config()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config file: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
    return parse_config(data, str(path))


def config_json(config: Config) -> dict[str, Any]:
    """The emulator-schema document for a ``Config`` (what a target generates)."""
    back = {v[0]: (k, v[1]) for k, v in _PROPERTIES.items()}

    def props(p: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in p.items():
            key, kind = back[name]
            if kind == "duration":
                value = f"PT{value / 1000:g}S"
            elif kind == "kilobytes":
                value = value // KB
            out[key] = value
        return out

    ns: dict[str, Any] = {
        "Name": config.namespace_name,
        "Sku": config.sku.capitalize(),
        "SharedAccessKeys": [{"KeyName": k, "Key": v} for k, v in config.keys.items()],
        "Queues": [{"Name": n, "Properties": props(p)} for n, p in config.queues],
        "Topics": [
            {"Name": n, "Properties": props(p), "Subscriptions": [
                {"Name": s, "Properties": props(sp), **({"Rules": config_rules_json(config.rules[(n, s)])} if (n, s) in config.rules else {})}
                for s, sp in subs]}
            for n, p, subs in config.topics
        ],
    }
    if config.partition_count is not None:
        ns["PartitionCount"] = config.partition_count
    return {"UserConfig": {"Namespaces": [ns], "Logging": {"Type": "Console"}}}
