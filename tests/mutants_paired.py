"""Deliberately broken paired-namespace clients, for the mutation analysis of the PAIRED clauses.

All but one of the paired MUST clauses (sbspec/clauses/paired.toml, tagged ``client``) specify
the paired client (the old .NET SDK's ``PairNamespaceAsync``), not the broker: the scenarios
drive the reference's client logic (``sbconform.paired.PairedFactory`` over the machines of
``sbreference.paired``) against two namespaces. A mutant here is the reference target with a
paired client that gets one clause wrong: it names that client as its ``paired_factory``
(tests/steps/paired.py, ``paired_client``), a ``PairedFactory`` with one machine, option or
step broken. The one broker clause (PAIR-PING-002) has its mutant in tests/mutants.py
(``mutant-pings-delivered``).

``tests/test_mutants_paired.py`` runs, in one pytest process, the scenarios each mutant
names and requires each of them to fail. Loaded as a plugin (``-p mutants_paired``) next to
``-p mutants`` (which holds the scenario matrix), it registers these targets.
"""

from __future__ import annotations

from typing import Any

from sbreference import MINUTE, PING_CONTENT_TYPE, SECOND, ErrorCode, ServiceBusError
from sbreference.paired import (
    PRIMARY,
    SECONDARY,
    FactoryPair,
    Fail,
    FailoverSender,
    PairedNamespaceOptions,
    Send,
    Syphon,
    backlog_path,
    from_backlog,
    starts_failover_timer,
    to_backlog,
)
from sbreference.paired.ping import PingTask
from sbreference.paired.rewrite import X_MS_PATH, destination_of

from sbconform.paired import PairedFactory, message_of
from sbconform.targets import PEEK_LOCK, register

from mutants import Mutant, PingsDelivered


class ClientMutant(Mutant):
    """The reference target, which the paired scenarios drive with ``factory`` (a broken
    ``PairedFactory``) and the pairing options rewritten by ``options``."""

    factory: type[PairedFactory] = PairedFactory

    def options(self, options: dict[str, Any]) -> dict[str, Any]:
        return options

    def paired_factory(self, primary, secondary, options: dict[str, Any], choose) -> PairedFactory:
        return self.factory(primary, secondary, PairedNamespaceOptions(**self.options(dict(options))), choose=choose)


def client_mutant(name: str, doc: str, factory: type[PairedFactory] = PairedFactory, options=None, **machines: type) -> type[ClientMutant]:
    """A ``ClientMutant`` whose factory is ``factory`` with the machines named in ``machines``
    (``failover_class``, ``syphon_class``, ``pair_class``) swapped for broken ones."""
    broken = type(f"{factory.__name__}Broken", (factory,), dict(machines)) if machines else factory
    body: dict[str, Any] = {"name": name, "__doc__": doc, "factory": broken}
    if options is not None:
        body["options"] = lambda self, o: options(o)
    return type("".join(w.title() for w in name.split("-")[1:]), (ClientMutant,), body)


# ------------------------------------------------------------------ options (PAIR-OPT-*)


def _at_least_one(options: dict) -> dict:
    return {**options, "backlog_queue_count": max(1, options.get("backlog_queue_count", 10))}


def _one_by_default(options: dict) -> dict:
    return {"backlog_queue_count": 1, **options}


def _interval_zero(options: dict) -> dict:
    return {**options, "failover_interval": 0}


def _syphon_always(options: dict) -> dict:
    return {**options, "enable_syphon": True}


# ------------------------------------------------------------- backlog queues (PAIR-BACKLOG-*)


