"""Subscription rules: a filter that selects messages, and an optional action that annotates them.

From Microsoft's "Topic filters and actions"
(https://learn.microsoft.com/en-us/azure/service-bus-messaging/topic-filters):
- every new subscription has the rule ``$Default`` with the true filter and no action (RULES-RULE-001);
- rules without actions are OR-ed: one copy however many match (RULES-RULE-002);
- each matching rule with an action makes its own copy, carrying ``RuleName`` and changed by
  that action only (RULES-ACT-001/002);
- correlation filters match named properties exactly, case-sensitively, all of them (RULES-CORR-*);
- SQL filters and actions are sbreference/sqlfilter.py.

``route(rules, message, ...)`` is the whole decision for one subscription: the copies to store,
or that the message is dead-lettered because a rule failed to evaluate (RULES-DLQ-001).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .clock import NEVER
from .errors import ErrorCode, ServiceBusError
from .message import Message
from .timevalues import Instant, Span, as_time, is_time, outward, same_time
from .sqlfilter import (
    SYSTEM_PROPERTIES,
    UNKNOWN,
    Evaluator,
    FilterEvaluationError,
    Properties,
    SqlActionStatement,
    SqlExpression,
    type_name,
    parse_action,
    parse_filter,
)

DEFAULT_RULE_NAME = "$Default"
#: The application property naming the rule whose action made a copy (RULES-ACT-001).
RULE_NAME_PROPERTY = "RuleName"
#: Dead-letter reason for a message whose rules failed to evaluate. The docs say such messages
#: are "captured in the DLQ along with the offending message" but name no reason code; this is
#: the model's (see discrepancy RULES-D-003), and the description carries the error's text.
FILTER_EVALUATION_DEAD_LETTER_REASON = "FilterEvaluationException"
#: Rule names are at most 50 characters (https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-quotas).
MAX_RULE_NAME_LENGTH = 50
#: RULES-RULE-006: filters per topic, over all its subscriptions (quotas page: "Number of SQL filters
#: per topic" 2,000, "Number of correlation filters per topic" 100,000); none per subscription.
MAX_SQL_FILTERS_PER_TOPIC = 2000
MAX_CORRELATION_FILTERS_PER_TOPIC = 100_000

#: Correlation filter properties, in the order of the AMQP correlation-filter list, with the
#: Message field each compares (https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-amqp-request-response).
CORRELATION_FIELDS: tuple[tuple[str, str], ...] = (
    ("correlation_id", "correlation_id"),
    ("message_id", "message_id"),
    ("to", "to"),
    ("reply_to", "reply_to"),
    ("subject", "subject"),  # "Label" on the wire and in older SDKs
    ("session_id", "session_id"),
    ("reply_to_session_id", "reply_to_session_id"),
    ("content_type", "content_type"),
)


def properties_of(
    message: Message, sequence_number: int | None = None, enqueued_time: int | None = None, size: int | None = None,
    epoch_ms: int = 0,
) -> Properties:
    """What a filter sees of a message: its system properties and its application properties (times: RULES-SQL-016).
    At the topic it has not been delivered, locked nor dead-lettered here (RULES-SQL-017); it expires at its
    enqueue time plus its time to live (DateTime.MaxValue without one: the topic's default is not known here)."""
    system = {f: getattr(message, f) for f in _MESSAGE_FIELDS}
    system["sequence_number"] = system["enqueued_sequence_number"] = sequence_number
    system["enqueued_time"] = enqueued_time
    system["size"] = size
    system["delivery_count"] = 0
    ttl = message.time_to_live
    system["expires_at"] = None if enqueued_time is None else enqueued_time + ttl if ttl is not None else NEVER
    return Properties(system, message.application_properties, epoch_ms)


#: the system properties a Message carries (a slotted dataclass: every instance has each field); the rest are the
#: broker's, set by properties_of or absent (null), so routing a message does not look for them on it
_MESSAGE_FIELDS = tuple(f for f in sorted(set(SYSTEM_PROPERTIES.values())) if f in Message.__dataclass_fields__)


# ----------------------------------------------------------------------- filters


@dataclass(frozen=True)
class TrueFilter:
    """Selects every message (SQL ``1=1``)."""

    def matches(self, props: Properties) -> bool:
        return True


@dataclass(frozen=True)
class FalseFilter:
    """Selects none (SQL ``1=0``)."""

    def matches(self, props: Properties) -> bool:
        return False


def _same(expected: Any, actual: Any) -> bool:
    """Correlation equality: strings case-sensitively; numbers by value; dates by instant (RULES-CORR-004);
    otherwise type and value."""
    if actual is None or actual is UNKNOWN:
        return False
    timed = same_time(expected, actual)
    if timed is not None:
        return timed
    num = (int, float)
    if isinstance(expected, num) and not isinstance(expected, bool) and isinstance(actual, num) and not isinstance(actual, bool):
        return expected == actual
    return type(expected) is type(actual) and expected == actual


@dataclass(frozen=True)
class CorrelationFilter:
    """RULES-CORR-001..003: every property it names must equal the message's (a logical AND)."""

    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    subject: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if all(getattr(self, name) is None for name, _ in CORRELATION_FIELDS) and not self.properties:
            raise ServiceBusError(
                ErrorCode.ARGUMENT_ERROR, "A correlation filter must name at least one property to match.", transient=False
            )
        for key, value in self.properties.items():
            if not isinstance(key, str) or not key:
                raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"correlation filter property name {key!r} is not a non-empty string", transient=False)
            if not isinstance(value, (str, int, float, bool)) and not is_time(value):  # RULES-CORR-004: dates, durations
                raise ServiceBusError(
                    ErrorCode.ARGUMENT_ERROR,
                    f"correlation filter property {key!r}: values are strings, numbers, booleans, dates or durations, "
                    f"not {type(value).__name__}",
                    transient=False,
                )

    def matches(self, props: Properties) -> bool:
        for name, message_field in CORRELATION_FIELDS:
            expected = getattr(self, name)
            if expected is not None and props.system.get(message_field) != expected:
                return False
        for key, expected in self.properties.items():
            if not _same(expected, props.user.get(key)):
                return False
        return True


