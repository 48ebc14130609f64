"""Deliveries of ``sbconform serve``: messages out to receivers with credit (``_serve``), the
client's settlements of them (``_settled_by_client``), and transfers in (``_admit``: the door
for every transfer; ``_incoming``: to an entity, ``$cbs``, a management node or the
transaction coordinator). The lock token of each delivery sent lives in its receiver's
``Receiving.tokens``, keyed by the delivery's tag: an AMQP disposition settles a delivery of its own
link only (another receiver settles by lock token through $management: SETTLE-LOCK-011).

The common path of a message, sent and completed, works on proton's C deliveries (``cproton``):
its Python wrapper, built only where one is used, costs more than the delivery's own work."""

from __future__ import annotations

from typing import Any

from cproton import (PN_ACCEPTED, addressof, pn_delivery_remote_state, pn_delivery_settle, pn_delivery_settled,
                     pn_delivery_update, pn_link_advance)
from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib
from proton import Delivery, Endpoint, Link

from sbreference import RECEIVE_AND_DELETE, ErrorCode, ServiceBusError
from sbreference import Message as ModelMessage
from sbreference import paths

from ..amqp import codec
from . import coordinator
from . import values as v
from .limits import Refused, check_size, check_storable, properties_to_modify
from .state import ConnState, Receiving
from ..amqp.wire import BATCH_FORMAT, WireError, data_sections

A = v.A