class PathsFromOne(PairedFactory):
    """Numbers the backlog queues from 1."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failover.backlog_paths = [backlog_path(self.primary_namespace, i + 1) for i in range(self.options.backlog_queue_count)]


class PathsAfterSecondary(PairedFactory):
    """Names the backlog queues after the secondary namespace."""

    def __init__(self, primary, secondary, *args, **kwargs) -> None:
        super().__init__(primary, secondary, *args, **kwargs)
        name = secondary.namespace_name()
        self.failover.backlog_paths = [backlog_path(name, i) for i in range(self.options.backlog_queue_count)]


class CreatesWithDefaults(PairedFactory):
    """Creates the missing backlog queues with the QueueDescription defaults."""

    def provision_backlog_queues(self) -> None:
        secondary = self.targets[SECONDARY]
        for path in self.backlog_paths:
            if not self._exists(secondary, path):
                secondary.create_queue_at(path)


class Recreates(PairedFactory):
    """Deletes every backlog queue that exists and creates it again, as described."""

    def provision_backlog_queues(self) -> None:
        secondary = self.targets[SECONDARY]
        for path in self.backlog_paths:
            if self._exists(secondary, path):
                secondary.delete_entity(path)
        super().provision_backlog_queues()


class UpdatesExisting(PairedFactory):
    """Updates the backlog queues that exist to the documented description."""

    def provision_backlog_queues(self) -> None:
        from sbreference.paired import BACKLOG_QUEUE_PROPERTIES

        secondary = self.targets[SECONDARY]
        for path in self.backlog_paths:
            if self._exists(secondary, path):
                secondary.update_entity(path, **BACKLOG_QUEUE_PROPERTIES)
        super().provision_backlog_queues()


class DeletesExtraQueues(PairedFactory):
    """Deletes the backlog queues it finds beyond the count."""

    def provision_backlog_queues(self) -> None:
        super().provision_backlog_queues()
        count = self.options.backlog_queue_count
        for index in range(count, count + 10):
            path = backlog_path(self.primary_namespace, index)
            if self._exists(self.targets[SECONDARY], path):
                self.targets[SECONDARY].delete_entity(path)


class UsesExtraQueues(PairedFactory):
    """Puts the backlog queues it finds beyond the count in the rotation too."""

    def provision_backlog_queues(self) -> None:
        super().provision_backlog_queues()
        count = self.options.backlog_queue_count
        for index in range(count, count + 10):
            path = backlog_path(self.primary_namespace, index)
            if self._exists(self.targets[SECONDARY], path):
                self.failover.backlog_paths = [*self.failover.backlog_paths, path]
                self.failover.rotation.append(len(self.failover.backlog_paths) - 1)


# ------------------------------------------------------------ the failover sender (PAIR-FAIL-*)


class MirrorsToBacklog(PairedFactory):
    """Also writes a copy of every message the healthy primary accepted to a backlog queue."""

    def send(self, client, message):
        path = super().send(client, message)
        if path == client.path:
            self._send(Send(SECONDARY, self.backlog_paths[0], to_backlog(message, client.path), 0))
        return path


class TimeoutNotCounted(FailoverSender):
    """A timeout does not start the failover timer."""

    def failed(self, client, entity, message, send, error, now, choose=None):
        if send.namespace == PRIMARY and error.code is ErrorCode.TIMEOUT:
            return Fail(error)
        return super().failed(client, entity, message, send, error, now, choose)


class EveryFailureCounts(FailoverSender):
    """Every failed send to the primary starts the failover timer, transient or not."""

    def failed(self, client, entity, message, send, error, now, choose=None):
        if send.namespace != PRIMARY or starts_failover_timer(error):
            return super().failed(client, entity, message, send, error, now, choose)
        health = self._health(entity)
        if health.timer_started is None:
            health.timer_started = now
        self._engage_due(now)
        return self._to_backlog(client, entity, message, choose, error) if self.failed_over(entity) else Fail(error)


class EngagesAtNextSend(FailoverSender):
    """Fails an entity over only when a send finds its interval over, not at that instant."""

    def tick(self, now):
        self._engage_due = lambda now: None  # the instance's, for this call
        try:
            return super().tick(now)
        finally:
            del self._engage_due


class EngagingSendFails(FailoverSender):
    """The send that engages the failover fails to its caller; only the next one goes to the backlog."""

    def failed(self, client, entity, message, send, error, now, choose=None):
        decision = super().failed(client, entity, message, send, error, now, choose)
        return Fail(error) if send.namespace == PRIMARY and isinstance(decision, Send) else decision


class SuccessKeepsTimer(FailoverSender):
    """A successful send to the primary does not stop the failover timer."""

    def succeeded(self, entity, send, now):
        pass


class NamespaceWideFailover(FailoverSender):
    """Once one entity has failed over, sends to every entity go to the backlog."""

    def failed_over(self, entity):
        return any(h.failed_over_at is not None for h in self.entities.values())


class TriesPrimaryFirst(FailoverSender):
    """After failover, still tries the primary entity first, and the backlog only if that fails."""

    def start(self, client, entity, message, now, choose=None):
        self._engage_due(now)
        return Send(PRIMARY, entity, message)


# -------------------------------------------------------------- routing (PAIR-ROUTE-*)


class DropsFailedOver(PairedFactory):
    """Acknowledges failed-over sends without writing them to the backlog queue."""

    def _send(self, send):
        if send.namespace == SECONDARY:
            return
        super()._send(send)


class BacklogFailureNotRetried(FailoverSender):
    """Pulls a failing backlog queue from the rotation, but fails the message to its caller."""

    def failed(self, client, entity, message, send, error, now, choose=None):
        decision = super().failed(client, entity, message, send, error, now, choose)
        return Fail(error) if send.namespace == SECONDARY else decision


class SkipsForOneMessage(FailoverSender):
    """A failing backlog queue is skipped for this message only, not pulled from the rotation."""

    def failed(self, client, entity, message, send, error, now, choose=None):
        if send.namespace == PRIMARY or error.code is ErrorCode.MESSAGE_SIZE_EXCEEDED:
            return super().failed(client, entity, message, send, error, now, choose)
        tried = self.__dict__.setdefault("tried", {}).setdefault(message.message_id, set())
        tried.add(send.backlog_index)
        left = [i for i in self.rotation if i not in tried]
        if not left:
            return Fail(error)
        self.picks[client] = left[0]
        return Send(SECONDARY, self.backlog_paths[left[0]], to_backlog(message, entity), left[0])


class NoQueueLeftQuiet(PairedFactory):
    """With no backlog queue left in the rotation, reports the failed-over send as sent."""

    def send(self, client, message):
        try:
            return super().send(client, message)
        except ServiceBusError:
            if not self.failover.failed_over(client.path) or self.failover.backlog_choices():
                raise
            return self.backlog_paths[0]


class FailoverPerClient(PairedFactory):
    """Keeps one failover sender per client: an entity fails over for the client that saw it fail."""

    def send(self, client, message):
        senders = self.__dict__.setdefault("per_client", {})
        shared = self.failover
        self.failover = senders.setdefault(client.id, self.failover_class(self.options, self.primary_namespace))
        try:
            return super().send(client, message)
        finally:
            self.failover = shared


class PicksPerMessage(FailoverSender):
    """Picks a backlog queue for every message, not once per client."""

    def _pick(self, client, choose):
        self.picks.pop(client, None)
        return super()._pick(client, choose)


class EveryonePicksFirst(FailoverSender):
    """Every client picks the first backlog queue of the rotation."""

    def _pick(self, client, choose):
        return super()._pick(client, None)


# ----------------------------------------------------------- the rewrite (PAIR-RENAME-*)


class RewriteMutant(FailoverSender):
    """Sends to the backlog what ``rewrite`` makes of the rewritten message and the original."""

    def _to_backlog(self, client, entity, message, choose, error):
        decision = super()._to_backlog(client, entity, message, choose, error)
        if isinstance(decision, Send):
            decision = Send(decision.namespace, decision.path, self.rewrite(decision.message, message), decision.backlog_index)
        return decision


class SessionIdKept(RewriteMutant):
    """Leaves the SessionId on the backlog copy (and sets its alias)."""

    def rewrite(self, rewritten, original):
        return rewritten.with_changes(session_id=original.session_id)


class TimeToLiveKept(RewriteMutant):
    """Leaves the TimeToLive on the backlog copy (and sets its alias)."""

    def rewrite(self, rewritten, original):
        return rewritten.with_changes(time_to_live=original.time_to_live)


class NoDestination(RewriteMutant):
    """Leaves x-ms-path out of the backlog copy."""

    def rewrite(self, rewritten, original):
        props = {k: v for k, v in rewritten.application_properties.items() if k != X_MS_PATH}
        return rewritten.with_changes(application_properties=props)


class OversizePullsQueue(FailoverSender):
    """Takes a message too large for the backlog for a failing backlog queue."""

    def failed(self, client, entity, message, send, error, now, choose=None):
        if send.namespace == SECONDARY and error.code is ErrorCode.MESSAGE_SIZE_EXCEEDED:
            error = ServiceBusError(ErrorCode.ENTITY_UNAVAILABLE, error.text, error.tracking_id, transient=False)
            decision = super().failed(client, entity, message, send, error, now, choose)
            return Fail(ServiceBusError(ErrorCode.MESSAGE_SIZE_EXCEEDED, error.text)) if isinstance(decision, Fail) else decision
        return super().failed(client, entity, message, send, error, now, choose)


# ------------------------------------------------------------------ pings (PAIR-PING-*)


class NeverPings(FailoverSender):
    """Never pings a failed-over entity."""

    def tick(self, now):
        super().tick(now)
        return []


class PingLivesLong(FailoverSender):
    """Pings with a time to live of one minute."""

    def tick(self, now):
        return [Send(p.namespace, p.path, p.message.with_changes(time_to_live=MINUTE)) for p in super().tick(now)]


class PingsAtFailover(FailoverSender):
    """Sends the first ping at the failover, not one interval later."""

    def _engage_due(self, now):
        before = {k for k, h in self.entities.items() if h.ping is not None}
        super()._engage_due(now)
        for key, health in self.entities.items():
            if health.ping is not None and key not in before:
                health.ping = PingTask(health.ping.interval, health.failed_over_at)


class OnePingerPerEntity(FailoverSender):
    """Pings an entity from one factory of the process only: the first that failed it over."""

    pingers: dict[str, int] = {}  # entity -> the id of the sender that pings it (the process's)

    def tick(self, now):
        return [p for p in super().tick(now) if self.pingers.setdefault(p.path.lower(), id(self)) == id(self)]


class PingsHealthyEntities(FailoverSender):
    """Pings every entity the factory sends to, healthy ones too."""

    def start(self, client, entity, message, now, choose=None):
        health = self._health(entity)
        if health.ping is None:
            health.ping = PingTask.start(now, self.options.ping_primary_interval)
        return super().start(client, entity, message, now, choose)


class PingTaskStartsLate(FailoverSender):
    """Starts an entity's ping task 2 seconds after its failover, and records the failover then."""

    def _engage_due(self, now):
        before = {k for k, h in self.entities.items() if h.failed_over_at is not None}
        super()._engage_due(now)
        for key, health in self.entities.items():
            if health.failed_over_at is not None and key not in before:
                health.failed_over_at += 2 * SECOND
                health.ping = PingTask.start(health.failed_over_at, health.ping.interval)


