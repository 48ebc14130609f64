"""The model side of the management REST API (``admin_http.py``): each method runs on the AMQP
server's loop thread (``AdminHttp.call``) and returns plain data that ``atom.py`` writes as XML.
Rules are the model's (``sbreference/rules.py``): a rule created here filters what is sent over
AMQP, and the AMQP rule operations see it."""

from __future__ import annotations

import logging
from typing import Any

from sbreference import ErrorCode, Rule, ServiceBusError, paths
from sbreference.rules import RuleSet

from .atom import HttpError
from .values import entity_at

log = logging.getLogger("sbconform.serve")


class AdminApi:
    """The model side: every method runs on the AMQP server's loop thread."""

    def __init__(self, server: Any) -> None:
        self.server = server
        #: path (lower case) -> {"extras": {element: text}} (an entity's elements the model does not hold);
        #: a rule's also "created" and "updated" (epoch ms). An entity's times are the model's (``describe``).
        self.meta: dict[str, dict[str, Any]] = {}

    # -- helpers
    @property
    def ns(self):
        return self.server.namespace

    def _now(self) -> int:
        return self.server.clock.epoch_ms + self.server.clock.now

    def _meta(self, path: str) -> dict[str, Any]:
        key = path.lower()
        if key not in self.meta:
            self.meta[key] = {"created": self.server.clock.epoch_ms, "updated": self.server.clock.epoch_ms, "extras": {}}
        return self.meta[key]

    def _kind(self, path: str) -> str | None:
        """queue, topic or subscription; None if there is none at ``path`` (a queue's or topic's
        name may hold slashes: ``a/b/c``), once what time made due is applied (``_due``)."""
        self._due()
        parsed = paths.parse(path)
        entity = entity_at(self.ns, path)
        if entity is None or parsed.dead_letter:
            return None
        return "subscription" if parsed.subscription is not None else entity.kind

    def _due(self) -> None:
        """Deletion on idle (SETTLE-IDLE-001) applied before an entity is looked at: one idle past its
        AutoDeleteOnIdle is gone (it was listed, and describing it deleted it and failed the list with 404),
        and the server detaches its links (``Server.entities_deleted``)."""
        self.server.entities_deleted(self.ns.reap_idle(self.server.clock.now))

    def _name(self, path: str) -> str:
        """The entity's own spelling of its path."""
        return entity_at(self.ns, path).path

    # -- reads
    def describe(self, path: str) -> dict[str, Any] | None:
        """Everything an entry shows about one entity, or None if there is none."""
        kind = self._kind(path)
        if kind is None:
            return None
        d = self.ns.describe(path)
        info = self.ns.runtime_info(path)
        epoch = self.server.clock.epoch_ms
        # SETTLE-ENT-004: when the model created, updated and last accessed it (virtual ms since the server
        # started); never accessed: None (written as DateTime.MinValue, ``atom.NEVER``)
        return {"kind": kind, "path": self._name(path), "description": d, "info": info,
                "created": epoch + info["created_at"], "updated": epoch + info["updated_at"],
                "accessed": epoch + info["accessed_at"] if info.get("accessed_at") else None,
                "extras": dict(self._meta(path)["extras"])}

    def list(self, kind: str, skip: int, top: int, topic: str | None = None) -> list[dict[str, Any]]:
        self._due()
        if topic is not None:
            entity = self.ns.entities.get(topic.lower())
            if entity is None or entity.kind != "topic":
                raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{topic}' could not be found.")
            paths = [s.path for s in entity.subscriptions.values()]
        else:
            paths = [e.path for e in self.ns.entities.values() if e.kind == kind]
        paths.sort(key=str.lower)
        return [self.describe(p) for p in paths[skip:skip + top]]

    def namespace(self) -> dict[str, Any]:
        return {"name": self.ns.name if hasattr(self.ns, "name") else self.server.config.namespace_name,
                "sku": str(getattr(self.ns, "sku", self.server.config.sku)), "created": self.server.clock.epoch_ms}

    # -- writes
    def create(self, path: str, kind: str, props: dict[str, Any], extras: dict[str, str], default_rule: Any = None) -> dict[str, Any]:
        if self._kind(path) is not None or (kind != "subscription" and path.lower() in self.ns.entities):
            raise ServiceBusError(ErrorCode.ENTITY_ALREADY_EXISTS, f"The messaging entity '{path}' already exists.")
        if kind == "queue":
            self.ns.create_queue(path, **props)
        elif kind == "topic":
            self.ns.create_topic(path, **props)
        else:
            parsed = paths.parse(path)
            topic, name = parsed.entity, str(parsed.subscription)
            if default_rule is not None:
                RuleSet([default_rule])  # checked (SQL, name) before the subscription exists
            self.ns.create_subscription(topic, name, **props)
            if default_rule is not None:  # created with this rule instead of $Default's true filter
                self.ns.remove_rule(path, "$Default")
                self.ns.add_rule(path, default_rule)
        self.meta.pop(path.lower(), None)
        self._meta(path)["extras"] = extras
        log.info("entity created: %s '%s'", kind, path)
        return self.describe(path)

    def update(self, path: str, kind: str, props: dict[str, Any], extras: dict[str, str]) -> dict[str, Any]:
        found = self._kind(path)
        if found is None:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{path}' could not be found.")
        if found != kind:
            raise HttpError(400, f"'{path}' is a {found}, not a {kind}")
        current = self.ns.describe(path)
        # An update replaces the description: no ForwardTo (ForwardDeadLetteredMessagesTo) is none, how the
        # SDKs stop auto-forwarding (forward_to=None; .NET "set ForwardTo to null": SETTLE-FWD-001/002)
        props = {**{field: None for field in ("forward_to", "forward_dead_lettered_messages_to") if hasattr(current, field)}, **props}
        changes = {k: v for k, v in props.items() if getattr(current, k) != v}
        self.ns.update(path, **changes)  # even with none: an update (UpdatedAt; use, SETTLE-IDLE-002..004)
        if changes:
            self.server._mark_all_dirty()
        self._meta(path)["extras"] = extras
        log.info("entity updated: %s '%s' %s", kind, path, sorted(changes))
        return self.describe(path)

    def delete(self, path: str) -> None:
        kind = self._kind(path)
        if kind is None:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{path}' could not be found.")
        self.ns.delete(path)
        for key in [k for k in self.meta if k == path.lower() or k.startswith(path.lower() + "/")]:
            del self.meta[key]
        self.server._mark_all_dirty()
        self.server.entities_deleted([paths.entity_key(path)])  # its links detached
        log.info("entity deleted: %s '%s'", kind, path)

    # -- rules (sbreference/rules.py: a subscription's RuleSet, names case-insensitive)
    def _subscription(self, path: str) -> Any:
        if self._kind(path) != "subscription":
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{path}' could not be found.")
        return self.ns.subscription(path)

    def _rule_found(self, sub_path: str, rule: Any) -> dict[str, Any]:
        meta = self._meta(f"{sub_path}/Rules/{rule.name}")
        return {"path": f"{self._name(sub_path)}/Rules/{rule.name}", "rule": rule,
                "created": meta["created"], "updated": meta["updated"]}

    def rule(self, sub_path: str, name: str) -> dict[str, Any]:
        for rule in self.ns.list_rules(self._subscription(sub_path).path):
            if rule.name.lower() == name.lower():
                return self._rule_found(sub_path, rule)
        raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The rule '{name}' of '{sub_path}' could not be found.")

    def rules(self, sub_path: str, skip: int, top: int) -> list[dict[str, Any]]:
        rules = self.ns.list_rules(self._subscription(sub_path).path)  # in the order they were added, as Service Bus lists them
        return [self._rule_found(sub_path, r) for r in rules[skip:skip + top]]

    def create_rule(self, sub_path: str, rule: Any) -> dict[str, Any]:
        self.ns.add_rule(self._subscription(sub_path).path, rule)  # 409 if it exists; SQL checked (400)
        self.meta.pop(f"{sub_path}/Rules/{rule.name}".lower(), None)
        meta = self._meta(f"{sub_path}/Rules/{rule.name}")
        meta["created"] = meta["updated"] = self._now()
        log.info("rule created: '%s' on '%s'", rule.name, sub_path)
        return self.rule(sub_path, rule.name)

    def update_rule(self, sub_path: str, rule: Any) -> dict[str, Any]:
        """The rule replaced in place (it keeps its place among the subscription's rules)."""
        rules = self._subscription(sub_path).rules
        key = rule.name.lower()
        if key not in rules.rules:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The rule '{rule.name}' of '{sub_path}' could not be found.")
        checked = RuleSet([rule]).list()[0]  # the model's own checks (name, SQL) before anything changes
        rules.rules[key] = Rule(rules.rules[key].name, checked.filter, checked.action)
        self._meta(f"{sub_path}/Rules/{rule.name}")["updated"] = self._now()
        log.info("rule updated: '%s' on '%s'", rule.name, sub_path)
        return self.rule(sub_path, rule.name)

    def delete_rule(self, sub_path: str, name: str) -> None:
        self.ns.remove_rule(self._subscription(sub_path).path, name)  # 404 if there is none
        self.meta.pop(f"{sub_path}/Rules/{name}".lower(), None)
        log.info("rule deleted: '%s' on '%s'", name, sub_path)