@dataclass(frozen=True)
class SqlFilter:
    """A SQL-92 subset condition over system (``sys.``) and user properties (RULES-SQL-*)."""

    expression: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    parsed: SqlExpression | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.parsed is None:
            object.__setattr__(self, "parsed", parse_filter(self.expression, self.parameters))  # RULES-SQL-014

    @classmethod
    def unchecked(cls, expression: str, parameters: Mapping[str, Any] | None = None) -> "SqlFilter":
        """The filter as a client writes it, not yet parsed: the broker checks it when the rule
        is added (so a test can send invalid text and see the broker refuse it)."""
        f = cls.__new__(cls)
        object.__setattr__(f, "expression", expression)
        object.__setattr__(f, "parameters", dict(parameters or {}))
        object.__setattr__(f, "parsed", None)
        return f

    def checked(self) -> "SqlFilter":
        return self if self.parsed is not None else SqlFilter(self.expression, self.parameters)

    def matches(self, props: Properties) -> bool:
        return Evaluator(props).matches(self.parsed)


Filter = TrueFilter | FalseFilter | CorrelationFilter | SqlFilter


# ----------------------------------------------------------------------- actions


@dataclass(frozen=True)
class SqlRuleAction:
    """SET and REMOVE statements applied to the subscription's copy only (RULES-ACT-002/003)."""

    expression: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    statements: tuple[SqlActionStatement, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "statements", parse_action(self.expression, self.parameters))

    @classmethod
    def unchecked(cls, expression: str, parameters: Mapping[str, Any] | None = None) -> "SqlRuleAction":
        """Not yet parsed (see ``SqlFilter.unchecked``)."""
        a = cls.__new__(cls)
        object.__setattr__(a, "expression", expression)
        object.__setattr__(a, "parameters", dict(parameters or {}))
        object.__setattr__(a, "statements", None)
        return a

    def checked(self) -> "SqlRuleAction":
        return self if self.statements is not None else SqlRuleAction(self.expression, self.parameters)

    def apply(self, message: Message, props: Properties, forwards: bool = False) -> Message:
        """The annotated copy; statements run in order, each seeing the earlier ones' changes. ``forwards``: the
        subscription auto-forwards its copies (RULES-ACT-005)."""
        current = Properties(props.system, message.application_properties, props.epoch_ms)  # copies: the message stays as sent
        system, user = current.system, current.user  # each statement sees the earlier ones' changes
        evaluator = Evaluator(current)
        for st in self.statements:
            _, scope, name = st.target
            if scope == "sys":
                field_name = current.system_field(name)
                if field_name == "scheduled_enqueue_time":
                    # RULES-ACT-005: "When you set or update this property, it's ignored on the subscription. Although
                    # when autoforwarding to another queue or topic, they're reevaluated" (topic-filters): evaluated (an
                    # error still fails the action), applied only to a copy the subscription forwards, if a date.
                    when = None if st.verb == "REMOVE" else as_time(evaluator.eval(st.value))
                    if forwards and (st.verb == "REMOVE" or isinstance(when, Instant)):
                        system[field_name] = None if when is None else when.us // 1000 - props.epoch_ms
                    continue
                if field_name == "time_to_live":  # RULES-ACT-006: the copy's own, a TimeSpan
                    system[field_name] = None if st.verb == "REMOVE" else _time_to_live(evaluator.eval(st.value))
                    continue
                if field_name not in _WRITABLE:
                    raise FilterEvaluationError(f"the system property 'sys.{name}' cannot be changed by an action")
                if st.verb == "REMOVE":
                    system[field_name] = None
                    continue
                value = evaluator.eval(st.value)
                if value is UNKNOWN:
                    value = None
                if value is not None and not isinstance(value, str):
                    raise FilterEvaluationError(f"'sys.{name}' is a string; cannot set it to a {type(value).__name__}")
                system[field_name] = value
                continue
            key = current.user_key(name)
            if st.verb == "REMOVE":
                if key is not None:
                    del user[key]
                continue
            value = outward(evaluator.eval(st.value))  # a date or duration as the host stores it (RULES-SQL-016)
            if value is UNKNOWN:
                value = None
            if key is not None:
                old = user.pop(key)
                # "SET performs implicit conversion if possible": a long into an existing double.
                if isinstance(old, float) and isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
            user[key if key is not None else name] = value
        return message.with_changes(application_properties=user, time_to_live=system.get("time_to_live"),
                                    scheduled_enqueue_time=system.get("scheduled_enqueue_time"), **{f: system[f] for f in _WRITABLE})


