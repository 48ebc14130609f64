"""Subscription rules in the ATOM format of the Service Bus management REST API: the
``RuleDescription`` Service Bus writes, and the one a PUT body (or a subscription's
``DefaultRuleDescription``) holds, read into ``sbreference.Rule`` (``sbspec/wire.md`` section 6).
Pure functions; ``admin_http`` serves them."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from typing import Any

from sbreference.timevalues import SPAN_TICKS, Instant, Span

from .atom import _DURATION, API_VERSION, ATOM, SB, XSI, HttpError, _bool, _document, _el, _local, _utc, parse_xml

#: XML Schema, the namespace of the key-value pairs' value types (``d6p1:int``)
XSD = "http://www.w3.org/2001/XMLSchema"
#: CorrelationFilter elements in the order Service Bus writes them, with the model's field
CORRELATION_ELEMENTS = (
    ("CorrelationId", "correlation_id"), ("MessageId", "message_id"), ("To", "to"), ("ReplyTo", "reply_to"),
    ("Label", "subject"), ("SessionId", "session_id"), ("ReplyToSessionId", "reply_to_session_id"),
    ("ContentType", "content_type"),
)
#: the SQL compatibility level Service Bus writes for every SQL filter and action ("reserved, 20")
SQL_COMPATIBILITY_LEVEL = "20"
INT32_MAX = 2**31 - 1


def _value_type(value: Any) -> tuple[str, str]:
    """A key-value pair's value as (xs type, text), as the .NET data contract writes it
    (the Python SDK's ``serialize_value_type`` reads and writes the same names): dates as
    ``dateTime`` in UTC, durations as ``duration`` (RULES-CORR-004, RULES-SQL-016); the model's own (a TimeSpan added
    over AMQP as com.microsoft:timespan) as those."""
    if isinstance(value, Instant):
        value = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=value.us)
    elif isinstance(value, Span):
        value = dt.timedelta(microseconds=value.ticks // 10 if value.ticks >= 0 else -(-value.ticks // 10))
    if isinstance(value, dt.datetime):
        return "dateTime", _date_text(value)
    if isinstance(value, dt.timedelta):
        return "duration", _duration_text(value)
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, int):
        return ("int" if -INT32_MAX - 1 <= value <= INT32_MAX else "long"), str(value)
    if isinstance(value, float):
        return "double", repr(value)
    return "string", str(value)


def _date_text(value: dt.datetime) -> str:
    """A DateTime as XmlConvert writes a UTC one: ``2026-01-01T00:00:00Z``, fractional seconds without
    trailing zeros (a date without an offset is UTC, RULES-CORR-004)."""
    value = (value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value).astimezone(dt.timezone.utc)
    # the year as four digits: strftime's %Y writes year 1 as '1', which ISO 8601 readers refuse
    text = f"{value.year:04d}-{value:%m-%dT%H:%M:%S.%f}".rstrip("0").rstrip(".")
    return text + "Z"


def _duration_text(value: dt.timedelta) -> str:
    """A TimeSpan as an xs:duration (``PT1M30S``, ``-P1DT2H``, ``PT0.25S``)."""
    sign, value = ("-", -value) if value < dt.timedelta(0) else ("", value)
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    whole = f"{seconds}.{value.microseconds:06d}".rstrip("0").rstrip(".") if value.microseconds else str(seconds)
    time_part = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "") + (f"{whole}S" if whole != "0" else "")
    out = "P" + (f"{value.days}D" if value.days else "") + ("T" + time_part if time_part else "")
    return sign + (out if out != "P" else "PT0S")


def _parse_date(text: str) -> dt.datetime:
    """An xs:dateTime as a UTC DateTime; ValueError (not a valid dateTime) or OverflowError (its UTC
    instant outside DateTime's range, e.g. 0001-01-01T00:30:00+01:00) is the caller's 400."""
    value = dt.datetime.fromisoformat(text.strip())
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)


def _parse_duration(text: str) -> dt.timedelta:
    """An xs:duration read to the tick (100 ns, as XmlConvert.ToTimeSpan reads it; digits past the seventh are
    dropped), OverflowError past TimeSpan's range (Service Bus's reader overflows: the caller's 400), then held to the
    microsecond toward zero: written back, it is never larger than it was (TimeSpan.MaxValue, P10675199DT2H48M5.4775807S,
    rounded up to ...5.477581S, was past it: a .NET client could not read it back)."""
    m = _DURATION.match(text.strip())
    if not m or text.strip().lstrip("-") in ("P", "PT"):
        raise ValueError(text)
    days, hours, minutes = (int(g) if g else 0 for g in m.groups()[1:4])
    whole, _, fraction = (m.group(5) or "0").partition(".")
    ticks = ((days * 24 + hours) * 60 + minutes) * 60 * 10**7 + int(whole) * 10**7 + int((fraction + "0" * 7)[:7])
    if ticks > SPAN_TICKS - (0 if m.group(1) else 1):
        raise OverflowError(f"{text} is outside TimeSpan's range")
    span = dt.timedelta(microseconds=ticks // 10)
    return -span if m.group(1) else span


def _key_values(parent: ET.Element, name: str, values: Any) -> None:
    """``<Parameters>`` or ``<Properties>``: ``KeyValueOfstringanyType`` items. The value's
    type is ``i:type="d6p1:<xs type>"``: the JavaScript SDK reads the attribute as written
    (``i:type``) and drops the first five characters of its text."""
    holder = _el(parent, name)
    for key, value in dict(values or {}).items():
        pair = _el(holder, "KeyValueOfstringanyType")
        _el(pair, "Key", str(key))
        xs_type, text = _value_type(value)
        _el(pair, "Value", text, {"i:type": f"d6p1:{xs_type}", "xmlns:d6p1": XSD})


def rule_description_xml(parent: ET.Element, rule: Any, created: int) -> None:
    """A ``RuleDescription`` as Service Bus writes it (azure-service-bus-go's recorded answer:
    ``<Filter i:type="TrueFilter"><SqlExpression>1=1</SqlExpression><CompatibilityLevel>20
    </CompatibilityLevel></Filter><Action i:type="EmptyRuleAction"/><CreatedAt/><Name/>``)."""
    from sbreference import CorrelationFilter, FalseFilter, SqlFilter, TrueFilter

    desc = _el(parent, "RuleDescription", None, {"xmlns": SB, "xmlns:i": XSI})
    f = rule.filter
    if isinstance(f, CorrelationFilter):
        filt = _el(desc, "Filter", None, {"i:type": "CorrelationFilter"})
        for element, field in CORRELATION_ELEMENTS:
            if getattr(f, field) is not None:
                _el(filt, element, getattr(f, field))
        if f.properties:
            _key_values(filt, "Properties", f.properties)
    else:
        kind, text = (("TrueFilter", "1=1") if isinstance(f, TrueFilter) else ("FalseFilter", "1=0") if isinstance(f, FalseFilter)
                      else ("SqlFilter", f.expression))
        filt = _el(desc, "Filter", None, {"i:type": kind})
        _el(filt, "SqlExpression", text)
        _el(filt, "CompatibilityLevel", SQL_COMPATIBILITY_LEVEL)
        if isinstance(f, SqlFilter) and f.parameters:
            _key_values(filt, "Parameters", f.parameters)
    if rule.action is None:
        _el(desc, "Action", None, {"i:type": "EmptyRuleAction"})
    else:
        act = _el(desc, "Action", None, {"i:type": "SqlRuleAction"})
        _el(act, "SqlExpression", rule.action.expression)
        _el(act, "CompatibilityLevel", SQL_COMPATIBILITY_LEVEL)
        if rule.action.parameters:
            _key_values(act, "Parameters", rule.action.parameters)
    _el(desc, "CreatedAt", _utc(created))
    _el(desc, "Name", rule.name)


def _rule_entry_into(entry: ET.Element, found: dict[str, Any], host: str) -> None:
    url = f"https://{host}/{found['path']}?api-version={API_VERSION}"
    _el(entry, "id", url)
    _el(entry, "title", None, {"type": "text"}).text = found["rule"].name
    _el(entry, "published", _utc(found["created"]))
    _el(entry, "updated", _utc(found["updated"]))
    _el(entry, "link", None, {"rel": "self", "href": url})
    rule_description_xml(_el(entry, "content", None, {"type": "application/xml"}), found["rule"], found["created"])


def rule_entry_xml(found: dict[str, Any], host: str) -> bytes:
    """One rule: ``found`` holds ``path`` (``t/Subscriptions/s/Rules/r``), ``rule`` (a
    ``sbreference.Rule``), ``created`` and ``updated`` (epoch ms)."""
    entry = ET.Element("entry", {"xmlns": ATOM})
    _rule_entry_into(entry, found, host)
    return _document(entry)


def rule_feed_xml(items: list[dict[str, Any]], host: str, path: str, skip: int, top: int, more: bool) -> bytes:
    feed = ET.Element("feed", {"xmlns": ATOM})
    _el(feed, "title", None, {"type": "text"}).text = "Rules"
    query = f"$skip={skip}&$top={top}&api-version={API_VERSION}"
    _el(feed, "id", f"https://{host}/{path}?{query}")
    _el(feed, "updated", _utc(int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)))
    _el(feed, "link", None, {"rel": "self", "href": f"https://{host}/{path}?{query}"})
    if more:
        _el(feed, "link", None, {"rel": "next", "href": f"https://{host}/{path}?$skip={skip + top}&$top={top}&api-version={API_VERSION}"})
    for found in items:
        _rule_entry_into(_el(feed, "entry"), found, host)
    return _document(feed)


def _child(parent: ET.Element, name: str) -> ET.Element | None:
    for e in parent:
        if _local(e.tag) == name:
            return e
    return None


def _typed(e: ET.Element) -> str | None:
    """An ``i:type`` / ``xsi:type`` / ``p4:type`` attribute (prefixes are gone), without its prefix."""
    value = e.attrib.get("type")
    return value.rsplit(":", 1)[-1] if value else None


def _parse_key_values(holder: ET.Element | None, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if holder is None:
        return out
    for pair in holder:
        if _local(pair.tag) != "KeyValueOfstringanyType":
            continue
        key_e, value_e = _child(pair, "Key"), _child(pair, "Value")
        if key_e is None or not (key_e.text or "").strip() or value_e is None:
            raise HttpError(400, f"{where}: every KeyValueOfstringanyType needs a Key and a Value")
        key, text, xs_type = key_e.text.strip(), value_e.text or "", _typed(value_e) or "string"
        if key in out:
            raise HttpError(400, f"{where}: '{key}' appears twice")
        try:
            if xs_type in ("int", "long", "short", "byte", "unsignedInt", "unsignedShort", "unsignedByte"):
                out[key] = int(text)
            elif xs_type in ("double", "float", "decimal"):
                out[key] = float(text)
            elif xs_type == "boolean":
                out[key] = _bool(text)
            elif xs_type == "string":
                out[key] = text
            elif xs_type == "dateTime":  # RULES-CORR-004, RULES-SQL-016
                out[key] = _parse_date(text)
            elif xs_type == "duration":
                out[key] = _parse_duration(text)
            else:
                raise HttpError(400, f"{where}: '{key}' is of type {xs_type}; the broker takes string, int, long, double, "
                                     "boolean, dateTime and duration values")
        except (ValueError, OverflowError):
            raise HttpError(400, f"{where}: '{key}': '{text[:40]}' is not a valid {xs_type}") from None
    return out


def parse_rule(body: bytes, name: str) -> Any:
    """The ``sbreference.Rule`` a PUT body's ``RuleDescription`` describes, named ``name`` (the
    URL's: the body's ``Name`` is not trusted). SQL is left unchecked: the model checks it
    when the rule is added, and its error becomes the 400's detail."""
    root = parse_xml(body)
    desc = next((e for e in root.iter() if _local(e.tag) == "RuleDescription"), None)
    if desc is None:
        raise HttpError(400, "the request body holds no RuleDescription")
    return _rule_of(desc, name)


