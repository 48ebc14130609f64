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

from reference import Namespace, ServiceBusError
from reference.entity import KB

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
    "EnablePartitioning": ("enable_partitioning", "bool"),
    "MaxSizeInMegabytes": ("max_size_in_megabytes", "int"),
    "MaxMessageSizeInKilobytes": ("max_message_size", "kilobytes"),
    "DeadLetteringOnFilterEvaluationExceptions": ("dead_lettering_on_filter_evaluation_exceptions", "bool"),
}
#: accepted but without effect in the model
_IGNORED = {"ForwardDeadLetteredMessagesTo", "Status", "AutoDeleteOnIdle", "EnableBatchedOperations", "UserMetadata"}


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
        for name, props in self.queues:
            ns.create_queue(name, **props)
        for name, props, subs in self.topics:
            ns.create_topic(name, **props)
            for sub, sub_props in subs:
                ns.create_subscription(name, sub, **sub_props)
                if (name, sub) in self.rules:
                    path = f"{name}/Subscriptions/{sub}"
                    ns.remove_rule(path, "$Default")
                    for rule in self.rules[(name, sub)]:
                        ns.add_rule(path, rule)
        return ns


def iso_duration_ms(text: str) -> int:
    """'PT1M' -> 60000 (days, hours, minutes, seconds; the emulator's durations)."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if m is None or text in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO 8601 duration like 'PT1M' or 'P1DT2H'")
    d, h, mi, s = (m[k] for k in "dhms")
    total = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60) * 1000
    return total + round(float(s or 0) * 1000)


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
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: expected true or false, got {value!r}")
            out[name] = value
        elif kind in ("int", "kilobytes"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{at}: expected an integer, got {value!r}")
            out[name] = value * KB if kind == "kilobytes" else value
        elif kind == "path":
            if value in ("", None):
                continue
            if not isinstance(value, str):
                raise ConfigError(f"{at}: expected an entity name, got {value!r}")
            out[name] = value
    return out


def _name(entry: Any, where: str) -> str:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object, got {type(entry).__name__}")
    name = entry.get("Name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.Name: expected a non-empty string, got {name!r}")
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
        namespaces = _list(user, "Namespaces", "UserConfig")
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    if len(namespaces) != 1:
        raise fail("UserConfig.Namespaces", f"expected exactly one namespace, found {len(namespaces)}")
    config = Config(source=source)
    where = "UserConfig.Namespaces[0]"
    try:
        ns = namespaces[0]
        config.namespace_name = _name(ns, where)
        sku = ns.get("Sku", "Standard")
        if not isinstance(sku, str) or sku.lower() not in ("basic", "standard", "premium"):
            raise ConfigError(f"{where}.Sku: expected Basic, Standard or Premium, got {sku!r}")
        config.sku = sku.lower()
        count = ns.get("PartitionCount")
        if count is not None and (config.sku != "premium" or count not in (1, 2, 4)):
            raise ConfigError(f"{where}.PartitionCount: 1, 2 or 4, on a Premium namespace only (got {count!r} on {sku})")
        config.partition_count = count
        keys = _list(ns, "SharedAccessKeys", where)
        if keys:
            config.keys = {}
            for i, entry in enumerate(keys):
                at = f"{where}.SharedAccessKeys[{i}]"
                if not isinstance(entry, dict) or not isinstance(entry.get("KeyName"), str) or not isinstance(entry.get("Key"), str):
                    raise ConfigError(f"{at}: expected {{\"KeyName\": string, \"Key\": string}}")
                config.keys[entry["KeyName"]] = entry["Key"]
        for i, q in enumerate(_list(ns, "Queues", where)):
            at = f"{where}.Queues[{i}]"
            config.queues.append((_name(q, at), _properties(q.get("Properties"), f"{at}.Properties")))
        for i, t in enumerate(_list(ns, "Topics", where)):
            at = f"{where}.Topics[{i}]"
            subs = []
            for j, s in enumerate(_list(t if isinstance(t, dict) else {}, "Subscriptions", at)):
                sat = f"{at}.Subscriptions[{j}]"
                subs.append((_name(s, sat), _properties(s.get("Properties"), f"{sat}.Properties")))
                try:
                    rules = config_rules(s.get("Rules"), f"{sat}.Rules")
                except ValueError as error:
                    raise ConfigError(str(error)) from None
                if rules is not None:
                    config.rules[(_name(t, at), subs[-1][0])] = rules
            config.topics.append((_name(t, at), _properties(t.get("Properties"), f"{at}.Properties"), subs))
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
