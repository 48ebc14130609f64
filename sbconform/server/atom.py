"""The ATOM format of the Service Bus management REST API: entity descriptions and feeds,
written as Service Bus writes them and read as tolerantly as Service Bus reads them
(``sbspec/wire.md`` section 6). Pure functions of plain data; ``admin_http`` serves them."""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
import xml.etree.ElementTree as ET
import xml.parsers.expat as expat
from typing import Any, Callable

from sbreference import TIMESPAN_MAX
from sbreference.entity import KB

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"

API_VERSION = "2021-05"
#: .NET TimeSpan.MaxValue as XmlConvert writes it: "never"
TIMESPAN_MAX_TEXT = "P10675199DT2H48M5.4775807S"
#: .NET DateTime.MinValue as Service Bus writes it: an AccessedAt of an entity never accessed
NEVER = "0001-01-01T00:00:00Z"

#: XML element -> (model field, kind) per entity kind; the rest is kept as sent (``extras``)
_COMMON = {
    "DefaultMessageTimeToLive": ("default_message_time_to_live", "duration"),
    "EnableBatchedOperations": ("enable_batched_operations", "bool"),
    "AutoDeleteOnIdle": ("auto_delete_on_idle", "duration"),
    "Status": ("status", "text"),  # Active, Disabled, SendDisabled, ReceiveDisabled (SETTLE-STATUS-*)
}
FIELDS = {
    "queue": {
        **_COMMON,
        "LockDuration": ("lock_duration", "duration"),
        "MaxSizeInMegabytes": ("max_size_in_megabytes", "int"),
        "RequiresDuplicateDetection": ("requires_duplicate_detection", "bool"),
        "RequiresSession": ("requires_session", "bool"),
        "DeadLetteringOnMessageExpiration": ("dead_lettering_on_message_expiration", "bool"),
        "DuplicateDetectionHistoryTimeWindow": ("duplicate_detection_history_time_window", "duration"),
        "MaxDeliveryCount": ("max_delivery_count", "int"),
        "ForwardTo": ("forward_to", "path"),
        "ForwardDeadLetteredMessagesTo": ("forward_dead_lettered_messages_to", "path"),
        "EnablePartitioning": ("enable_partitioning", "bool"),
        "MaxMessageSizeInKilobytes": ("max_message_size", "kilobytes"),
    },
    "topic": {
        **_COMMON,
        "MaxSizeInMegabytes": ("max_size_in_megabytes", "int"),
        "RequiresDuplicateDetection": ("requires_duplicate_detection", "bool"),
        "DuplicateDetectionHistoryTimeWindow": ("duplicate_detection_history_time_window", "duration"),
        "EnablePartitioning": ("enable_partitioning", "bool"),
        "MaxMessageSizeInKilobytes": ("max_message_size", "kilobytes"),
        "SupportOrdering": ("support_ordering", "bool"),
    },
    "subscription": {
        **_COMMON,
        "LockDuration": ("lock_duration", "duration"),
        "RequiresSession": ("requires_session", "bool"),
        "DeadLetteringOnMessageExpiration": ("dead_lettering_on_message_expiration", "bool"),
        "MaxDeliveryCount": ("max_delivery_count", "int"),
        "ForwardTo": ("forward_to", "path"),
        "ForwardDeadLetteredMessagesTo": ("forward_dead_lettered_messages_to", "path"),
        "DeadLetteringOnFilterEvaluationExceptions": ("dead_lettering_on_filter_evaluation_exceptions", "bool"),
    },
}
#: the order Service Bus writes a description's elements in (its serializer is order-sensitive)
ORDER = {
    "queue": ["LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
              "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
              "MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
              "AuthorizationRules", "Status", "ForwardTo", "UserMetadata", "CreatedAt", "UpdatedAt", "AccessedAt",
              "SupportOrdering", "CountDetails", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
              "ForwardDeadLetteredMessagesTo", "EnableExpress", "MaxMessageSizeInKilobytes"],
    "topic": ["DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
              "DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "SizeInBytes",
              "FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules", "Status", "UserMetadata",
              "CreatedAt", "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails", "SubscriptionCount",
              "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus", "EnableSubscriptionPartitioning",
              "EnableExpress", "MaxMessageSizeInKilobytes"],
    "subscription": ["LockDuration", "RequiresSession", "DefaultMessageTimeToLive", "DeadLetteringOnFilterEvaluationExceptions",
                     "DeadLetteringOnMessageExpiration", "MessageCount", "MaxDeliveryCount", "EnableBatchedOperations",
                     "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "CountDetails", "UserMetadata",
                     "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle", "EntityAvailabilityStatus"],
}
#: what Service Bus writes for the properties the model has no use for (clients require them)
SERVICE_DEFAULTS = {
    "queue": {"IsAnonymousAccessible": False, "SupportOrdering": True, "EnableExpress": False},
    "topic": {"IsAnonymousAccessible": False, "FilteringMessagesBeforePublishing": False, "SupportOrdering": True,
              "EnableSubscriptionPartitioning": False, "EnableExpress": False},
    "subscription": {},
}
DESCRIPTION = {"queue": "QueueDescription", "topic": "TopicDescription", "subscription": "SubscriptionDescription"}
#: what the broker computes: never taken from a request
RUNTIME = {"SizeInBytes", "MessageCount", "CountDetails", "CreatedAt", "UpdatedAt", "AccessedAt", "SubscriptionCount",
           "EntityAvailabilityStatus", "AuthorizationRules"}