def parse_default_rule(body: bytes) -> Any:
    """A subscription's ``DefaultRuleDescription`` (the JavaScript SDK's ``defaultRuleOptions``):
    the rule the subscription is created with instead of ``$Default``'s true filter, named by
    its ``Name`` (``$Default`` if none); None when the description has none."""
    root = parse_xml(body)
    desc = next((e for e in root.iter() if _local(e.tag) == "DefaultRuleDescription"), None)
    if desc is None or len(desc) == 0:
        return None
    named = _child(desc, "Name")
    return _rule_of(desc, (named.text or "").strip() if named is not None and (named.text or "").strip() else "$Default")


def _rule_of(desc: ET.Element, name: str) -> Any:
    from sbreference import CorrelationFilter, FalseFilter, Rule, ServiceBusError, SqlFilter, SqlRuleAction, TrueFilter

    filt, act = _child(desc, "Filter"), _child(desc, "Action")
    try:
        rule_filter: Any = TrueFilter()  # no filter: the true filter, as the SDKs default it
        if filt is not None:
            kind = _typed(filt)
            sql = _child(filt, "SqlExpression")
            if kind is None:
                kind = "SqlFilter" if sql is not None else "CorrelationFilter"
            if kind == "TrueFilter":
                rule_filter = TrueFilter()
            elif kind == "FalseFilter":
                rule_filter = FalseFilter()
            elif kind == "SqlFilter":
                if sql is None or not (sql.text or "").strip():
                    raise HttpError(400, "Filter: a SqlFilter needs a SqlExpression")
                rule_filter = SqlFilter.unchecked(sql.text, _parse_key_values(_child(filt, "Parameters"), "Filter.Parameters"))
            elif kind == "CorrelationFilter":
                fields = {}
                for element, field in CORRELATION_ELEMENTS:
                    e = _child(filt, element)
                    if e is not None and e.text is not None and e.attrib.get("nil") != "true":
                        fields[field] = e.text
                props = _parse_key_values(_child(filt, "Properties"), "Filter.Properties")
                rule_filter = CorrelationFilter(**fields, properties=props)
            else:
                raise HttpError(400, f"Filter: unknown filter type '{kind}' (SqlFilter, CorrelationFilter, TrueFilter, FalseFilter)")
        rule_action = None
        if act is not None:
            kind = _typed(act)
            sql = _child(act, "SqlExpression")
            if kind in ("SqlRuleAction", "SqlFilterAction") or (kind is None and sql is not None):
                if sql is None or not (sql.text or "").strip():
                    raise HttpError(400, "Action: a SqlRuleAction needs a SqlExpression")
                rule_action = SqlRuleAction.unchecked(sql.text, _parse_key_values(_child(act, "Parameters"), "Action.Parameters"))
            elif kind not in (None, "EmptyRuleAction"):
                raise HttpError(400, f"Action: unknown action type '{kind}' (SqlRuleAction, EmptyRuleAction)")
        return Rule(name, rule_filter, rule_action)
    except ServiceBusError as error:
        raise HttpError(400, error.text) from None
