"""How the SDK target provisions entities and rules and injects faults (split out of ``sdk.py``).

The target talks to a *provisioner*: an object with ``call(operation, **body)`` answering the
operations of ``sbconform serve``'s ``$sbconform`` control node (``create-queue``,
``create-topic``, ``create-subscription``, ``delete``, ``update``, ``describe``,
``runtime-info``, ``partition``, ``entity-availability``, ``now``, ``advance-time``,
``next-due``) and, where the management REST API exists, ``add-rule``, ``remove-rule`` and
``list-rules``. Three provisioners:

- the control node itself (``ControlClient``, ``control=amqp``);
- ``azure_admin.AdminProvisioner``: ``ServiceBusAdministrationClient`` over the management REST
  API (a real Azure namespace, ``control=admin``);
- :class:`RestProvisioner` (``serve=true``, the default ``control=auto``): entities and rules
  through ``sbconform serve``'s management REST API with the same administration client, as an
  application provisions a Service Bus namespace; the control node only for what no real broker
  offers (partition and entity outages, virtual time), for updates (see ``REST_OPERATIONS``) and
  for entity properties the REST API cannot carry (``_rest_fields``).

Without a provisioner that has rules, rule operations go over AMQP on the subscription's
``$management`` node (the documented ``com.microsoft:add-rule`` etc.), through the SDK's own
request-response link of a subscription receiver.
"""

from __future__ import annotations

from typing import Any

from sbreference import ErrorCode, ServiceBusError
from sbreference import paths

from .azure_admin import FIELDS as ADMIN_FIELDS
from .azure_admin import AdminProvisioner
from .base import Handle

#: operations that go through the REST API. ``update`` stays on the control node: its refusals
#: (changing partitioning: invalid-operation; a partition down: entity-unavailable) are model
#: error codes that a REST answer (400, 503) cannot tell apart from an argument error or a busy server
REST_OPERATIONS = frozenset({"create-queue", "create-topic", "create-subscription", "delete", "describe",
                             "runtime-info", "add-rule", "remove-rule", "list-rules"})


def _rest_fields() -> dict[str, frozenset[str]]:
    """EntityDescription fields both the administration client sends and ``sbconform serve``'s
    ATOM reader applies to the model (``sbconform/server/atom.FIELDS``)."""
    from ..server.atom import FIELDS as ATOM_FIELDS

    return {kind: ADMIN_FIELDS[kind] & {field for field, _ in ATOM_FIELDS[kind].values()} for kind in ADMIN_FIELDS}


class RestProvisioner:
    """``sbconform serve``'s management REST API for entities and rules, its control node for the rest."""

    def __init__(self, admin: AdminProvisioner, node: Any) -> None:
        self.admin = admin
        self.node = node
        self.rest_fields = _rest_fields()
        self.rules = True

    def _expressible(self, operation: str, body: dict[str, Any]) -> bool:
        """Whether the REST API carries these properties (else the control node is used)."""
        properties = set(body.get("properties") or {})
        if not properties:
            return True
        if operation.startswith("create-"):
            return properties <= self.rest_fields[operation[len("create-"):]]
        # an update: what every kind the path may be takes
        kinds = ["subscription"] if paths.parse(body["path"]).subscription is not None else ["queue", "topic"]
        return any(properties <= self.rest_fields[k] for k in kinds)

    def call(self, operation: str, **body: Any) -> Any:
        if operation not in REST_OPERATIONS or not self._expressible(operation, body):
            return self.node.call(operation, **body)
        if operation == "describe":
            # what the REST API describes, over the control node's (which also has the
            # properties the REST API does not carry): a REST answer that disagrees wins, and shows
            return {**self.node.call("describe", **body), **self.admin.call("describe-own", **body)}
        if operation == "runtime-info":
            node = self.node.call("runtime-info", **body)
            try:
                return {**node, **self.admin.call("runtime-info", **body)}
            except ServiceBusError as error:
                if error.code is ErrorCode.INVALID_OPERATION:  # a topic: the REST API counts per subscription
                    return node
                raise
        return self.admin.call(operation, **body)

    def close(self) -> None:
        for part in (self.admin, self.node):
            try:
                part.close()
            except Exception:
                pass