_DURATION = re.compile(r"^(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


class HttpError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# ----------------------------------------------------------------- values
def parse_duration(text: str) -> int:
    """An xs:duration (as .NET's XmlConvert writes TimeSpans) in milliseconds."""
    text = text.strip()
    if text == TIMESPAN_MAX_TEXT:
        return TIMESPAN_MAX
    m = _DURATION.match(text)
    if not m or text in ("P", "PT") or m.group(1):
        raise HttpError(400, f"'{text}' is not a valid duration (ISO 8601, such as PT1M)")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups()[1:])
    total = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000
    if not math.isfinite(total):  # (400 digits: .NET's XmlConvert.ToTimeSpan throws OverflowException; round() raised here)
        raise HttpError(400, f"'{text[:40]}...' is not a valid duration: too large")
    return min(round(total), TIMESPAN_MAX)


def format_duration(ms: int) -> str:
    if ms >= TIMESPAN_MAX:
        return TIMESPAN_MAX_TEXT
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = rest / 1000
    out = "P" + (f"{days}D" if days else "")
    time_part = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds:
        time_part += (f"{seconds:.3f}".rstrip("0").rstrip(".")) + "S"
    if time_part:
        out += "T" + time_part
    return out if out != "P" else "PT0S"


def _utc(epoch_ms: int | None) -> str:
    """A UTC instant as Service Bus writes one (.NET's XmlConvert: fractional seconds without trailing zeros,
    none for a whole second: ``2018-10-17T20:45:50.48Z``, ``2018-10-17T20:45:50Z``); ``None`` (never) is
    DateTime.MinValue, ``0001-01-01T00:00:00Z``, what it writes as a never-accessed entity's AccessedAt
    (sbspec/wire.md 6)."""
    if epoch_ms is None:
        return NEVER
    text = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    return text.rstrip("0").rstrip(".") + "Z"


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise HttpError(400, f"'{text}' is not a boolean")
    return t == "true"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


# -------------------------------------------------------------------- XML
def _el(parent: ET.Element, name: str, text: Any = None, attrib: dict[str, str] | None = None) -> ET.Element:
    """A child element. Tags are written as Service Bus writes them: a default namespace
    declared on the ATOM root and again on the description (``xmlns="...connect"``), counts
    under the ``d2p1`` prefix; the JavaScript SDK's parser reads prefixes literally."""
    e = ET.SubElement(parent, name, attrib or {})
    if text is not None:
        e.text = text if isinstance(text, str) else ("true" if text is True else "false" if text is False else str(text))
    return e


def description_xml(found: dict[str, Any], parent: ET.Element, host: str) -> None:
    kind, d, info, extras = found["kind"], found["description"], found["info"], found["extras"]
    values: dict[str, Any] = {}
    for element, (field, how) in FIELDS[kind].items():
        value = getattr(d, field)
        if how == "duration":
            values[element] = format_duration(value)
        elif how == "kilobytes":
            values[element] = value // KB
        elif how == "path":
            if value is not None:
                values[element] = extras.get(element) or f"sb://{host}/{value}"
        else:
            values[element] = value
    scheduled = info.get("scheduled", 0)
    # TXN-VIA-002: what a send via this entity to a disabled destination left in its transfer dead-letter queue
    # ("messages transferred into dead letters", MessageCountDetails.TransferDeadLetterMessageCount); messages of
    # the entity, so in MessageCount as its dead-letter queue's are (our reading: no source says either way)
    transfer_dead = info.get("transfer_dead_letter", 0) if kind != "topic" else 0
    total = info.get("active", 0) + info.get("deferred", 0) + info.get("dead_letter", 0) + scheduled + transfer_dead
    values.update({
        "SizeInBytes": info.get("size_bytes", 0),
        "CreatedAt": _utc(found["created"]), "UpdatedAt": _utc(found["updated"]), "AccessedAt": _utc(found["accessed"]),
        "EntityAvailabilityStatus": str(info.get("availability_status", "available")).capitalize(),
    })
    if kind != "topic":
        values["MessageCount"] = total
    if kind == "topic":
        values["SubscriptionCount"] = info.get("subscription_count", 0)
    for element, text in extras.items():
        values.setdefault(element, text)
    for element, value in SERVICE_DEFAULTS[kind].items():
        values.setdefault(element, value)
    desc = _el(parent, DESCRIPTION[kind], None, {"xmlns": SB, "xmlns:i": XSI})
    for element in ORDER[kind]:
        if element == "CountDetails":
            counts = _el(desc, "CountDetails", None, {"xmlns:d2p1": COUNTS})
            active = info.get("active", 0) if kind != "topic" else 0
            dead = info.get("dead_letter", 0) if kind != "topic" else 0
            for name, value in (("ActiveMessageCount", active), ("DeadLetterMessageCount", dead),
                                ("ScheduledMessageCount", scheduled), ("TransferMessageCount", 0),
                                ("TransferDeadLetterMessageCount", transfer_dead)):
                _el(counts, f"d2p1:{name}", value)
        elif element == "AuthorizationRules":
            _el(desc, "AuthorizationRules")
        elif element in values:
            _el(desc, element, values[element])


