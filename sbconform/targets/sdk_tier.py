"""The namespace's tier (SKU) on the SDK target: read from the service, and what it lets the kit grade.

The scenarios grade the namespace under test as a Standard one (``expected_tier``): "A Standard
queue cannot be given a max message size above 256 KB" (SETTLE-TIER-001), "A Standard queue cannot
be larger than 5 GB unless partitioned" (SETTLE-TIER-004), topics, sessions and transactions
everywhere. Given a connection string the target used to take the namespace for a Standard one, so a
Premium namespace failed the Standard limits (it rightly accepts 100 MB messages and 80 GB queues)
and a Basic one every scenario that needs a topic: false verdicts.

The tier is read from the service: ``ServiceBusAdministrationClient.get_namespace_properties()``,
whose ``messaging_sku`` is "The SKU/tier of the namespace. "Basic", "Standard" and "Premium""
(https://learn.microsoft.com/javascript/api/@azure/service-bus/namespaceproperties; the .NET
``NamespaceProperties.MessagingSku``: https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.namespaceproperties),
the REST API's ``GET /$namespaceinfo`` (``sbconform serve`` answers it: ``server/admin_http.py``,
``MessagingSKU`` from its config's Sku). It needs the ``Manage`` claim ("Insufficient permission to
perform this operation ... the necessary claims":
https://learn.microsoft.com/dotnet/api/azure.messaging.servicebus.administration.servicebusadministrationclient.getnamespacepropertiesasync).
It is asked through the connection string on Azure (``control=admin``), through the option
``admin_connection_string`` on a development endpoint (sbconform serve's ``--http-port``, the
emulator's 5300), once per endpoint and process.

What follows:

- a Basic namespace lacks, as capabilities, what ``sbreference.tiers.TIERS["basic"]`` says it lacks
  (topics and so rules, sessions, duplicate detection, auto-forwarding, transactions), a Premium one
  the partitioned entities of Standard (``PREMIUM_LACKS``): those scenarios are skipped, with the reason;
- a namespace that is not known to be Standard lacks ``standard-namespace``: the scenarios grading
  Standard limits (tagged ``@needs:standard-namespace``: SETTLE-TIER-001, -004) are skipped up front;
- in any other scenario, an operation whose outcome the model's tier table (``sbreference.tiers.check_entity``,
  ``capped_time_to_live``, the message sizes) gives differently on the namespace's tier than on the
  Standard one the scenario grades is skipped, one operation deciding it, with the same reason: "target
  'sdk' lacks capability 'standard-namespace' for this operation (...)" (``sdk_offset.not_graded``);
- when the service refuses (a key without Manage) the option ``tier=Basic|Standard|Premium`` is the
  user's word for it; without it the tier is unknown on Azure, and every such operation is not
  graded. A development endpoint whose tier cannot be read (no ``admin_connection_string``) is taken
  as Standard, as the emulator and ``sbconform serve``'s default config are, and ``describe`` says so.
"""

from __future__ import annotations

from typing import Any, Sequence

from sbreference import EntityDescription, Message, ServiceBusError
from sbreference.tiers import TIERS, capped_time_to_live, check_entity

from .sdk_offset import not_graded
from .sdk_support import parse_connection_string

SKUS = ("Basic", "Standard", "Premium")

#: the kit's capabilities a Basic namespace lacks (sbreference.tiers.TIERS["basic"]; SETTLE-TIER-003, TXN-TIER-001)
BASIC_LACKS = {
    "topics": "topics", "rules": "topics (so subscription rules)", "sessions": "sessions",
    "duplicate-detection": "duplicate detection", "auto-forward": "auto-forwarding", "transactions": "transactions",
}

#: what the Standard-tier partitioning scenarios need and a Premium namespace does not offer: partitions are
#: the namespace's, "Partitioning can be enabled during namespace creation in the Premium SKU ... All entities in
#: this namespace will be partitioned" (https://learn.microsoft.com/azure/service-bus-messaging/enable-partitions-premium)
PREMIUM_LACKS = {"partitions": "partitioned queues and topics created one by one (on Premium partitioning is the "
                               "namespace's, set at its creation)"}

#: the capability of a namespace known to be of the tier the scenarios grade (sbspec/vocabulary.toml)
STANDARD = "standard-namespace"

#: what the headers and properties of a message may add to its body against a tier's size limit (bytes)
HEADER_MARGIN = 4 * 1024

#: what was read in this process: by endpoint once known (the tier is the namespace's, whatever the
#: key), by the whole connection string when refused (another key may be let in)
_READ: dict[str, tuple[str | None, str]] = {}