def _time_to_live(value: Any) -> int | None:
    """RULES-ACT-006: a TimeSpan set as a copy's time to live, in milliseconds (null: the entity's default)."""
    if value is UNKNOWN or value is None:
        return None
    span = as_time(value)
    if not isinstance(span, Span) or span.us <= 0:
        raise FilterEvaluationError(f"'sys.TimeToLive' is a positive TimeSpan; cannot set it to {type_name(value)} {value!r}")
    return max(1, span.us // 1000)


_WRITABLE = frozenset(
    {"message_id", "correlation_id", "to", "reply_to", "subject", "session_id", "reply_to_session_id", "content_type", "partition_key"}
)


# ------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    name: str
    filter: Filter = field(default_factory=TrueFilter)
    action: SqlRuleAction | None = None

    def __post_init__(self) -> None:
        check_rule_name(self.name)


def check_rule_name(name: str) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_RULE_NAME_LENGTH or any(c in name for c in "/\\?#"):
        raise ServiceBusError(
            ErrorCode.ARGUMENT_ERROR,
            f"The rule name {name!r} is not valid: 1 to {MAX_RULE_NAME_LENGTH} characters, without '/', '\\\\', '?' or '#'.",
            transient=False,
        )


def default_rule() -> Rule:
    """RULES-RULE-001: a new subscription's rule: the true filter, no action."""
    return Rule(DEFAULT_RULE_NAME, TrueFilter())


class RuleSet:
    """A subscription's rules, by name (case-insensitive), in the order they were added.

    What they need of their surroundings is read when a message is routed, never copied ahead (a copy taken when the
    topic's route was resolved was stale for a scheduled message that became due after a subscription or rule was
    created): ``epoch_ms``, the UTC instant (epoch milliseconds) of the model's time 0, for the dates a filter sees
    (sys.EnqueuedTimeUtc, RULES-SQL-016): its namespace clock's ``epoch_ms`` (a server on real time: its start; the
    virtual clock: 1970-01-01T00:00:00Z); ``forwards``, whether the subscription auto-forwards its copies now
    (RULES-ACT-005). ``bind`` names the subscription and its namespace; unbound, 0 and False."""

    def __init__(self, rules: Sequence[Rule] | None = None) -> None:
        self.rules: dict[str, Rule] = {}
        self._subscription: Any = None
        self._namespace: Any = None
        for rule in (default_rule(),) if rules is None else rules:
            self.add(rule)

    def bind(self, subscription: Any, namespace: Any) -> None:
        """The subscription these rules belong to, and the namespace whose clock places its times in UTC."""
        self._subscription, self._namespace = subscription, namespace

    @property
    def epoch_ms(self) -> int:
        return getattr(self._namespace.clock, "epoch_ms", 0) if self._namespace is not None else 0

    @property
    def forwards(self) -> bool:
        return self._subscription is not None and self._subscription.description.forward_to is not None

    def add(self, rule: Rule) -> None:
        """RULES-SQL-014: SQL is checked here, whatever the caller did."""
        check_rule_name(rule.name)
        f = rule.filter.checked() if isinstance(rule.filter, SqlFilter) else rule.filter
        if not isinstance(f, (TrueFilter, FalseFilter, CorrelationFilter, SqlFilter)):
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"unknown filter {f!r}", transient=False)
        action = rule.action.checked() if rule.action is not None else None
        rule = Rule(rule.name, f, action)
        key = rule.name.lower()
        if key in self.rules:
            raise ServiceBusError(ErrorCode.ENTITY_ALREADY_EXISTS, f"The rule '{rule.name}' already exists.", transient=False)
        self.rules[key] = rule

    def remove(self, name: str) -> None:
        if self.rules.pop(str(name).lower(), None) is None:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The rule '{name}' was not found.", transient=False)

    def list(self) -> list[Rule]:
        return list(self.rules.values())

    def __len__(self) -> int:
        return len(self.rules)