def entry_xml(found: dict[str, Any], host: str) -> bytes:
    entry = ET.Element("entry", {"xmlns": ATOM})
    _entry_into(entry, found, host)
    return _document(entry)


def _entry_into(entry: ET.Element, found: dict[str, Any], host: str) -> None:
    url = f"https://{host}/{found['path']}?api-version={API_VERSION}"
    _el(entry, "id", url)
    # a subscription is titled by its name; a queue or topic by its whole path (it may hold slashes)
    title = found["path"].rsplit("/", 1)[-1] if found["kind"] == "subscription" else found["path"]
    _el(entry, "title", None, {"type": "text"}).text = title
    _el(entry, "published", _utc(found["created"]))
    _el(entry, "updated", _utc(found["updated"]))
    author = _el(entry, "author", None)
    _el(author, "name", host.split(":")[0])
    _el(entry, "link", None, {"rel": "self", "href": url})
    content = _el(entry, "content", None, {"type": "application/xml"})
    description_xml(found, content, host)


def feed_xml(title: str, items: list[dict[str, Any]], host: str, path: str, skip: int, top: int, more: bool) -> bytes:
    feed = ET.Element("feed", {"xmlns": ATOM})
    _el(feed, "title", None, {"type": "text"}).text = title
    _el(feed, "id", f"https://{host}/{path}?$skip={skip}&$top={top}&api-version={API_VERSION}")
    _el(feed, "updated", _utc(int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)))
    _el(feed, "link", None, {"rel": "self", "href": f"https://{host}/{path}?$skip={skip}&$top={top}&api-version={API_VERSION}"})
    if more:  # the SDK pages while a feed has a second link
        _el(feed, "link", None, {"rel": "next", "href": f"https://{host}/{path}?$skip={skip + top}&$top={top}&api-version={API_VERSION}"})
    for found in items:
        _entry_into(_el(feed, "entry"), found, host)
    return _document(feed)


def empty_feed() -> bytes:
    """What Service Bus answers a GET of an entity that does not exist: 200 and no entry."""
    feed = ET.Element("feed", {"xmlns": ATOM})
    _el(feed, "title", None, {"type": "text"}).text = "Publicly Listed Services"
    _el(feed, "subtitle", None, {"type": "text"}).text = "This is the list of publicly-listed services currently available."
    _el(feed, "id", f"uuid:{uuid.uuid4()};id=1")
    _el(feed, "updated", _utc(int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)))
    _el(feed, "generator", "Service Bus 1.1")
    return _document(feed)


def namespace_xml(info: dict[str, Any], host: str) -> bytes:
    entry = ET.Element("entry", {"xmlns": ATOM})
    _el(entry, "id", f"https://{host}/$namespaceinfo?api-version={API_VERSION}")
    _el(entry, "title", None, {"type": "text"}).text = info["name"]
    _el(entry, "updated", _utc(info["created"]))
    author = _el(entry, "author", None)
    _el(author, "name", info["name"])
    _el(entry, "link", None, {"rel": "self", "href": f"https://{host}/$namespaceinfo?api-version={API_VERSION}"})
    content = _el(entry, "content", None, {"type": "application/xml"})
    ni = _el(content, "NamespaceInfo", None, {"xmlns": SB, "xmlns:i": XSI})
    _el(ni, "CreatedTime", _utc(info["created"]))
    _el(ni, "MessagingSKU", info["sku"].capitalize())
    if info["sku"].lower() == "premium":
        _el(ni, "MessagingUnits", 1)
    _el(ni, "ModifiedTime", _utc(info["created"]))
    _el(ni, "Name", info["name"])
    _el(ni, "NamespaceType", "Messaging")
    return _document(entry)