class Deliveries:
    """Delivery handling of ``Server`` (a mixin: the server's state is on ``self``)."""

    def _serve(self, r: Receiving) -> None:
        link = r.link
        self.touched.add(r.conn)  # what it queues is flushed after this turn (_flush_all)
        if r.conn.closed or not link.state & Endpoint.LOCAL_ACTIVE:
            self.waiting.discard(r)
            return
        credit = link.credit
        if credit <= 0:
            self.waiting.discard(r)
            return
        if r.conn.throttled or r.conn.closing:
            self.waiting.add(r)  # served again once the peer reads (``_flush``)
            return
        settled = r.mode == RECEIVE_AND_DELETE
        cap = self.limits.max_output_buffer
        found: list = []
        asked = 0
        while asked < credit:  # in slices: a peer that does not read gets the cap, one slice and one frame at most
            if r.conn.buffered() > cap:
                r.conn.throttled = True
                self.waiting.add(r)
                return
            want = min(credit - asked, 16)
            try:
                part = self.namespace.receive(r.conn.model_conn, r.path, want, r.mode, r.session_id)
            except ServiceBusError as error:
                self.waiting.discard(r)
                link.condition = v.condition(error)
                link.close()
                return
            tokens = r.tokens
            impl = link._impl
            for d in part:
                token = d.lock_token
                tag = v.lock_tag(token) if token is not None else r.conn.next_tag()
                dlv = _lib.pn_delivery(impl, (len(tag), _ffi.from_buffer(tag)))  # (Link.delivery, send, advance, settle in C)
                data = self._encode(d)
                sent = _lib.pn_link_send(impl, _ffi.from_buffer(data), len(data))
                if sent < 0:
                    link._check(sent)  # raised as Link.send raises it
                pn_link_advance(impl)
                if settled:
                    pn_delivery_settle(dlv)
                elif token is not None:
                    tokens[tag] = token
            found += part
            asked += want
            if len(part) < want:
                break
        if len(found) < credit:
            if link.drain_mode:
                link.drained()
                self.waiting.discard(r)
            else:
                self.waiting.add(r)
        else:
            self.waiting.discard(r)

    def _settled_by_client(self, state: ConnState, link: Any, impl: Any) -> None:
        """The client's disposition of a delivery we sent (``link``, ``impl``: proton's C link and delivery)."""
        info = state.link_info.at.get(addressof(link))
        r: Receiving | None = info.receiving if info is not None else None
        tag = v.tag_of(impl)
        token = r.tokens.get(tag) if r is not None else None
        if token is None or r is None:
            if not pn_delivery_settled(impl):
                pn_delivery_settle(impl)
            return
        if pn_delivery_remote_state(impl) == PN_ACCEPTED:  # complete: the common case, read at the C level
            error: ServiceBusError | None = None
            try:
                self.namespace.complete(state.model_conn, r.path, token)
            except ServiceBusError as e:
                error = e
            self._answer(r, tag, impl, Delivery.ACCEPTED, None, error)
            return
        dlv = Delivery(impl)
        txn = coordinator.transactional(dlv)
        if txn is not None:  # TXN-VIS-002: enlisted, applied at commit; the lock stays meanwhile
            try:
                kind, reason, description = coordinator.settlement_of(txn[1])
                self.namespace.transactions.settle(state.model_conn, txn[0], kind, r.path, token, reason, description)
            except ServiceBusError as error:
                dlv.local.condition = v.condition(error)
                dlv.update(Delivery.REJECTED)
                dlv.settle()
                r.tokens.pop(tag, None)
                return
            del r.tokens[tag]
            coordinator.answer_transactional(dlv, txn[0])
            return
        outcome = dlv.remote_state
        remote = dlv.remote
        ns = self.namespace
        reply = outcome
        error = None
        try:  # (accepted: completed above)
            if outcome == Delivery.RELEASED:
                ns.release(state.model_conn, r.path, token)
            elif outcome == Delivery.MODIFIED:
                # SETTLE-MOD-001: the modified outcome's message-annotations are the properties to modify
                props = properties_to_modify(remote.annotations)
                if remote.undeliverable:
                    ns.defer(state.model_conn, r.path, token, props)
                else:
                    ns.abandon(state.model_conn, r.path, token, props)
            elif outcome == Delivery.REJECTED:
                cond = remote.condition
                raw_info = (cond.info if cond is not None else None) or {}
                if not isinstance(raw_info, dict):  # AMQP 1.0 part 2, 2.8.14: an error's info is a map
                    raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, "the rejected outcome's error info is not a map", transient=False)
                info = dict(raw_info)
                # strings, as update-disposition's and a transactional rejection's (a long stored here failed every receive of the DLQ)
                reason = v.opt_str(info.pop("DeadLetterReason", info.pop(A("DeadLetterReason"), None)))
                desc = v.opt_str(info.pop("DeadLetterErrorDescription", info.pop(A("DeadLetterErrorDescription"), None)))
                # the rest of the error info: the properties to modify (SETTLE-MOD-001), as the .NET client sends them
                ns.dead_letter(state.model_conn, r.path, token, reason, desc, properties_to_modify(info))
            else:
                return  # not a terminal outcome yet
        except ServiceBusError as e:  # (properties to modify the broker could not write back too)
            error = e
        except UnicodeDecodeError:  # AMQP 1.0 part 1, 1.6.20 (proton raises reading such a string)
            error = ServiceBusError(ErrorCode.ARGUMENT_ERROR, "The disposition's outcome holds a string that is not valid UTF-8.",
                                    transient=False)
        self._answer(r, tag, impl, reply, remote, error)

    def _answer(self, r: Receiving, tag: bytes, impl: Any, reply: Any, remote: Any, error: ServiceBusError | None) -> None:
        """The settlement of a client's disposition done (or refused: ``error``): the lock
        token is spent either way; the client hears the outcome unless it settled first."""
        del r.tokens[tag]
        self.dirty.add(r.key)
        if pn_delivery_settled(impl):
            return  # the client settled first (older SDKs): it expects no answer
        if error is None and reply == Delivery.ACCEPTED:  # the common answer, through proton's C calls
            pn_delivery_update(impl, PN_ACCEPTED)
            pn_delivery_settle(impl)
            return
        dlv = Delivery(impl)
        if error is not None:
            dlv.local.condition = v.condition(error)
            dlv.update(Delivery.REJECTED)
        elif reply == Delivery.REJECTED:
            dlv.update(Delivery.REJECTED)
        elif reply == Delivery.MODIFIED:
            dlv.local.failed = remote.failed
            dlv.local.undeliverable = remote.undeliverable
            dlv.update(Delivery.MODIFIED)
        else:
            dlv.update(reply)
        dlv.settle()

    def _encode(self, d: Any, lock_token: bool = True) -> bytes:
        return codec.encode(d, self.clock.epoch_ms, lock_token)

    # ---------------------------------------------------------------- send
    def _admit(self, state: ConnState, link: Link, dlv: Delivery) -> bool:
        """The door for every transfer: on a link we granted, within its credit and the
        delivery size limit, under a token still valid. False: drop it (already answered)."""
        info = state.link_info.get(link)
        role = None if info is None else info.role
        if info is None or role == "refused":  # refused or never granted: store nothing, close
            self._shut(state, "amqp:unauthorized-access", "A transfer on a link the server refused or never granted.")
            return False
        if dlv != info.last and dlv.readable:  # its first frame (a delivery is readable until advanced)
            info.last = dlv
            if role == "detached":
                return self._drop(state, link, dlv)
            info.received += 1
            state.fed.add(link)
            if info.received > info.granted:  # AMQP 1.0 part 2, 2.6.7: no transfer without credit
                self._detach_with(state, link, v.error(
                    "amqp:link:transfer-limit-exceeded", f"A transfer beyond the {info.granted} credits granted on this link."))
                return self._drop(state, link, dlv)
        elif role not in ("node", "entity"):
            return self._drop(state, link, dlv)
        if dlv.aborted:  # AMQP 1.0 part 2, 2.7.5: discarded by the recipient, implicitly settled
            return self._drop(state, link, dlv)
        limit = self.limits.max_delivery_size
        if dlv.pending > limit:  # across continuation frames: the connection goes, with its input
            self._shut(state, "amqp:link:message-size-exceeded",
                       f"A delivery over {limit} bytes (--max-delivery-size); the connection is closed.")
            return False
        if dlv.partial:
            if state.partial_bytes.get(link) != dlv.pending and state.in_progress(link, dlv.pending) > limit:
                self._shut(state, "amqp:resource-limit-exceeded",
                           f"Deliveries in progress on this connection hold over {limit} bytes together (--max-delivery-size); "
                           "the connection is closed.")
            return False
        state.done(link)
        if role == "entity":
            try:
                self._authorize(state, info.path)
            except ServiceBusError as error:  # the token expired since the attach
                self._detach_with(state, link, v.condition(error))
                return self._drop(state, link, dlv)
        return True

    @staticmethod
    def _drop(state: ConnState, link: Link, dlv: Delivery) -> bool:
        """Read and forget a transfer arriving on a link we detached (or one its sender aborted),
        and what the frame scanner recorded of it (else kept for the whole connection)."""
        if dlv.pending > 0 and not dlv.aborted:  # (an aborted delivery is not read: recv fails on it)
            link.recv(dlv.pending)
        if not dlv.partial:
            state.done(link)
            state.scanner.message_format(link.name, v.delivery_tag(dlv))
            link.advance()  # transfers on a link arrive one after the other: this is the current one
            dlv.settle()
        return False

    def _incoming(self, state: ConnState, link: Link, dlv: Delivery) -> None:
        if not self._admit(state, link, dlv):
            return
        if not dlv.readable:
            return
        data = link.recv(dlv.pending)
        fmt = state.scanner.message_format(link.name, v.delivery_tag(dlv))
        link.advance()
        if coordinator.is_coordinator(link):
            coordinator.control(self.namespace, state.model_conn, data, dlv, v.condition)
            self._mark_all_dirty()  # a commit's sends and abandons reach waiting receivers now
            return
        address = v.entity_path(link.remote_target.address)
        if v.is_node(address) and state.buffered() > self.limits.max_output_buffer:
            # its replies are not taken (a reply link without credit holds them, unseen by the
            # throttle, which stops reading only while output is framed): refused, not run
            dlv.local.condition = v.error("com.microsoft:server-busy", f"Over {self.limits.max_output_buffer} bytes of output wait for "
                                          "this connection to take them (--max-output-buffer): the request is refused.")
            dlv.update(Delivery.REJECTED)
            dlv.settle()
            return
        if address == "$cbs":
            try:
                self._cbs(state, data)
            except Refused as refused:  # not a message at all: the client's mistake, not ours
                dlv.local.condition = v.error("amqp:decode-error", str(refused))
                dlv.update(Delivery.REJECTED)
            else:
                dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        if address.endswith("$management") or address == "$sbconform":
            txn = coordinator.transactional(dlv)
            try:
                self._management(state, address, data, None if txn is None else txn[0])
            except Refused as refused:  # not a message at all, as on $cbs
                dlv.local.condition = v.error("amqp:decode-error", str(refused))
                dlv.update(Delivery.REJECTED)
                dlv.settle()
                return
            if txn is not None:
                coordinator.answer_transactional(dlv, txn[0])
                return
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        error: ServiceBusError | None = None
        txn = coordinator.transactional(dlv)
        destination = coordinator.destination_of(link)
        address = state.link_info.get(link).path  # as the attach spelt it for the model (values.canonical)
        if destination is not None:
            destination = v.canonical(self.namespace, v.entity_path(destination))
        try:
            if not data:  # proton hands over None for a TRANSFER of no bytes
                raise WireError("the transfer carried no bytes; a message has a body section (AMQP 1.0 part 3, 3.2)")
            check_size(self.namespace, address, len(data))  # the link's max-message-size, measured as sent
            if fmt == BATCH_FORMAT:
                messages = [self._decode(part) for part in data_sections(data)]
            else:
                messages = [self._decode(data)]
            for m in messages:
                self._check_storable(m)
            if txn is not None:  # TXN-VIS-001: enlisted, committed at discharge
                via = address if destination is not None else None
                self.namespace.transactions.send(state.model_conn, txn[0], destination if via else address, messages, via=via)
            else:
                self.namespace.send(state.model_conn, destination or address, messages)
        except ServiceBusError as e:
            error = e
        except Refused as e:  # the broker could not send it back as it came: refused at the door
            error = ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The message was refused: {e}")
        except (WireError, Exception) as e:  # undecodable: a rejection, not a crash
            error = ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"The message could not be decoded: {e}")
        key = paths.entity_key(address)
        entity = self.namespace.entities.get(key)
        if entity is not None and entity.description.forward_to is not None:
            self._mark_all_dirty()
        self.dirty.add(key)
        if dlv.settled:
            dlv.settle()
            return
        if error is not None:
            dlv.local.condition = v.condition(error)
            dlv.update(Delivery.REJECTED)
        elif txn is not None:
            coordinator.answer_transactional(dlv, txn[0])
            return
        else:
            dlv.update(Delivery.ACCEPTED)
        dlv.settle()

    def _check_storable(self, m: ModelMessage) -> None:
        """The door (``limits.check_storable``): ``Refused`` for a message this server could not deliver again."""
        check_storable(m, self.clock.now, self.clock.epoch_ms)

    def _decode(self, data: bytes) -> ModelMessage:
        return codec.decode(data, self.clock.epoch_ms)

