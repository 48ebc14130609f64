"""Subscription rules on the wire and in Config.json.

- AMQP (https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-amqp-request-response,
  "Rule operations"): ``com.microsoft:add-rule`` (body ``rule-name`` and ``rule-description``, a map
  holding ``sql-filter`` or ``correlation-filter`` and optionally ``sql-rule-action``, each a map),
  ``com.microsoft:remove-rule`` (``rule-name``) and ``com.microsoft:enumerate-rules`` (``top``,
  ``skip``; the answer's ``rules`` is a list of maps whose ``rule-description`` is the described
  list 0x0000013700000004 ``[filter, action, name]``, the filter one of the described lists
  sql-filter 0x000001370000006, true-filter ...07, false-filter ...08, correlation-filter ...09 (one
  digit fewer), the action empty-rule-action 0x0000013700000005 or sql-rule-action 0x0000013700000006). The server side (``rule_operation``)
  and the client side the SDK target uses (``add_rule_body``, ``rule_from_description``) are here,
  so the two agree by construction and are tested against each other through the SDK.
- Config.json in the schema of Microsoft's emulator: ``Subscriptions[].Rules[]`` with ``Name`` and
  ``Properties.FilterType`` (``Correlation`` or ``Sql``), ``CorrelationFilter`` (``CorrelationId``,
  ``MessageId``, ``To``, ``ReplyTo``, ``Label``, ``SessionId``, ``ReplyToSessionId``,
  ``ContentType``, ``Properties``), ``SqlFilter.SqlExpression`` and ``Action.SqlExpression``.
  Rules listed for a subscription are its rules: they replace ``$Default`` (as creating a
  subscription with a rule does); a rule may itself be named ``$Default``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sbreference.timevalues import Guid, Instant, Span, Uri, as_time, install_outward

from ..amqp import values as wire
from sbreference import CorrelationFilter, ErrorCode, FalseFilter, Rule, ServiceBusError, SqlFilter, SqlRuleAction, TrueFilter

#: The descriptor codes as Service Bus and its clients write them. The filters' have one digit
#: fewer than the rule description's and the actions' (0x1370000006, not 0x13700000006): Microsoft's
#: table (service-bus-amqp-request-response, "Enumerate rules": ``com.microsoft:sql-filter:list``
#: 0x000001370000006 ...), .NET ``AmqpSqlFilterCodec.Code = 0x000001370000006``, Java
#: ``ManagementConstants.SQL_FILTER_DESCRIPTOR`` (0x000001370000006L beside SQL_RULE_ACTION_DESCRIPTOR
#: 0x0000013700000006L), the JavaScript SDK's ``descriptorCodes`` (sqlFilterList 83483426822). With
#: the action's code for every filter, the JavaScript SDK's listRules threw "Found unexpected descriptor
#: code for the filter" on the first rule, and this module's client side failed on Service Bus's own.
RULE_DESCRIPTION = 0x0000013700000004
EMPTY_RULE_ACTION = 0x0000013700000005
SQL_RULE_ACTION = 0x0000013700000006
SQL_FILTER = 0x000001370000006
TRUE_FILTER = 0x000001370000007
FALSE_FILTER = 0x000001370000008
CORRELATION_FILTER = 0x000001370000009

#: correlation-filter map keys (AMQP) and list order, with the CorrelationFilter field each is
_CORRELATION_KEYS = (
    ("correlation-id", "correlation_id"),
    ("message-id", "message_id"),
    ("to", "to"),
    ("reply-to", "reply_to"),
    ("label", "subject"),
    ("session-id", "session_id"),
    ("reply-to-session-id", "reply_to_session_id"),
    ("content-type", "content_type"),
)
#: Config.json CorrelationFilter keys
_CONFIG_CORRELATION = {
    "CorrelationId": "correlation_id",
    "MessageId": "message_id",
    "To": "to",
    "ReplyTo": "reply_to",
    "Label": "subject",
    "SessionId": "session_id",
    "ReplyToSessionId": "reply_to_session_id",
    "ContentType": "content_type",
}

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _outward(value: Instant | Span | Guid | Uri) -> Any:
    """A date, duration, GUID or URI a rule action computed (or a rule holds), as serve writes it: a datetime (an AMQP
    timestamp on the wire), a described com.microsoft:timespan of its ticks (RULES-SQL-016), a UUID (an AMQP uuid,
    RULES-SQL-018), a described com.microsoft:uri (Service Bus's encodings: sbconform.amqp.values.dotnet_value)."""
    from proton import Described, symbol

    if isinstance(value, Guid):
        return uuid.UUID(value)
    if isinstance(value, Uri):
        return Described(symbol(wire.URI), str(value))
    if isinstance(value, Instant):
        return _EPOCH + dt.timedelta(microseconds=value.us)
    return Described(symbol(wire.TIMESPAN), value.ticks)


install_outward(_outward)
#: The SQL texts of the true and false filters on the wire (SQL 1=1 and 1=0, as the .NET SDK sends them).
TRUE_SQL, FALSE_SQL = "1=1", "1=0"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    return str(value)


def _plain(value: Any) -> Any:
    """An AMQP-decoded value as a plain Python value (pyamqp gives strings as bytes; proton a timestamp as an
    int subclass, which is a date: RULES-CORR-004, RULES-SQL-016)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bool):
        return bool(value)
    if type(value).__name__ == "timestamp" and isinstance(value, int):  # proton.timestamp: epoch milliseconds, read
        return wire.timestamp_datetime(int(value))  # as Service Bus reads it (out of DateTime's range: clamped)
    if type(value).__name__ == "Described" and hasattr(value, "descriptor"):  # proton's: Service Bus's TimeSpan, Uri...
        inner = value.value
        read = wire.dotnet_value(wire.Symbol(value.descriptor), int(inner) if type(inner) is not bool and isinstance(inner, int) else inner)
        return value if read is None else read
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _argument(text: str) -> ServiceBusError:
    return ServiceBusError(ErrorCode.ARGUMENT_ERROR, text, transient=False)


# ------------------------------------------------------------------ server side


def rule_from_add_request(body: dict) -> Rule:
    """The rule an add-rule request describes (SQL is checked when it is added to the model)."""
    body = _plain(body)
    name = body.get("rule-name")
    desc = body.get("rule-description")
    if not isinstance(name, str) or not isinstance(desc, dict):
        raise _argument("add-rule needs 'rule-name' (a string) and 'rule-description' (a map)")
    sql, corr, action = desc.get("sql-filter"), desc.get("correlation-filter"), desc.get("sql-rule-action")
    if (sql is None) == (corr is None):
        raise _argument("a rule-description holds exactly one of 'sql-filter' and 'correlation-filter'")
    if sql is not None:
        if not isinstance(sql, dict) or not isinstance(sql.get("expression"), str):
            raise _argument("'sql-filter' needs an 'expression' string")
        expression = sql["expression"]
        parameters = sql.get("parameters") or {}
        if expression.replace(" ", "") == TRUE_SQL and not parameters:
            rule_filter: Any = TrueFilter()
        elif expression.replace(" ", "") == FALSE_SQL and not parameters:
            rule_filter = FalseFilter()
        else:
            rule_filter = SqlFilter.unchecked(expression, parameters)
    else:
        if not isinstance(corr, dict):
            raise _argument("'correlation-filter' must be a map")
        fields = {f: corr[k] for k, f in _CORRELATION_KEYS if corr.get(k) is not None}
        for k, v in fields.items():
            if not isinstance(v, str):
                raise _argument(f"correlation-filter '{k}' must be a string")
        rule_filter = CorrelationFilter(**fields, properties=dict(corr.get("properties") or {}))
    rule_action = None
    if action is not None:
        if not isinstance(action, dict) or not isinstance(action.get("expression"), str):
            raise _argument("'sql-rule-action' needs an 'expression' string")
        rule_action = SqlRuleAction.unchecked(action["expression"], action.get("parameters") or {})
    return Rule(name, rule_filter, rule_action)


def _amqp_values(values: Any) -> dict:
    """Property or parameter values for an AMQP answer: a date as an AMQP timestamp, a duration as Service Bus writes a
    TimeSpan (com.microsoft:timespan; a Python timedelta was no AMQP value: the answer failed to encode and closed the
    connection), a GUID as a uuid."""
    from proton import timestamp

    out = {}
    for k, v in dict(values).items():
        t = as_time(v)
        if isinstance(v, (Guid, Uri)):
            v = _outward(v)
        elif type(t) is Span:
            v = _outward(t)
        elif t is not None:
            v = timestamp(t.ticks // 10_000)
        out[k] = v
    return out


def rule_description(rule: Rule) -> Any:
    """The described list enumerate-rules answers with for one rule."""
    from proton import Described, ulong

    f = rule.filter
    if isinstance(f, TrueFilter):
        filt = Described(ulong(TRUE_FILTER), [TRUE_SQL])
    elif isinstance(f, FalseFilter):
        filt = Described(ulong(FALSE_FILTER), [FALSE_SQL])
    elif isinstance(f, SqlFilter):
        filt = Described(ulong(SQL_FILTER), [f.expression])
    else:
        values = [getattr(f, field) for _, field in _CORRELATION_KEYS]
        filt = Described(ulong(CORRELATION_FILTER), [*values, _amqp_values(f.properties)])
    if rule.action is None:
        act = Described(ulong(EMPTY_RULE_ACTION), [])
    else:
        act = Described(ulong(SQL_RULE_ACTION), [rule.action.expression])
    return Described(ulong(RULE_DESCRIPTION), [filt, act, rule.name])


def rule_operation(namespace: Any, path: str, operation: str, body: dict) -> tuple[int, Any] | None:
    """add-rule, remove-rule and enumerate-rules on ``<topic>/Subscriptions/<name>/$management``;
    ``None`` for any other operation."""
    if operation == "com.microsoft:add-rule":
        namespace.add_rule(path, rule_from_add_request(body))
        return 200, {}
    if operation == "com.microsoft:remove-rule":
        name = _text(body.get("rule-name"))
        if not name:
            raise _argument("remove-rule needs 'rule-name'")
        namespace.remove_rule(path, name)
        return 200, {}
    if operation == "com.microsoft:enumerate-rules":
        skip, top = int(body.get("skip", 0)), int(body.get("top", 100))
        if skip < 0 or top < 1:
            raise _argument(f"enumerate-rules needs skip >= 0 and top >= 1 (got skip={skip}, top={top})")
        rules = namespace.list_rules(path)[skip: skip + top]
        return 200, {"rules": [{"rule-description": rule_description(r)} for r in rules]}
    return None


# ------------------------------------------------------------------ client side


def add_rule_body(rule: Rule) -> dict:
    """The add-rule request body for ``rule``."""
    f = rule.filter
    desc: dict[str, Any] = {}
    if isinstance(f, TrueFilter):
        desc["sql-filter"] = {"expression": TRUE_SQL}
    elif isinstance(f, FalseFilter):
        desc["sql-filter"] = {"expression": FALSE_SQL}
    elif isinstance(f, SqlFilter):
        desc["sql-filter"] = {"expression": f.expression, **({"parameters": dict(f.parameters)} if f.parameters else {})}
    elif isinstance(f, CorrelationFilter):
        corr: dict[str, Any] = {k: getattr(f, field) for k, field in _CORRELATION_KEYS if getattr(f, field) is not None}
        if f.properties:
            corr["properties"] = dict(f.properties)
        desc["correlation-filter"] = corr
    else:
        raise _argument(f"unknown filter {f!r}")
    if rule.action is not None:
        params = {"parameters": dict(rule.action.parameters)} if rule.action.parameters else {}
        desc["sql-rule-action"] = {"expression": rule.action.expression, **params}
    return {"rule-name": rule.name, "rule-description": desc}


def _items(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else []


def rule_from_description(value: Any) -> Rule:
    """A rule from one enumerate-rules entry's ``rule-description`` (as pyamqp decodes it:
    described lists with a ``descriptor``)."""
    parts = _items(value)
    if len(parts) < 3:
        raise ValueError(f"malformed rule-description: {value!r}")
    filt, act, name = parts[0], parts[1], _text(parts[2]) or ""
    code = getattr(filt, "descriptor", None)
    items = [_plain(v) for v in _items(filt)]
    if code == TRUE_FILTER:
        rule_filter: Any = TrueFilter()
    elif code == FALSE_FILTER:
        rule_filter = FalseFilter()
    elif code == SQL_FILTER:
        text = str(items[0])
        # the true and false filters are SQL 1=1 and 1=0; a broker may describe them either way
        rule_filter = TrueFilter() if text.replace(" ", "") == TRUE_SQL else FalseFilter() if text.replace(" ", "") == FALSE_SQL else SqlFilter(text)
    elif code == CORRELATION_FILTER:
        items += [None] * (9 - len(items))
        fields = {field: items[i] for i, (_, field) in enumerate(_CORRELATION_KEYS) if items[i] is not None}
        rule_filter = CorrelationFilter(**fields, properties=items[8] or {})
    else:
        raise ValueError(f"unknown filter descriptor {code!r}")
    action = None
    if getattr(act, "descriptor", None) == SQL_RULE_ACTION and _items(act):
        action = SqlRuleAction(_text(_items(act)[0]))
    return Rule(name, rule_filter, action)


# ------------------------------------------------------------------ Config.json


# The keys Microsoft's emulator reads in a rule (its Config.json): anything else is a mistake
# (a misspelt key would otherwise be ignored and the rule silently mean something else)
_RULE_KEYS = frozenset({"Name", "Properties"})
_RULE_PROPERTY_KEYS = frozenset({"FilterType", "CorrelationFilter", "SqlFilter", "Action"})
_SQL_KEYS = frozenset({"SqlExpression", "CompatibilityLevel", "RequiresPreprocessing"})


def _only(entry: dict, known: frozenset[str], at: str) -> None:
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ValueError(f"{at}.{unknown[0]}: unknown key (known here: {', '.join(sorted(known))})")


def config_rules(raw: Any, where: str) -> list[Rule] | None:
    """``Subscriptions[j].Rules`` -> rules (None if absent); errors name the JSON path and
    are raised as ValueError for the caller to wrap."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValueError(f"{where}: expected a list of rules, got {type(raw).__name__}")
    rules = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("Name"), str) or not entry["Name"]:
            raise ValueError(f"{at}.Name: expected a non-empty string")
        _only(entry, _RULE_KEYS, at)
        props = entry.get("Properties") or {}
        if not isinstance(props, dict):
            raise ValueError(f"{at}.Properties: expected an object")
        _only(props, _RULE_PROPERTY_KEYS, f"{at}.Properties")
        for part in ("SqlFilter", "Action"):
            if isinstance(props.get(part), dict):
                _only(props[part], _SQL_KEYS, f"{at}.Properties.{part}")
        kind = str(props.get("FilterType", "")).lower()
        try:
            if kind == "correlation":
                corr = props.get("CorrelationFilter")
                if not isinstance(corr, dict):
                    raise ValueError(f"{at}.Properties.CorrelationFilter: expected an object")
                unknown = set(corr) - set(_CONFIG_CORRELATION) - {"Properties"}
                if unknown:
                    raise ValueError(f"{at}.Properties.CorrelationFilter.{sorted(unknown)[0]}: unknown property (known: {', '.join(sorted(_CONFIG_CORRELATION))}, Properties)")
                fields = {_CONFIG_CORRELATION[k]: v for k, v in corr.items() if k != "Properties" and v not in (None, "")}
                for k, v in fields.items():
                    if not isinstance(v, str):
                        raise ValueError(f"{at}.Properties.CorrelationFilter: {k} must be a string, got {v!r}")
                user = corr.get("Properties") or {}
                if not isinstance(user, dict):
                    raise ValueError(f"{at}.Properties.CorrelationFilter.Properties: expected an object")
                rule_filter: Any = CorrelationFilter(**fields, properties=user)
            elif kind == "sql":
                sql = props.get("SqlFilter")
                if not isinstance(sql, dict) or not isinstance(sql.get("SqlExpression"), str):
                    raise ValueError(f"{at}.Properties.SqlFilter.SqlExpression: expected a string")
                rule_filter = SqlFilter(sql["SqlExpression"])
            elif kind in ("true", "truefilter"):
                rule_filter = TrueFilter()
            elif kind in ("false", "falsefilter"):
                rule_filter = FalseFilter()
            else:
                raise ValueError(f"{at}.Properties.FilterType: expected Correlation or Sql, got {props.get('FilterType')!r}")
            action = None
            raw_action = props.get("Action")
            if raw_action not in (None, {}):
                if not isinstance(raw_action, dict) or not isinstance(raw_action.get("SqlExpression"), str):
                    raise ValueError(f"{at}.Properties.Action.SqlExpression: expected a string")
                if raw_action["SqlExpression"].strip():
                    action = SqlRuleAction(raw_action["SqlExpression"])
            rules.append(Rule(entry["Name"], rule_filter, action))
        except ServiceBusError as error:
            raise ValueError(f"{at}: {error.text}") from None
    names = [r.name.lower() for r in rules]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: two rules share a name")
    return rules


def config_rules_json(rules: list[Rule]) -> list[dict]:
    out = []
    back = {v: k for k, v in _CONFIG_CORRELATION.items()}
    for rule in rules:
        f = rule.filter
        if isinstance(f, CorrelationFilter):
            corr = {back[field]: getattr(f, field) for field in back if getattr(f, field) is not None}
            if f.properties:
                corr["Properties"] = dict(f.properties)
            props: dict[str, Any] = {"FilterType": "Correlation", "CorrelationFilter": corr}
        else:
            expression = TRUE_SQL if isinstance(f, TrueFilter) else FALSE_SQL if isinstance(f, FalseFilter) else f.expression
            props = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}
        if rule.action is not None:
            props["Action"] = {"SqlExpression": rule.action.expression}
        out.append({"Name": rule.name, "Properties": props})
    return out