class PingIntervalIgnored(FailoverSender):
    """Pings once a minute, whatever PingPrimaryInterval says."""

    def _engage_due(self, now):
        super()._engage_due(now)
        for health in self.entities.values():
            if health.ping is not None and health.ping.interval != MINUTE:
                health.ping = PingTask.start(health.failed_over_at, MINUTE)


class FailsBackForNewClients(FailoverSender):
    """After a successful ping, a client that sent to the backlog keeps sending there."""

    def ping_succeeded(self, entity, now):
        self.__dict__.setdefault("stuck", set()).update((entity.lower(), c) for c in self.picks)
        super().ping_succeeded(entity, now)

    def start(self, client, entity, message, now, choose=None):
        if (entity.lower(), client) in self.__dict__.get("stuck", ()):
            return self._to_backlog(client, entity, message, choose, None)
        return super().start(client, entity, message, now, choose)


class PingsNeverStop(FailoverSender):
    """Fails back when a ping succeeds, but goes on pinging."""

    def ping_succeeded(self, entity, now):
        health = self.entities.get(entity.lower())
        if health is not None:
            health.failed_over_at = None
            health.timer_started = None


# --------------------------------------------------------------- the syphon (PAIR-SYPH-*)


class DrainsOnFailBack(PairedFactory):
    """Without the syphon, moves an entity's backlog messages to it when a ping succeeds."""

    def _ping(self, ping):
        super()._ping(ping)
        if not self.pings[-1].ok or self.syphon is not None:
            return
        secondary = self.targets[SECONDARY]
        for path in self.backlog_paths:
            receiver = secondary.receiver(path, PEEK_LOCK)
            for received in secondary.receive(receiver, 100, 0):
                message = message_of(received)
                if (destination_of(message) or "").lower() != ping.path.lower():
                    secondary.abandon(receiver, received)
                    continue
                destination, restored = from_backlog(message)
                self._send(Send(PRIMARY, destination, restored))
                secondary.complete(receiver, received)
            secondary.close_handle(receiver)