def read_tier(admin_connection_string: str) -> tuple[str | None, str]:
    """The namespace's ``messaging_sku``, or None and why not."""
    parts = parse_connection_string(admin_connection_string)
    endpoint = parts.get("endpoint", "")
    known = _READ.get(endpoint) or _READ.get(admin_connection_string)
    if known is not None:
        return known
    try:
        from azure.core.exceptions import HttpResponseError
        from azure.servicebus.management import ServiceBusAdministrationClient
    except ImportError as error:  # pragma: no cover
        return None, f"not read: {error}"
    extra: dict[str, Any] = {}
    if parts.get("usedevelopmentemulator", "").lower() == "true":
        from ..server.admin_http import plain_http_transport

        extra["transport"] = plain_http_transport()
    found: tuple[str | None, str]
    try:
        client = ServiceBusAdministrationClient.from_connection_string(
            admin_connection_string, retry_total=0, connection_timeout=10, read_timeout=10, **extra)
        with client:
            sku = str(client.get_namespace_properties().messaging_sku or "")
        found = (sku, "get_namespace_properties") if sku in SKUS else (None, f"get_namespace_properties said {sku!r}")
    except HttpResponseError as error:
        said = f"{error.status_code}: {str(error.message or error).splitlines()[0][:160]}"
        found = (None, f"get_namespace_properties refused ({said})")
    except Exception as error:  # unreachable, a bad string: preflight says it in its own words
        return None, f"get_namespace_properties failed ({type(error).__name__})"
    _READ[endpoint if found[0] is not None else admin_connection_string] = found
    return found


def _entity_outcome(sku: str, kind: str, properties: dict[str, Any]) -> tuple[Any, ...]:
    """What the model's tier table answers to creating this entity on ``sku``: refused (with what), or
    created (with the default time to live it holds, when the scenario gave one: Basic holds it to 14 days)."""
    try:
        description = EntityDescription(**properties)
    except (TypeError, ServiceBusError):  # not a description the model knows: the same on every tier
        return ("n/a",)
    try:
        check_entity(sku.lower(), kind, description)
    except ServiceBusError as error:
        return ("refused", error.code)
    if "default_message_time_to_live" not in properties:  # the tier's default, which no scenario sets (SETTLE-TIER-005)
        return ("created",)
    return ("created", capped_time_to_live(sku.lower(), description).default_message_time_to_live)


def _message_limit(sku: str, batch: bool) -> int:
    """The largest message (or batch) an entity created with its tier's defaults takes (SETTLE-TIER-001, -006)."""
    tier = TIERS[sku.lower()]
    return tier.max_batch_size if batch and tier.max_batch_size is not None else tier.default_max_message_size