def error_xml(status: int, detail: str) -> bytes:
    root = ET.Element("Error")
    ET.SubElement(root, "Code").text = str(status)
    ET.SubElement(root, "Detail").text = f"{detail} TrackingId:{uuid.uuid4()}, Timestamp:{_utc(int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000))}"
    return _document(root)


#: characters XML 1.0 cannot carry (its Char production, https://www.w3.org/TR/xml/#charsets): a NUL or an ESC
#: in a rule made over AMQP (any AMQP string may hold one) made a whole feed unreadable to every client
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str | None) -> str | None:
    return _NOT_XML.sub("\ufffd", text) if text and _NOT_XML.search(text) else text


def _document(root: ET.Element) -> bytes:
    """The document, every text and attribute value XML can carry (others written as U+FFFD)."""
    for e in root.iter():
        e.text, e.tail = _xml_safe(e.text), _xml_safe(e.tail)
        for name, value in e.attrib.items():
            e.attrib[name] = _xml_safe(value)  # type: ignore[assignment]
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _without_namespaces(body: bytes) -> bytes:
    """The body with namespace declarations and prefixes removed. The Python SDK sends
    ``<entry xmlns="...Atom" xmlns="...connect">`` (two default namespaces on one element:
    its ``ServiceBusXMLWorkaroundPolicy`` strips the ``ns1`` prefix), which Service Bus takes and a
    strict XML parser refuses; elements are matched by local name anyway."""
    body = re.sub(rb"""\sxmlns(?::[\w.-]+)?\s*=\s*("[^"]*"|'[^']*')""", b"", body)
    body = re.sub(rb"<(/?)[\w.-]+:", rb"<\1", body)
    return re.sub(rb"""(\s)[\w.-]+:([\w.-]+\s*=\s*["'])""", rb"\1\2", body)


def parse_xml(body: bytes) -> ET.Element:
    """A request body's root element, namespaces dropped (``_without_namespaces``). A body that
    declares a DTD is refused before any of it is expanded: Service Bus reads bodies with .NET's
    XmlReader, which prohibits DTDs by default (``DtdProcessing.Prohibit``,
    https://learn.microsoft.com/dotnet/api/system.xml.xmlreadersettings.dtdprocessing); expat would
    expand an internal entity up to 100 times the body's size (a 6 MB UserMetadata from 100 KB)."""

    def refuse(*_: Any) -> None:
        raise HttpError(400, "the request body declares a DTD (<!DOCTYPE>): DTDs are prohibited")

    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = refuse  # called before any of the DTD is read
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(_without_namespaces(body), True)
        return builder.close()
    except (expat.ExpatError, AssertionError) as error:  # (TreeBuilder: no element at all)
        raise HttpError(400, f"the request body is not XML: {error}") from None


#: UserMetadata: "Cannot be null. Max length is 1024 chars." (QueueProperties / TopicProperties /
#: SubscriptionProperties.UserMetadata, https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.queueproperties.usermetadata)
MAX_USER_METADATA = 1024


def parse_description(body: bytes, kind: str, namespace_path: Callable[[str], str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(model properties, other elements kept as sent) of a PUT body's description. Only elements
    the description writes back are kept (``ORDER``); others are ignored, as Service Bus's data
    contract ignores elements it does not know."""
    root = parse_xml(body)
    desc = None
    for e in root.iter():
        if _local(e.tag) == DESCRIPTION[kind]:
            desc = e
            break
    if desc is None:
        found = [_local(e.tag) for e in root.iter() if _local(e.tag).endswith("Description")]
        raise HttpError(400, f"the request body holds no {DESCRIPTION[kind]}" + (f" (found {found[0]})" if found else ""))
    props: dict[str, Any] = {}
    extras: dict[str, str] = {}
    for child in desc:
        name, text = _local(child.tag), (child.text or "").strip()
        if name in RUNTIME or name == "DefaultRuleDescription":
            continue
        if name not in FIELDS[kind]:
            if name == "UserMetadata" and len(text) > MAX_USER_METADATA:
                raise HttpError(400, f"UserMetadata is {len(text)} characters long; at most {MAX_USER_METADATA} are allowed")
            if text and name in ORDER[kind]:
                extras[name] = text
            continue
        if not text:
            continue
        field, how = FIELDS[kind][name]
        try:
            if how == "duration":
                props[field] = parse_duration(text)
            elif how == "bool":
                props[field] = _bool(text)
            elif how == "int":
                props[field] = int(text)
            elif how == "kilobytes":
                props[field] = int(text) * KB
            elif how == "path":
                props[field] = namespace_path(text)
                extras[name] = text
            elif how == "text":
                props[field] = text
        except ValueError:
            raise HttpError(400, f"{name}: '{text[:60]}' is not valid") from None
    return props, extras