class LosesRefused(PairedFactory):
    """Completes a backlog message whose destination refused it: the message is lost."""

    def _move(self, receiver, decision):
        super()._move(receiver, decision)
        handle = getattr(decision, "handle", None)
        if handle is not None:
            try:
                self.targets[SECONDARY].complete(receiver, handle)
            except ServiceBusError:
                pass  # already completed: it was moved


class OneBatchPerPoll(PairedFactory):
    """Takes one batch per long poll: the rest waits for the next poll, up to 15 minutes later."""

    def _run_syphon(self) -> None:
        polled = self.__dict__.setdefault("polled", set())
        self.syphon.tick(self.now())
        secondary = self.targets[SECONDARY]
        for index, path in enumerate(self.backlog_paths):
            started = self.syphon.poll_started[index]
            if (index, started) in polled:
                continue
            try:
                receiver = self._receivers.get(index) or self._receivers.setdefault(index, secondary.receiver(path, PEEK_LOCK))
                found = secondary.receive(receiver, self.syphon_batch, 0)
            except ServiceBusError:
                continue
            if found:
                polled.add((index, started))
                for decision in self.syphon.received(index, [(message_of(r), r) for r in found], self.now()):
                    self._move(receiver, decision)
                self.syphon.poll_started[index] = started  # the batch did not end the poll


