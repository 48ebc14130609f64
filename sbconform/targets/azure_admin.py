"""Provisioning on a real Azure namespace through the SDK's administration client.

The SDK target provisions the entities a scenario needs through a *provisioner*: an object
with ``call(operation, **body)`` answering the operations of the ``$sbconform`` control node
of ``sbconform serve`` (``create-queue``, ``create-topic``, ``create-subscription``,
``delete``, ``update``, ``describe``, ``runtime-info``), with the same answers. On our
endpoint that is the control node itself; on Azure it is :class:`AdminProvisioner`, over
``azure.servicebus.management.ServiceBusAdministrationClient`` (HTTPS, the connection
string's key). Azure has no fault injection: ``partition`` and ``entity-availability`` are
refused, and the SDK target does not declare ``partition-outage`` or ``entity-outage`` there.

Properties arrive as ``sbreference.EntityDescription`` field names in model milliseconds
(``TIMESPAN_MAX`` meaning "never", Azure's default, so it is left out of the request).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

from sbreference import ErrorCode, ServiceBusError
from sbreference.clock import TIMESPAN_MAX
from sbreference.paths import parse as parse_path

#: EntityDescription fields that are durations (model milliseconds)
DURATIONS = frozenset({"lock_duration", "default_message_time_to_live", "duplicate_detection_history_time_window", "auto_delete_on_idle"})

#: which EntityDescription fields each kind of entity takes on Azure
FIELDS = {
    "queue": frozenset({
        "lock_duration", "max_delivery_count", "default_message_time_to_live", "dead_lettering_on_message_expiration",
        "requires_duplicate_detection", "duplicate_detection_history_time_window", "requires_session",
        "max_size_in_megabytes", "max_message_size", "enable_batched_operations", "auto_delete_on_idle",
        "enable_partitioning", "forward_to", "forward_dead_lettered_messages_to", "status",
    }),
    "topic": frozenset({
        "default_message_time_to_live", "requires_duplicate_detection", "duplicate_detection_history_time_window",
        "max_size_in_megabytes", "max_message_size", "enable_batched_operations", "auto_delete_on_idle",
        "enable_partitioning", "status", "support_ordering",
    }),
    "subscription": frozenset({
        "lock_duration", "max_delivery_count", "default_message_time_to_live", "dead_lettering_on_message_expiration",
        "requires_session", "enable_batched_operations", "auto_delete_on_idle", "forward_to",
        "forward_dead_lettered_messages_to", "dead_lettering_on_filter_evaluation_exceptions", "status",
    }),
}

#: Azure's own default maximum message size (Standard tier); only Premium accepts another
DEFAULT_MAX_MESSAGE_SIZE = 256 * 1024


#: "never" (.NET TimeSpan.MaxValue, 10675199.02:48:05.4775807) as the administration client writes a
#: duration: whole microseconds, so 0.7 µs short of it; read back it is TIMESPAN_MAX again (``description_of``)
NEVER = dt.timedelta(days=10675199, hours=2, minutes=48, seconds=5, microseconds=477580)


def admin_arguments(kind: str, properties: dict[str, Any], update: bool = False) -> dict[str, Any]:
    """EntityDescription fields as the administration client's keyword arguments for ``kind``.

    A field the kind does not take is an argument error naming it, never silently dropped. On a
    create, "never" and the default message size are left to Azure's defaults; an ``update``
    sends them, since the entity may have another value now."""
    unknown = sorted(set(properties) - FIELDS[kind])
    if unknown:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"a {kind} on Azure takes no {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for name, value in properties.items():
        if name in DURATIONS:
            if value is None or int(value) >= TIMESPAN_MAX:
                if update:
                    out[name] = NEVER
                continue  # "never": Azure's default (TimeSpan.MaxValue)
            out[name] = dt.timedelta(milliseconds=int(value))
        elif name == "max_message_size":
            if update or int(value) != DEFAULT_MAX_MESSAGE_SIZE:
                out["max_message_size_in_kilobytes"] = -(-int(value) // 1024)
        else:
            out[name] = value
    return out


def description_of(kind: str, props: Any, whole: bool = True) -> dict[str, Any]:
    """An administration client ``*Properties`` object as EntityDescription fields: every field, as
    the control node describes an entity (the model's whole description); a field the kind has no
    property for on Azure (a queue's support_ordering, say) keeps the EntityDescription default,
    which nothing can change there (``admin_arguments`` refuses it). ``whole=False``: the kind's own
    fields only (``describe-own``: what the REST API says, over the control node's answer)."""
    import dataclasses

    from sbreference import EntityDescription

    out: dict[str, Any] = {f.name: getattr(EntityDescription(), f.name) for f in dataclasses.fields(EntityDescription)} if whole else {}
    for name in FIELDS[kind]:
        if name == "max_message_size":
            kb = getattr(props, "max_message_size_in_kilobytes", None)
            out[name] = DEFAULT_MAX_MESSAGE_SIZE if kb is None else int(kb) * 1024
            continue
        value = getattr(props, name, None)
        if name == "status":  # an EntityStatus (a str enum) or a string; Active when not said
            value = str(getattr(value, "value", value) or "Active")
        if name in DURATIONS:
            value = TIMESPAN_MAX if value is None else min(TIMESPAN_MAX, round(value.total_seconds() * 1000))
        if name in ("forward_to", "forward_dead_lettered_messages_to") and value:
            value = entity_path_of(value)
        out[name] = value
    return out


def entity_path_of(address: str) -> str:
    """A forwarding destination as the entity path it was asked with: the administration client sends
    (and Service Bus gives back) a full address, ``sb://<namespace>/<path>``
    (``management/_utils._normalize_entity_path_to_full_path_if_needed``); the model and the
    scenarios name the path."""
    import urllib.parse

    parsed = urllib.parse.urlparse(address)
    return parsed.path.lstrip("/") if parsed.netloc else address


def split_path(path: str) -> tuple[str, str, str | None]:
    """``q`` -> ("entity", "q", None): a queue or a topic; ``t/Subscriptions/s`` -> ("subscription", "t", "s")."""
    parsed = parse_path(path)  # the one entity-path parser (sbreference/paths.py)
    if parsed.subscription is not None:
        return "subscription", parsed.entity, parsed.subscription
    return "entity", path, None


class AdminProvisioner:
    """The control node's operations, carried out with ``ServiceBusAdministrationClient``."""

    def __init__(self, connection_string: str, client: Any | None = None) -> None:
        if client is None:
            from azure.servicebus.management import ServiceBusAdministrationClient

            client = ServiceBusAdministrationClient.from_connection_string(connection_string)
        self.client = client
        self.kinds: dict[str, str] = {}  # path -> "queue" | "topic", for what this target made
        self.rules = True  # add-rule, remove-rule and list-rules are the client's rule calls

    def call(self, operation: str, **body: Any) -> Any:
        handler: Callable[..., Any] | None = getattr(self, "_" + operation.replace("-", "_"), None)
        if handler is None:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"Azure cannot do {operation!r} for a test (no fault injection)")
        try:
            return handler(**body)
        except ServiceBusError:
            raise
        except ValueError as error:  # the client refusing an argument before any request
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, str(error).splitlines()[0][:500] if str(error) else "ValueError") from error
        except Exception as error:  # azure.core.exceptions.*: translated by name, no import needed
            if not (type(error).__module__.startswith("azure.") or isinstance(error, OSError)
                    or any(cls.__name__ in _ERRORS for cls in type(error).__mro__)):
                raise  # a fault of the kit's own (a TypeError, say), not the broker's answer
            raise _translate(error) from error

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------ operations
    def _create_queue(self, name: str, properties: dict[str, Any]) -> dict[str, str]:
        self.client.create_queue(name, **admin_arguments("queue", properties))
        self.kinds[name] = "queue"
        return {"path": name}

    def _create_topic(self, name: str, properties: dict[str, Any]) -> dict[str, str]:
        self.client.create_topic(name, **admin_arguments("topic", properties))
        self.kinds[name] = "topic"
        return {"path": name}

    def _create_subscription(self, topic: str, name: str, properties: dict[str, Any]) -> dict[str, str]:
        self.client.create_subscription(topic, name, **admin_arguments("subscription", properties))
        return {"path": f"{topic}/Subscriptions/{name}"}

    def _kind(self, path: str) -> str:
        if path not in self.kinds:
            try:
                self.client.get_queue(path)
                self.kinds[path] = "queue"
            except Exception as error:
                # a topic's entry read as a queue's has no QueueDescription: the SDK's get_queue fails
                # with AttributeError ('NoneType' object has no attribute 'authorization_rules'),
                # not ResourceNotFoundError (seen against the REST API, azure-servicebus 7.15)
                if type(error).__name__ != "ResourceNotFoundError" and not isinstance(error, (AttributeError, TypeError)):
                    raise
                self.client.get_topic(path)
                self.kinds[path] = "topic"
        return self.kinds[path]

    def _delete(self, path: str) -> dict:
        what, entity, sub = split_path(path)
        if what == "subscription":
            self.client.delete_subscription(entity, sub)
        elif self._kind(entity) == "queue":
            self.client.delete_queue(entity)
        else:
            self.client.delete_topic(entity)
        self.kinds.pop(entity, None)
        return {}

    def _get(self, path: str) -> tuple[str, Any]:
        what, entity, sub = split_path(path)
        if what == "subscription":
            return "subscription", self.client.get_subscription(entity, sub)
        kind = self._kind(entity)
        return kind, (self.client.get_queue if kind == "queue" else self.client.get_topic)(entity)

    def _describe(self, path: str) -> dict[str, Any]:
        kind, props = self._get(path)
        return description_of(kind, props)

    def _describe_own(self, path: str) -> dict[str, Any]:
        kind, props = self._get(path)
        return description_of(kind, props, whole=False)

    def _update(self, path: str, properties: dict[str, Any]) -> dict:
        kind, props = self._get(path)
        for name, value in admin_arguments(kind, properties, update=True).items():
            if name == "max_message_size_in_kilobytes" and value * 1024 == DEFAULT_MAX_MESSAGE_SIZE and \
                    getattr(props, name, None) is None:
                continue  # a namespace that reports none (Standard) has the default: nothing to send
            setattr(props, name, value)
        if kind == "subscription":  # update_subscription(topic_name, subscription)
            self.client.update_subscription(split_path(path)[1], props)
        else:
            getattr(self.client, f"update_{kind}")(props)
        return {}

    def _runtime_info(self, path: str) -> dict[str, Any]:
        """Counts as the control node gives them. Azure reports no deferred count: it is what
        the total holds beyond the active, dead-lettered, scheduled and transfer messages."""
        what, entity, sub = split_path(path)
        if what == "subscription":
            info, props = self.client.get_subscription_runtime_properties(entity, sub), self.client.get_subscription(entity, sub)
        elif self._kind(entity) == "queue":
            info, props = self.client.get_queue_runtime_properties(entity), self.client.get_queue(entity)
        else:
            raise ServiceBusError(ErrorCode.INVALID_OPERATION, f"{path} is a topic: its messages are counted per subscription")
        counted = sum(getattr(info, f, 0) or 0 for f in (
            "active_message_count", "dead_letter_message_count", "scheduled_message_count",
            "transfer_message_count", "transfer_dead_letter_message_count"))
        status = getattr(props, "availability_status", None)
        return {
            "active": info.active_message_count,
            "deferred": max(0, (info.total_message_count or 0) - counted),
            "dead_letter": info.dead_letter_message_count,
            # a subscription's runtime properties have no scheduled count (scheduled messages wait in the topic)
            "scheduled": getattr(info, "scheduled_message_count", 0) or 0,
            "size_bytes": getattr(info, "size_in_bytes", None),
            "availability_status": str(getattr(status, "value", status) or "available").lower(),
        }


    # ------------------------------------------------------------------ rules
    def _add_rule(self, path: str, rule: Any) -> dict:
        _, topic, sub = split_path(path)
        rule_filter, action = sdk_rule(rule)
        self.client.create_rule(topic, sub, rule.name, filter=rule_filter, action=action)
        return {}

    def _remove_rule(self, path: str, name: str) -> dict:
        _, topic, sub = split_path(path)
        self.client.delete_rule(topic, sub, name)
        return {}

    def _list_rules(self, path: str) -> list[Any]:
        _, topic, sub = split_path(path)
        return [model_rule(r) for r in self.client.list_rules(topic, sub)]


#: CorrelationFilter field -> the administration client's CorrelationRuleFilter keyword ("Label" is the subject)
_CORRELATION = {"correlation_id": "correlation_id", "message_id": "message_id", "to": "to", "reply_to": "reply_to",
                "subject": "label", "session_id": "session_id", "reply_to_session_id": "reply_to_session_id",
                "content_type": "content_type"}


def sdk_rule(rule: Any) -> tuple[Any, Any]:
    """A ``sbreference.Rule``'s filter and action as the administration client's objects."""
    from azure.servicebus.management import CorrelationRuleFilter, FalseRuleFilter, SqlRuleAction, SqlRuleFilter, TrueRuleFilter

    from sbreference import CorrelationFilter, FalseFilter, SqlFilter, TrueFilter

    f = rule.filter
    if isinstance(f, TrueFilter):
        out: Any = TrueRuleFilter()
    elif isinstance(f, FalseFilter):
        out = FalseRuleFilter()
    elif isinstance(f, SqlFilter):
        out = SqlRuleFilter(f.expression, parameters=dict(f.parameters) or None)
    elif isinstance(f, CorrelationFilter):
        fields = {arg: getattr(f, field) for field, arg in _CORRELATION.items() if getattr(f, field) is not None}
        out = CorrelationRuleFilter(**fields, properties=dict(f.properties) or None)
    else:
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown filter {f!r}")
    action = None if rule.action is None else SqlRuleAction(rule.action.expression, parameters=dict(rule.action.parameters) or None)
    return out, action


def model_rule(props: Any) -> Any:
    """An administration client ``RuleProperties`` as a ``sbreference.Rule``."""
    from azure.servicebus.management import CorrelationRuleFilter, FalseRuleFilter, TrueRuleFilter

    from sbreference import CorrelationFilter, FalseFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter

    f = props.filter
    if isinstance(f, TrueRuleFilter):
        out: Any = TrueFilter()
    elif isinstance(f, FalseRuleFilter):
        out = FalseFilter()
    elif isinstance(f, CorrelationRuleFilter):
        fields = {field: getattr(f, arg) for field, arg in _CORRELATION.items() if getattr(f, arg) is not None}
        out = CorrelationFilter(**fields, properties=dict(f.properties or {}))
    else:
        out = SqlFilter(f.sql_expression, dict(getattr(f, "parameters", None) or {}))
    action = props.action
    return Rule(props.name, out, None if action is None else SqlRuleAction(action.sql_expression, dict(action.parameters or {})))


_ERRORS = {
    "ResourceExistsError": ErrorCode.ENTITY_ALREADY_EXISTS,
    "ResourceNotFoundError": ErrorCode.ENTITY_NOT_FOUND,
    "ClientAuthenticationError": ErrorCode.UNAUTHORIZED,
    "HttpResponseError": ErrorCode.ARGUMENT_ERROR,
}


def _translate(error: Exception) -> ServiceBusError:
    status = getattr(error, "status_code", None)
    if status == 403:  # "Quota exceeded" (Create Rule, Create Queue: 403)
        return ServiceBusError(ErrorCode.QUOTA_EXCEEDED, str(error).splitlines()[0][:500], transient=False)
    if status == 503:  # "Service unavailable" (an entity or partition down): transient
        return ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, str(error).splitlines()[0][:500], transient=True)
    if status in (408, 429, 500, 502, 504):
        # throttled (429) or failed on the service's side: what azure-core's own RetryPolicy retries
        # (azure/core/pipeline/policies/_retry.py: 408, 429, 500, 502, 503, 504), not a bad argument
        code = ErrorCode.TIMEOUT if status == 408 else ErrorCode.SERVER_BUSY
        return ServiceBusError(code, str(error).splitlines()[0][:500], transient=True)
    for cls in type(error).__mro__:
        if cls.__name__ in _ERRORS:
            return ServiceBusError(_ERRORS[cls.__name__], str(error).splitlines()[0][:500] if str(error) else cls.__name__)
    return ServiceBusError(ErrorCode.CONNECTION_LOST, f"{type(error).__name__}: {error}")