def check_filter_quota(rule_sets: Iterable[RuleSet], rule: Rule) -> None:
    """RULES-RULE-006: refuse ``rule`` if its filter would take the topic whose subscriptions hold
    ``rule_sets`` past the quota of its kind. Reading: true and false filters are not counted."""
    kind, quota = (
        (SqlFilter, MAX_SQL_FILTERS_PER_TOPIC) if isinstance(rule.filter, SqlFilter)
        else (CorrelationFilter, MAX_CORRELATION_FILTERS_PER_TOPIC) if isinstance(rule.filter, CorrelationFilter)
        else (None, 0)
    )
    if kind is None:
        return
    held = sum(isinstance(r.filter, kind) for rules in rule_sets for r in rules.rules.values())
    if held >= quota:
        raise ServiceBusError(
            ErrorCode.QUOTA_EXCEEDED,
            f"The topic already holds {held} {'SQL' if kind is SqlFilter else 'correlation'} filters, its quota.",
            transient=False,
        )


@dataclass(frozen=True)
class Routed:
    """What one subscription does with one message: store these copies, or dead-letter it."""

    copies: tuple[Message, ...] = ()
    dead_letter: tuple[str, str] | None = None  # (reason, description)


def route(
    rules: RuleSet,
    message: Message,
    dead_letter_on_errors: bool,
    sequence_number: int | None = None,
    enqueued_time: int | None = None,
    size: int | None = None,
    new_guid: Callable[[], str] | None = None,
) -> Routed:
    """Evaluate every rule. Rules without action that match give one copy, the message as sent
    (RULES-RULE-002); each matching rule with an action gives its own annotated copy (RULES-ACT-001).
    A rule that fails to evaluate dead-letters the message when the subscription says so
    (RULES-DLQ-001), else counts as not matching (RULES-DLQ-002). No copy: nothing is stored
    here (RULES-RULE-003)."""
    if len(rules.rules) == 1:  # the usual case, $Default alone: no need to look at the message
        (only,) = rules.rules.values()
        if only.action is None and isinstance(only.filter, TrueFilter):
            return Routed(copies=(message,))
    props = properties_of(message, sequence_number, enqueued_time, size, rules.epoch_ms)
    plain = False
    copies: list[Message] = []
    for rule in rules.rules.values():
        try:
            if not rule.filter.matches(props):
                continue
            if rule.action is None:
                plain = True
                continue
            copy = rule.action.apply(message, props, rules.forwards)
        except FilterEvaluationError as error:
            if dead_letter_on_errors:
                return Routed(dead_letter=(FILTER_EVALUATION_DEAD_LETTER_REASON, f"rule '{rule.name}': {error}"))
            continue
        app = dict(copy.application_properties)
        app[RULE_NAME_PROPERTY] = rule.name
        copies.append(copy.with_changes(application_properties=app))
    return Routed(copies=((message,) if plain else ()) + tuple(copies))