class HeadOfLineBlocking(PairedFactory):
    """The syphon stops at the first message its destination refuses: the messages behind it in
    that batch, for other destinations, wait with it."""

    def _move(self, receiver, decision):
        blocked = self.__dict__.setdefault("blocked", {})
        if blocked.get(decision.backlog_index) == self.now():
            self.syphon.forward_failed(decision.backlog_index, getattr(decision.handle, "locked_until", None))
            return
        refused = dict(self._refused)
        super()._move(receiver, decision)
        if self._refused != refused:
            blocked[decision.backlog_index] = self.now()


class NoTranslationBack(Syphon):
    """Forwards the backlog copy as it is, aliases and x-ms-path included."""

    def received(self, index, messages, now):
        decisions = super().received(index, messages, now)
        originals = {id(handle): message for message, handle in messages}
        return [d.__class__(d.backlog_index, d.destination, originals[id(d.handle)], d.handle) if hasattr(d, "destination") else d
                for d in decisions]


class ShortPoll(Syphon):
    """Long polls of 5 minutes."""

    def next_due(self):
        times = [start + 5 * MINUTE for start in self.poll_started.values()]
        times.extend(self.retry_at.values())
        return min(times) if times else None

    def tick(self, now):
        for index, start in self.poll_started.items():
            while start + 5 * MINUTE <= now:
                start += 5 * MINUTE
                self._poll(index, start)
        super().tick(now)


# ---------------------------------------------------------- close/fault (PAIR-CLOSE-*)


class NoGrace(FactoryPair):
    """Faults the partner at once when a factory ends."""

    def _ended(self, which, how, now):
        super()._ended(which, how, now)
        if self.deadline is not None:
            self.deadline = now


class FaultsWithoutSyphon(FactoryPair):
    """Faults the partner 5 seconds later, with or without the syphon in the process."""

    def __init__(self, hosts_syphon: bool) -> None:
        super().__init__(True)


class PartnerNeverFaulted(FactoryPair):
    """Leaves the partner open, however long it stays so."""

    def tick(self, now):
        return []


# ------------------------------------------------------------- brokers (PAIR-PING-002/004)


class SessionPingsDelivered(PingsDelivered):
    """Hands the pings sent to a session-enabled entity to its session receivers (PAIR-PING-002):
    a ping carries a SessionId, so such a broker stores it in a session like any message."""

    name = "mutant-session-pings-delivered"

    def send(self, sender, messages, batch=False):
        try:
            sessions = bool(self.describe_entity(sender.path).get("requires_session"))
        except ServiceBusError:
            sessions = False
        if sessions:
            return super().send(sender, messages, batch)  # pings disguised as messages
        return super(PingsDelivered, self).send(sender, messages, batch)


class PingsRefused(Mutant):
    """Refuses every ping (an empty message with the ping content type), as a broker that takes
    it for a malformed message would: a failed-over entity never fails back (PAIR-PING-004)."""

    name = "mutant-pings-refused"

    def send(self, sender, messages, batch=False):
        if any(m.content_type == PING_CONTENT_TYPE for m in messages):
            raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, "The message has no body.", transient=False)
        return super().send(sender, messages, batch)