class TierMixin:
    """The tier of the SDK target's namespace (``tier``, ``tier_how``), what the scenarios take it for
    (``expected_tier``), and the operations whose outcome differs between the two."""

    serve: bool
    connection_string: str | None
    control_mode: str
    capabilities: Any
    lacking: dict[str, str]
    name: str
    prefix: str
    expected_tier = "Standard"

    def _learn_tier(self, option: str, admin_connection_string: str | None) -> None:
        if option not in ("auto", *SKUS):
            raise ValueError(f"tier={option!r}: auto (read from the namespace), Basic, Standard or Premium")
        given = None if option == "auto" else option
        self.tier: str | None = given
        self.tier_how = f"tier={given} given"
        admin = admin_connection_string or (self.connection_string if self.control_mode == "admin" else None)
        if self.serve:
            self.tier, self.tier_how = "Standard", "sbconform serve started by the target: its default config"
        elif admin:
            sku, how = read_tier(admin)
            if sku is not None:
                self.tier, self.tier_how = sku, how + (f" (tier={given} was given)" if given and given != sku else "")
            elif given is None:
                self.tier_how = f"{how}; give tier=Basic|Standard|Premium"
            else:
                self.tier_how = f"tier={given} given; {how}"
        elif given is None:
            self.tier = "Standard"
            self.tier_how = "assumed: a development endpoint whose management API was not given (admin_connection_string=)"
        lacks = {"Basic": BASIC_LACKS, "Premium": PREMIUM_LACKS}.get(self.tier or "", {})
        lacking = {cap: f"the namespace is {self.tier} ({self.tier_how}), which has no {what}" for cap, what in lacks.items()}
        if self.tier != self.expected_tier:  # the scenarios grading Standard limits (SETTLE-TIER-001, -004) are skipped up front
            lacking[STANDARD] = f"{self._said_namespace()}; the scenarios needing it grade the {self.expected_tier} tier's limits"
        self.capabilities = self.capabilities - set(lacking)
        self.lacking = {**self.lacking, **lacking}

    def said_tier(self) -> str:
        if self.tier is None:
            return f"unknown ({self.tier_how}): outcomes that differ between tiers are not graded"
        assumed = "" if self.tier == self.expected_tier else f"; graded as {self.expected_tier} only where the tiers agree"
        return f"{self.tier} ({self.tier_how}){assumed}"

    def _other_tiers(self) -> tuple[str, ...]:
        """The tiers the namespace may be, other than the one the scenarios grade."""
        if self.tier == self.expected_tier:
            return ()
        return tuple(s for s in SKUS if s != self.expected_tier) if self.tier is None else (self.tier,)

    def _tier_guard_entity(self, kind: str, properties: dict[str, Any]) -> None:
        """Not graded: an entity the model's tier table creates or refuses differently on the
        namespace's tier than on the one the scenario grades."""
        others = self._other_tiers()
        if not others:
            return
        expected = _entity_outcome(self.expected_tier, kind, properties)
        for sku in others:
            found = _entity_outcome(sku, kind, properties)
            if found != expected:
                self._not_graded(f"a {kind} with {properties} is {_said(found)} on {sku} but {_said(expected)} on "
                                 f"{self.expected_tier}, which the scenario grades")

    def _tier_guard_send(self, messages: Sequence[Message], batch: bool) -> None:
        """Not graded: messages one tier takes and another refuses for their size (Basic and Standard
        256 KB; Premium 1 MB by default, batches 1 MB: sbreference.tiers)."""
        others = self._other_tiers()
        if not others:
            return
        sizes = [sum(_size(m) for m in messages)] if batch else [_size(m) for m in messages]
        limits = sorted({_message_limit(s, batch) for s in (self.expected_tier, *others)})
        if limits[0] != limits[-1] and any(limits[0] - HEADER_MARGIN < size <= limits[-1] + HEADER_MARGIN for size in sizes):
            self._not_graded(f"a {'batch' if batch else 'message'} of {max(sizes)} bytes is within one tier's size "
                             f"limit ({', '.join(map(str, limits))} bytes) and not another's")

    def _not_graded(self, what: str) -> None:
        """One operation of a scenario that does not need ``standard-namespace`` (so was not skipped up
        front) answered differently by the tiers: skipped with the plugin's reason for a capability lacked."""
        not_graded(f"target {self.name!r} lacks capability {STANDARD!r} for this operation ({self._said_namespace()}): "
                   f"not graded: {what}")

    def _said_namespace(self) -> str:
        return f"the namespace is {self.tier or 'unknown'} ({self.tier_how})"

    # ------------------------------------------------- the other tiers' namespaces (serve=true)
    def premium_namespace(self, partition_count: int) -> Any:
        """With ``serve=true``: a target on another ``sbconform serve``, started with a
        partitioned Premium namespace of ``partition_count`` partitions (Sku Premium,
        PartitionCount in its config). The caller closes it."""
        from .serve_process import premium_server

        self.require("premium-namespace")  # type: ignore[attr-defined]
        # provisioned through its control node: the management REST API answers 400 for both an
        # invalid operation and a bad argument, and the Premium scenarios grade which one it is
        return self._tier_target(premium_server(partition_count).connection_string, "Premium")

    def basic_namespace(self) -> Any:
        """With ``serve=true``: a target on another ``sbconform serve``, started with a Basic
        namespace (Sku Basic in its config). The caller closes it."""
        from .serve_process import tier_server

        self.require("basic-namespace")  # type: ignore[attr-defined]
        return self._tier_target(tier_server("Basic").connection_string, "Basic")

    def _tier_target(self, connection_string: str, sku: str) -> Any:
        from .sdk import SdkTarget

        target = SdkTarget(connection_string=connection_string, control=self.control_mode, prefix=self.prefix, tier=sku)
        target.expected_tier, target.tier_how = sku, f"sbconform serve started with Sku {sku} in its config"
        target.capabilities, target.lacking = self.capabilities, self.lacking
        target.open()
        return target


def _size(message: Message) -> int:
    return len(message.body) + (len(repr(message.application_properties)) if message.application_properties else 0)


def _said(outcome: tuple[Any, ...]) -> str:
    if outcome[0] == "refused":
        return f"refused ({getattr(outcome[1], 'value', outcome[1])})"
    return "created" if outcome[0] == "created" else str(outcome[0])