class ProvisioningMixin:
    """The SDK target's entity management, faults and rules (``self.control`` is its provisioner)."""

    control: Any
    prefix: str
    _suffix: str
    created: list[str]
    _rule_clients: dict[str, Handle]

    def _control(self) -> Any:
        if self.control is None:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, "this endpoint cannot be managed at run time (no $sbconform control node)")
        return self.control

    # ------------------------------------------------------------- management
    def _name(self, name: str) -> str:
        return f"{self.prefix}{name}-{self._suffix}"

    def _tier_guard_entity(self, kind: str, properties: dict[str, Any]) -> None:
        """The SDK target's (sdk_tier.TierMixin): not graded where the namespace's tier answers otherwise."""

    def create_queue(self, name: str, **properties: Any) -> str:
        self._tier_guard_entity("queue", properties)
        path = self._control().call("create-queue", name=self._name(name), properties=properties)["path"]
        self.created.append(path)
        return path

    def create_topic(self, name: str, **properties: Any) -> str:
        self._tier_guard_entity("topic", properties)
        path = self._control().call("create-topic", name=self._name(name), properties=properties)["path"]
        self.created.append(path)
        return path

    def create_subscription(self, topic_path: str, name: str, **properties: Any) -> str:
        self._tier_guard_entity("subscription", properties)
        return self._control().call("create-subscription", topic=topic_path, name=name, properties=properties)["path"]

    def delete_entity(self, path: str) -> None:
        self._control().call("delete", path=path)

    def entity_counts(self, path: str) -> dict[str, Any]:
        return {str(k): v for k, v in self._control().call("runtime-info", path=path).items()}

    def update_entity(self, path: str, **properties: Any) -> None:
        self._tier_guard_entity("subscription" if paths.parse(path).subscription is not None else "queue", properties)
        self._control().call("update", path=path, properties=properties)

    def describe_entity(self, path: str) -> dict[str, Any]:
        return {str(k): v for k, v in self._control().call("describe", path=path).items()}

    def make_partition_unavailable(self, path: str, partition: int) -> None:
        self._control().call("partition", path=path, partition=partition, available=False)

    def make_partition_available(self, path: str, partition: int) -> None:
        self._control().call("partition", path=path, partition=partition, available=True)

    def make_unavailable(self, path: str, code: str = "entity-unavailable", transient: bool | None = None) -> None:
        self._control().call("entity-availability", path=path, available=False, code=code, transient=transient)

    def make_available(self, path: str) -> None:
        self._control().call("entity-availability", path=path, available=True)

    # ------------------------------------------------------------------ rules
    def _rules_over_rest(self) -> bool:
        return bool(getattr(self.control, "rules", False))

    # Over AMQP: the Python SDK has no rule API over AMQP (ServiceBusAdministrationClient speaks
    # HTTP): the rule operations are sent on the subscription's $management node, through the
    # SDK's own request-response link of a subscription receiver, in the documented format
    # (sbconform/server/rules.py). Not retried: a retried add-rule whose first reply was lost
    # would fail as already existing.
    def _rule_request(self, subscription_path: str, operation: bytes, body: dict) -> Any:
        import functools

        from azure.servicebus._common import mgmt_handlers

        handle = self._rule_clients.get(subscription_path)
        if handle is None:
            handle = self._rule_clients[subscription_path] = self.receiver(subscription_path)  # type: ignore[attr-defined]
        client = handle.private
        callback = functools.partial(mgmt_handlers.default, amqp_transport=client._amqp_transport)
        return self._call(client._mgmt_request_response, operation, body, callback)  # type: ignore[attr-defined]

    def add_rule(self, subscription_path: str, rule: Any) -> None:
        if self._rules_over_rest():
            self.control.call("add-rule", path=subscription_path, rule=rule)
            return
        from azure.servicebus._common.constants import REQUEST_RESPONSE_ADD_RULE_OPERATION

        from ..server.rules import add_rule_body

        self._rule_request(subscription_path, REQUEST_RESPONSE_ADD_RULE_OPERATION, add_rule_body(rule))

    def remove_rule(self, subscription_path: str, name: str) -> None:
        if self._rules_over_rest():
            self.control.call("remove-rule", path=subscription_path, name=name)
            return
        from azure.servicebus._common.constants import REQUEST_RESPONSE_REMOVE_RULE_OPERATION

        self._rule_request(subscription_path, REQUEST_RESPONSE_REMOVE_RULE_OPERATION, {"rule-name": name})

    def list_rules(self, subscription_path: str) -> list[Any]:
        if self._rules_over_rest():
            return list(self.control.call("list-rules", path=subscription_path))
        from azure.servicebus._common.constants import REQUEST_RESPONSE_GET_RULES_OPERATION

        from ..server.rules import rule_from_description

        rules: list[Any] = []
        while True:
            page = self._rule_request(subscription_path, REQUEST_RESPONSE_GET_RULES_OPERATION, {"skip": len(rules), "top": 100})
            entries = (page or {}).get(b"rules") or (page or {}).get("rules") or []
            for entry in entries:
                desc = entry.get(b"rule-description", entry.get("rule-description"))
                rules.append(rule_from_description(desc))
            if len(entries) < 100:
                return rules
