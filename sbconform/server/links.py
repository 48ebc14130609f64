"""Links of ``sbconform serve``: attach (entity, request node, transaction coordinator; the
session filter and the wait for a next available session), what Service Bus says on an
entity link's ATTACH, authorization by the tokens put on ``$cbs``, credit, and detach.

Every link the server answers gets a ``LinkInfo`` in ``ConnState.link_info`` (its role,
path, credit counts, receiver); proton's objects carry nothing of ours."""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

from proton import Condition, Described, Endpoint, Link, Terminus, int32

from sbreference import PEEK_LOCK, RECEIVE_AND_DELETE, ErrorCode, ServiceBusError
from sbreference import paths

from . import coordinator
from . import values as v
from .limits import MAX_PATH
from .state import ConnState, LinkInfo, Receiving


class Links:
    """Link handling of ``Server`` (a mixin: the server's state is on ``self``)."""

    def _attach(self, state: ConnState, link: Link) -> None:
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        remote_source, remote_target = link.remote_source, link.remote_target
        link.source.copy(remote_source)
        link.target.copy(remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_receiver and coordinator.is_coordinator(link):  # a transaction controller (TXN-*)
            if not any(expiry > time.time() for expiry in state.audiences.values()):
                self._refuse(state, link, ServiceBusError(ErrorCode.UNAUTHORIZED, "Put a token on $cbs before declaring transactions."))
                return
            info = state.link_info[link] = LinkInfo("node")  # each declare and discharge stands on its own
            coordinator.open_coordinator(link)
            self._grant(info, link, self.limits.link_credit)
            return
        try:  # AMQP 1.0 part 1, 1.6.20: a string is UTF-8 (proton raises reading one that is not)
            remote_source.address, remote_target.address
        except UnicodeDecodeError:
            self._refuse(state, link, ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, "The link's address is not valid UTF-8: it names no entity."))
            return
        try:  # (the send-via destination, a session receiver's timeout: read below, and for every transfer)
            coordinator.remote_properties(link)
        except UnicodeDecodeError:
            self._refuse(state, link, ServiceBusError(
                ErrorCode.ARGUMENT_ERROR, "The ATTACH's properties hold a string that is not valid UTF-8.", transient=False))
            return
        if link.is_receiver:  # the client sends: to an entity, $cbs, or a management node
            address = v.entity_path(remote_target.address)
            if v.is_node(address):
                info = state.link_info[link] = LinkInfo("node")  # requests: each one is authorized on its own
                link.open()
                self._grant(info, link, self.limits.link_credit)
                return
            try:
                self._authorize(state, address)
                address = v.canonical(self.namespace, address)  # (the model is handed one spelling of each path)
                self.namespace.sending_entity(address)
                destination = coordinator.destination_of(link)
                if destination is not None:  # send via (TXN-VIA-001): both entities are authorised
                    self._authorize(state, v.entity_path(destination))
                    self.namespace.sending_entity(v.canonical(self.namespace, v.entity_path(destination)))
                    link.properties = {coordinator.TRANSFER_DESTINATION: destination}
            except ServiceBusError as error:
                self._refuse(state, link, error)
                return
            self._link_properties(link, address)
            info = state.link_info[link] = LinkInfo("entity", address)
            state.granted.add(link)
            link.open()
            self._grant(info, link, self.limits.link_credit)
            return
        # the client receives
        source_address = remote_source.address
        if remote_source.dynamic:
            source_address = f"$reply/{uuid.uuid4()}"
            link.source.address = source_address
            link.source.dynamic = False
        address = v.entity_path(source_address)
        if v.is_node(address) or address.startswith("$reply/"):
            answers = [source_address] if address.startswith("$reply/") else []
            target_address = remote_target.address
            answers.append(address)
            if target_address:
                answers.append(target_address)
            for key in answers:
                state.reply_links[key] = link
            state.reply_addresses[link] = answers
            link.open()
            return
        mode = RECEIVE_AND_DELETE if link.remote_snd_settle_mode == Link.SND_SETTLED else PEEK_LOCK
        try:
            self._authorize(state, address)
            address = v.canonical(self.namespace, address)
            store = self.namespace.taking_store(address)  # a receiver of a ReceiveDisabled entity is refused here
        except ServiceBusError as error:
            self._refuse(state, link, error)
            return
        r = Receiving(link, state, address, mode)
        r.address = source_address or ""
        self._link_properties(link, address)
        info = state.link_info[link] = LinkInfo("entity", address)
        info.receiving = r
        state.granted.add(link)
        wants, session_id = self._session_filter(remote_source)
        if wants or store.requires_session and wants:
            r.wants_session = True
            # The client's operation timeout, else the service's default (sbspec/wire.md 4)
            timeout_ms = v.SESSION_WAIT_MS
            props = coordinator.remote_properties(link)
            if props.get(v.ATTACH_TIMEOUT) is not None:
                given = props[v.ATTACH_TIMEOUT]
                if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given):
                    state.link_info.pop(link, None)
                    state.granted.discard(link)
                    self._refuse(state, link, ServiceBusError(
                        ErrorCode.ARGUMENT_ERROR, f"com.microsoft:timeout {given!r} is not a number of milliseconds", transient=False))
                    return
                timeout_ms = int(given)
            r.deadline = time.monotonic() + max(timeout_ms, 0) / 1000
            if self._try_session(r, session_id, final=session_id is not None or timeout_ms <= 0):
                return
            r.session_id = None
            state.pending_sessions.append(r)
            state.session_keys.add(r.key)
            state.session_due = min(state.session_due, r.deadline)
            r.pending_session_id = session_id
            return
        link.open()
        state.receivers.append(r)

    @staticmethod
    def _session_filter(source: Terminus) -> tuple[bool, str | None]:
        data = source.filter
        try:
            data.rewind()
            if not data.next():
                return False, None
            filters = data.get_object()
        except Exception:
            return False, None
        if not isinstance(filters, dict):
            return False, None
        for key, value in filters.items():
            if str(key) == v.SESSION_FILTER:
                if isinstance(value, Described):
                    value = value.value
                return True, (None if value is None else str(value))
        return False, None

    def _try_session(self, r: Receiving, session_id: str | None, final: bool) -> bool:
        """Accept the session now; True if the attach was answered (accepted or refused)."""
        ns = self.namespace
        try:
            sid, locked_until = ns.accept_session(r.conn.model_conn, r.path, session_id)
        except ServiceBusError as error:
            if error.code is ErrorCode.TIMEOUT and not final:
                return False
            self._refuse(r.conn, r.link, error)
            return True
        r.session_id = sid
        link = r.link
        link.source.filter.clear()
        link.source.filter.put_map()
        link.source.filter.enter()
        link.source.filter.put_symbol(v.SESSION_FILTER)
        link.source.filter.put_string(sid)
        link.source.filter.exit()
        link.properties = {**(link.properties or {}), v.LOCKED_UNTIL_UTC: (self.clock.epoch_ms + locked_until) * 10_000 + v.DOTNET_EPOCH_TICKS}
        link.open()
        r.conn.receivers.append(r)
        if link.credit > 0:  # credit the client gave while it waited (a FLOW may follow its ATTACH at once)
            self._serve(r)
        return True

    def _retry_sessions(self, state: ConnState, now: float, keys: Any = None) -> None:
        """Try the receivers waiting for a session again: those whose entity is in ``keys`` (None:
        every one), and any whose deadline has come (its last try). A next-available try that
        found no session in an entity is not repeated for the others waiting on it in the same
        round (they would find none either)."""
        if keys is not None and now < state.session_due and state.session_keys.isdisjoint(keys):
            return  # (the common turn: nothing it waits on changed, no deadline came)
        still = []
        none_left: set[str] = set()  # entities a next-available try just found no session in
        answered = False
        for r in state.pending_sessions:
            final = now >= r.deadline
            if not final and ((keys is not None and r.key not in keys) or (r.pending_session_id is None and r.key in none_left)):
                still.append(r)
            elif self._try_session(r, r.pending_session_id, final=final):
                answered = True
            else:
                if r.pending_session_id is None:
                    none_left.add(r.key)
                still.append(r)
        state.pending_sessions = still
        state.session_keys = {r.key for r in still}
        state.session_due = min((r.deadline for r in still), default=float("inf"))
        if answered:
            self.touched.add(state)  # its ATTACH answered: flushed after this turn (_flush_all)

    def _link_properties(self, link: Link, path: str) -> None:
        """What Service Bus says on an entity link's ATTACH (sbspec/wire.md 4): the entity's
        max-message-size (256 KB Standard, the entity's own up to 100 MB on Premium), a
        tracking id, and the entity type."""
        entity = self.namespace.entities.get(paths.entity_key(path))
        if entity is None:
            return
        link.max_message_size = entity.description.max_message_size
        kind = "subscription" if paths.parse(path).subscription is not None else entity.kind
        link.properties = {
            v.TRACKING_ID: str(uuid.uuid4()),
            v.ENTITY_TYPE: int32(v.ENTITY_TYPES.get(kind, 0)),
        }

    @staticmethod
    def _refuse(state: ConnState, link: Link, error: ServiceBusError) -> None:
        """ATTACH with a null terminus, then DETACH with the error. Nothing is ever granted
        on it: a transfer on it closes the connection (``_admit``)."""
        state.link_info[link] = LinkInfo("refused")
        if link.is_sender:
            link.source.type = Terminus.UNSPECIFIED  # encoded as a null source
        else:
            link.target.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = v.condition(error)
        link.close()

    def _authorize(self, state: ConnState, path: str, now: float | None = None) -> None:
        """A token covering ``path`` and not expired, or UNAUTHORIZED. Called at attach, for
        every transfer and management request, and every second for open links. A path longer
        than any entity's (``MAX_PATH``) names none: NOT_FOUND, before its parents are looked at."""
        if len(path) > MAX_PATH:
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"No entity has a path of {len(path)} characters (at most {MAX_PATH}).")
        if path.startswith("/") or "//" in path:  # sbspec/wire.md 4: Service Bus answers 'sb://ns//q' not found
            raise ServiceBusError(ErrorCode.ENTITY_NOT_FOUND, f"The messaging entity '{path}' could not be found: "
                                  "an entity path has no empty segment (it cannot start with a slash, nor hold two in a row).")
        want = path.lower()
        now = time.time() if now is None else now
        expired = False
        ends = [i for i, char in enumerate(want) if char == "/"] + [len(want)]
        for audience in ["", *(want[:end] for end in ends)]:  # the path and its parents
            expiry = state.audiences.get(audience)
            if expiry is not None:
                if expiry > now:
                    return
                expired = True
        if expired:
            raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"The token for '{path}' has expired: put a new one on $cbs.")
        raise ServiceBusError(ErrorCode.UNAUTHORIZED, f"Unauthorized access to '{path}': put a token for it on $cbs first.")

    @staticmethod
    def _grant(info: LinkInfo, link: Link, credit: int) -> None:
        """Issue ``credit`` more; ``info.granted`` counts every credit ever issued on the link."""
        info.granted += credit
        link.flow(credit)

    def _top_up(self, state: ConnState) -> None:
        """After a read: give the links that received transfers their credit back (below half of it)."""
        limit = self.limits.link_credit
        link_info = state.link_info
        for link in state.fed:
            info = link_info.get(link)
            if info is not None and info.role in ("node", "entity") and link.state & Endpoint.LOCAL_ACTIVE:
                outstanding = info.granted - info.received
                if outstanding < limit // 2:
                    self._grant(info, link, limit - outstanding)
        state.fed.clear()

    def _detach_with(self, state: ConnState, link: Link, condition: Condition) -> None:
        """Detach one of our links with ``error``; transfers still in flight on it are dropped."""
        info = state.link_info.get(link)
        if info is None:
            info = state.link_info[link] = LinkInfo("detached")
        info.role = "detached"
        state.granted.discard(link)
        state.done(link)  # a delivery in progress on it is dropped
        r = info.receiving
        if r is not None:
            self._detach(state, link, close=False)
        if r in state.pending_sessions:
            state.pending_sessions.remove(r)
        if link.state & Endpoint.LOCAL_UNINIT:
            link.open()
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.condition = condition
            link.close()

    def _detach(self, state: ConnState, link: Link, close: bool = True) -> None:
        state.granted.discard(link)
        state.done(link)
        info = state.link_info.get(link)
        if info is not None and info.receiving is not None:
            r, info.receiving = info.receiving, None
            self.waiting.discard(r)
            if r in state.receivers:
                state.receivers.remove(r)
            if r.session_id is not None:
                try:
                    self.namespace.release_session(state.model_conn, r.path, r.session_id)
                except ServiceBusError:
                    pass
                self.dirty.add(r.key)
        if close and link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def _end_session(self, state: ConnState, session: Any) -> None:
        """The client ended a session (its links with it): forget them, then free it (else
        proton keeps it for the whole connection, and BEGIN/END loops grew without bound)."""
        for link in state.session_links.pop(session, ()):  # (its own links only: not a walk over the connection's)
            info = state.link_info.get(link)
            r = info.receiving if info is not None else None
            if r is not None:
                self._detach(state, link)
                if r in state.pending_sessions:
                    state.pending_sessions.remove(r)
            self._forget_replies(state, link)
            state.open_links.discard(link)  # ended with its session (AMQP 1.0 2.5.5)
            state.granted.discard(link)
            state.fed.discard(link)
            state.done(link)
            state.link_info.pop(link, None)  # freed with the session
        session.close()
        state.sessions.discard(session)
        session.free()

    @staticmethod
    def _forget_replies(state: ConnState, link: Link) -> None:
        """The addresses ``link`` answered requests for no longer lead to it."""
        for address in state.reply_addresses.pop(link, ()):
            if state.reply_links.get(address) == link:
                del state.reply_links[address]

    def _suspended(self, state: ConnState, link: Link) -> None:
        """The client detached ``link`` without closing it: it is no longer open nor served (a
        receiver kept among those waiting had every message locked for a link taking nothing),
        the DETACH is answered in kind, and the link is freed: this server resumes no link, so a
        new ATTACH of the name is a new link."""
        state.open_links.discard(link)
        r = state.link_info.get(link).receiving if state.link_info.get(link) is not None else None
        self._detach(state, link, close=False)
        if r in state.pending_sessions:
            state.pending_sessions.remove(r)
        if not link.state & Endpoint.LOCAL_CLOSED:
            if link.state & Endpoint.LOCAL_UNINIT:
                link.open()
            link.detach()
        self._release(state, link, suspended=True)

    @staticmethod
    def _release(state: ConnState, link: Link, suspended: bool = False) -> None:
        """Free a link closed on both sides (proton keeps it otherwise, for the whole
        connection: attach and detach in a loop would grow without bound)."""
        if not suspended and not (link.state & Endpoint.LOCAL_CLOSED and link.state & Endpoint.REMOTE_CLOSED):
            return
        Links._forget_replies(state, link)
        if any(r.link == link for r in state.pending_sessions):
            return
        links = state.session_links.get(link.session)
        if links is not None:
            links.discard(link)
        state.link_info.pop(link, None)
        state.granted.discard(link)
        state.fed.discard(link)
        state.done(link)
        link.free()