PAIRED_BROKER_MUTANTS = [SessionPingsDelivered, PingsRefused]

PAIRED_CLIENT_MUTANTS = [
    client_mutant("mutant-paired-never-pings", "Never pings a failed-over entity (PAIR-API-001).", failover_class=NeverPings),
    client_mutant("mutant-paired-backlog-count-unchecked", "Takes a backlog queue count below 1 for 1 (PAIR-OPT-001).", options=_at_least_one),
    client_mutant("mutant-paired-one-backlog-queue-by-default", "Uses one backlog queue by default, not ten (PAIR-OPT-001).", options=_one_by_default),
    client_mutant("mutant-paired-failover-interval-ignored", "Fails over at the first failure that counts, whatever the interval (PAIR-OPT-002).", options=_interval_zero),
    client_mutant("mutant-paired-syphon-always", "Runs the syphon in every process (PAIR-OPT-003).", options=_syphon_always),
    client_mutant("mutant-paired-backlog-paths-from-one", "Numbers the backlog queues from 1 (PAIR-BACKLOG-001).", PathsFromOne),
    client_mutant("mutant-paired-backlog-named-after-secondary", "Names the backlog queues after the secondary namespace (PAIR-BACKLOG-001).", PathsAfterSecondary),
    client_mutant("mutant-paired-backlog-created-with-defaults", "Creates backlog queues with the QueueDescription defaults (PAIR-BACKLOG-002).", CreatesWithDefaults),
    client_mutant("mutant-paired-backlog-recreated", "Deletes and recreates the backlog queues that exist (PAIR-BACKLOG-003).", Recreates),
    client_mutant("mutant-paired-extra-backlog-used", "Uses the backlog queues beyond the count it finds (PAIR-BACKLOG-004).", UsesExtraQueues),
    client_mutant("mutant-paired-extra-backlog-deleted", "Deletes the backlog queues beyond the count (PAIR-BACKLOG-004).", DeletesExtraQueues),
    client_mutant("mutant-paired-backlog-updated", "Updates existing backlog queues to the documented description (PAIR-BACKLOG-005).", UpdatesExisting),
    client_mutant("mutant-paired-mirrors-to-backlog", "Copies every message the healthy primary took to a backlog queue (PAIR-FAIL-001).", MirrorsToBacklog),
    client_mutant("mutant-paired-timeout-not-counted", "A timeout does not start the failover timer (PAIR-FAIL-002).", failover_class=TimeoutNotCounted),
    client_mutant("mutant-paired-every-failure-counts", "Transient and client errors start the failover timer (PAIR-FAIL-003).", failover_class=EveryFailureCounts),
    client_mutant("mutant-paired-failover-at-next-send", "Fails over only when a send finds the interval over (PAIR-FAIL-004).", failover_class=EngagesAtNextSend),
    client_mutant("mutant-paired-engaging-send-fails", "The send that engages the failover fails to its caller (PAIR-FAIL-004).", failover_class=EngagingSendFails),
    client_mutant("mutant-paired-success-keeps-timer", "A successful send does not stop the failover timer (PAIR-FAIL-004).", failover_class=SuccessKeepsTimer),
    client_mutant("mutant-paired-namespace-wide-failover", "One entity failing over fails them all over (PAIR-FAIL-005).", failover_class=NamespaceWideFailover),
    client_mutant("mutant-paired-tries-primary-first", "After failover still tries the primary first (PAIR-FAIL-006).", failover_class=TriesPrimaryFirst),
    client_mutant("mutant-paired-ping-task-starts-late", "Starts the ping task 2 seconds after the failover (PAIR-FAIL-006).", failover_class=PingTaskStartsLate),
    client_mutant("mutant-paired-failed-over-dropped", "Acknowledges failed-over sends without storing them (PAIR-ROUTE-001).", DropsFailedOver),
    client_mutant("mutant-paired-backlog-failure-not-retried", "Fails the message whose backlog queue failed (PAIR-ROUTE-002).", failover_class=BacklogFailureNotRetried),
    client_mutant("mutant-paired-queue-skipped-not-pulled", "Skips a failing backlog queue for one message only (PAIR-ROUTE-002).", failover_class=SkipsForOneMessage),
    client_mutant("mutant-paired-no-queue-left-quiet", "Reports a send with no backlog queue left as sent (PAIR-ROUTE-003).", NoQueueLeftQuiet),
    client_mutant("mutant-paired-failover-per-client", "Fails an entity over for one client only (PAIR-ROUTE-004).", FailoverPerClient),
    client_mutant("mutant-paired-pick-per-message", "Picks a backlog queue per message, not per client (PAIR-ROUTE-005).", failover_class=PicksPerMessage),
    client_mutant("mutant-paired-everyone-picks-first", "Every client picks the first backlog queue (PAIR-ROUTE-005).", failover_class=EveryonePicksFirst),
    client_mutant("mutant-paired-session-id-kept", "Leaves the SessionId on the backlog copy (PAIR-RENAME-001).", failover_class=SessionIdKept),
    client_mutant("mutant-paired-time-to-live-kept", "Leaves the TimeToLive on the backlog copy (PAIR-RENAME-002).", failover_class=TimeToLiveKept),
    client_mutant("mutant-paired-no-destination", "Leaves x-ms-path out of the backlog copy (PAIR-RENAME-004).", failover_class=NoDestination),
    client_mutant("mutant-paired-oversize-pulls-queue", "Pulls a backlog queue too small for a message from the rotation (PAIR-SIZE-001).", failover_class=OversizePullsQueue),
    client_mutant("mutant-paired-ping-lives-long", "Pings with a minute to live (PAIR-PING-001).", failover_class=PingLivesLong),
    client_mutant("mutant-paired-pings-at-failover", "Sends the first ping at the failover (PAIR-PING-003).", failover_class=PingsAtFailover),
    client_mutant("mutant-paired-one-pinger-per-entity", "Pings an entity from one factory of the process only (PAIR-PING-003).", failover_class=OnePingerPerEntity),
    client_mutant("mutant-paired-ping-interval-ignored", "Pings once a minute whatever the interval (PAIR-PING-003).", failover_class=PingIntervalIgnored),
    client_mutant("mutant-paired-pings-healthy-entities", "Pings every entity it sends to (PAIR-PING-005).", failover_class=PingsHealthyEntities),
    client_mutant("mutant-paired-fails-back-for-new-clients", "After a ping succeeds, clients that used the backlog keep using it (PAIR-PING-004).", failover_class=FailsBackForNewClients),
    client_mutant("mutant-paired-pings-never-stop", "Goes on pinging an entity that is available again (PAIR-PING-005).", failover_class=PingsNeverStop),
    client_mutant("mutant-paired-drains-on-fail-back", "Without the syphon, moves the backlog when a ping succeeds (PAIR-SYPH-001).", DrainsOnFailBack),
    client_mutant("mutant-paired-syphon-loses-refused", "The syphon completes a message its destination refused (PAIR-SYPH-002).", LosesRefused),
    client_mutant("mutant-paired-syphon-one-batch-per-poll", "The syphon takes one batch per long poll (PAIR-SYPH-002).", OneBatchPerPoll),
    client_mutant("mutant-paired-syphon-head-of-line", "The syphon stops at the first refused message of a batch (PAIR-SYPH-002).", HeadOfLineBlocking),
    client_mutant("mutant-paired-syphon-no-translation", "The syphon forwards the backlog copy untranslated (PAIR-SYPH-003).", syphon_class=NoTranslationBack),
    client_mutant("mutant-paired-syphon-short-poll", "The syphon's long polls last 5 minutes (PAIR-SYPH-004).", syphon_class=ShortPoll),
    client_mutant("mutant-paired-no-grace", "Faults the partner at once (PAIR-CLOSE-001).", pair_class=NoGrace),
    client_mutant("mutant-paired-faults-without-syphon", "Faults the partner without the syphon in the process (PAIR-CLOSE-001).", pair_class=FaultsWithoutSyphon),
    client_mutant("mutant-paired-partner-never-faulted", "Never faults the partner left open (PAIR-CLOSE-002).", pair_class=PartnerNeverFaulted),
]

for _mutant in PAIRED_BROKER_MUTANTS + PAIRED_CLIENT_MUTANTS:
    register(_mutant.name, lambda _cls=_mutant, **options: _cls())
