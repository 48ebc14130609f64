"""What the server knows about its clients, in records it owns: proton's objects carry no
attribute of ours; the server keeps dicts keyed by them (``ConnState.link_info``: one
``LinkInfo`` per link; ``Receiving.tokens``: the lock token of each delivery sent on it).
A proton wrapper hashes by the C object it wraps, so any wrapper of the same link finds its
record; a record is dropped when its link is freed (``Links._release``, ``_end_session``)."""

from __future__ import annotations

import selectors
import socket
import time
from typing import Any

from cproton import addressof
from proton import Collector, Connection, Delivery, Link, Transport

from sbreference import paths

from .limits import Limits
from ..amqp.wire import FrameScanner


class WallClock:
    """The model's clock on a server: milliseconds since the server started, plus whatever the
    ``$sbconform`` node was asked to move it forward (``shift``: virtual time on a real endpoint,
    so a test waits for a lock, a TTL or a schedule without sleeping)."""

    __slots__ = ("start", "epoch_ms", "offset")

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.epoch_ms = int(time.time() * 1000)
        self.offset = 0

    @property
    def now(self) -> int:
        return int((time.monotonic() - self.start) * 1000) + self.offset

    def advance(self, duration: int) -> int:  # the model never advances a wall clock
        return self.now

    def advance_to(self, instant: int) -> int:
        return self.now

    def shift(self, duration: int) -> int:
        """Move the clock ``duration`` ms forward at once (never back)."""
        self.offset += max(0, int(duration))
        return self.now

    def monotonic_of(self, instant: int) -> float:
        """The ``time.monotonic()`` value at which the clock reads ``instant``."""
        return self.start + (instant - self.offset) / 1000


class LinkInfo:
    """What the server knows about one link of a client.

    ``role``: "node" (requests to $cbs, $management, $sbconform, a transaction coordinator),
    "entity" (messages to or from ``path``), "refused" (attached with a null terminus and
    detached at once), "detached" (we detached it: what still arrives on it is dropped).
    ``granted``/``received``: every credit ever issued on it, every transfer it carried;
    ``last``: the incoming delivery counted last (one delivery spans several frames).
    ``receiving``: the client's receiver on an entity, if it is one."""

    __slots__ = ("role", "path", "granted", "received", "last", "receiving")

    def __init__(self, role: str, path: str = "") -> None:
        self.role = role
        self.path = path
        self.granted = 0
        self.received = 0
        self.last: Delivery | None = None
        self.receiving: Receiving | None = None


class LinkRecords(dict):
    """``ConnState.link_info``: the ``LinkInfo`` of each link by its proton wrapper, and the same
    records by the link's C address (``at``): a disposition or a flow is looked up from proton's
    C link, without a wrapper (whose hash and equality run in Python). A record holds its
    wrapper, and the wrapper its C link: no other link takes that address meanwhile. Every change
    goes through ``[link] =``, ``del``, ``pop`` and ``clear``, which keep both."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        super().__init__()
        self.at: dict[int, LinkInfo] = {}

    def __setitem__(self, link: Link, info: LinkInfo) -> None:
        super().__setitem__(link, info)
        self.at[addressof(link._impl)] = info

    def __delitem__(self, link: Link) -> None:
        super().__delitem__(link)
        del self.at[addressof(link._impl)]

    def pop(self, link: Link, *default: Any) -> Any:
        self.at.pop(addressof(link._impl), None)
        return super().pop(link, *default)

    def clear(self) -> None:
        super().clear()
        self.at.clear()

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("LinkRecords changes only through [link] =, del, pop and clear (which keep .at)")

    setdefault = update = popitem = __ior__ = _unsupported


class ConnState:
    """What the server knows about one client connection."""

    def __init__(self, sock: socket.socket, model_conn: int, limits: Limits = Limits()) -> None:
        self.sock = sock
        self.scanner = FrameScanner()
        self.transport = Transport(Transport.SERVER)
        self.transport.max_frame_size = limits.max_frame_size
        # advertised in OPEN (proton says half); enforced by the server (_tick), which checks
        # before proton would (proton's deadline starts at a tick after the last input)
        self.transport.idle_timeout = limits.idle_timeout
        self.last_input = time.monotonic()
        sasl = self.transport.sasl()
        sasl.allow_insecure_mechs = True
        sasl.allowed_mechs("ANONYMOUS PLAIN")
        self.connection = Connection()
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.model_conn = model_conn
        self.audiences: dict[str, int] = {}  # entity path (lower case) -> expiry (epoch s) of the token for it
        self.granted: set[Link] = set()  # entity links opened on a grant (checked again at every tick)
        self.link_info = LinkRecords()  # our record of each of its links (by wrapper, and by C address: .at)
        self.open_deadline = time.monotonic() + limits.open_timeout
        self.opened = False  # the client's OPEN arrived
        self.closing = False  # we closed the connection: its input is read and dropped
        self.close_by = 0.0  # when closing: the socket is closed at this instant at the latest
        self.throttled = False  # its output is over the cap: neither read from nor served
        self.registered = True
        self.unpushed = memoryview(b"")  # bytes read that proton could not take yet
        self.open_links: set[Link] = set()  # links the client has open (attached, not detached nor ended)
        self.sessions: set[Any] = set()  # its sessions (for the bytes queued in them)
        self.fed: set[Link] = set()  # links that received transfers in this read (credit top-up)
        self.reply_links: dict[str, Link] = {}  # node address ($cbs, q/$management) -> our sender
        self.reply_addresses: dict[Link, list[str]] = {}  # our sender -> the addresses it answers (``reply_links``' keys)
        self.session_links: dict[Any, set[Link]] = {}  # each session's links the client opened (END frees them)
        self.receivers: list[Receiving] = []
        self.pending_sessions: list[Receiving] = []
        # what its waits for a session are on: their entities and their earliest deadline (kept by
        # ``Links._attach`` and ``_retry_sessions``; an ended wait may linger in them until the next
        # full round, which only costs that round): a turn that changed none of them skips them all
        self.session_keys: set[str] = set()
        self.session_due = float("inf")
        # the bytes of each delivery in progress (more frames to come), by its link, and their sum:
        # together bounded by --max-delivery-size (``Deliveries._admit``)
        self.partial_bytes: dict[Link, int] = {}
        self.partial_total = 0
        self.events = selectors.EVENT_READ  # what the selector watches for on its socket
        self.closed = False
        self.clean_close = False
        self.tag = 0
        self._link_address = 0  # the C link of the wrapper ``link_of`` built last, and that wrapper
        self._link: Link | None = None

    @property
    def links(self) -> int:
        """How many links the client has open (``--max-links`` bounds it)."""
        return len(self.open_links)

    def queued_output(self) -> int:
        """Bytes of deliveries queued in its sessions, not yet framed for the transport."""
        return sum(session.outgoing_bytes for session in self.sessions)

    def buffered(self) -> int:
        """Output held for this peer: framed bytes not yet written, and queued deliveries."""
        return max(self.transport.pending(), 0) + self.queued_output()

    def link_of(self, impl: Any) -> Link:
        """The Python wrapper of proton's C link ``impl``. The last one built is kept: the
        deliveries and flows of a connection come on few links, mostly many in a row on one
        (and a kept wrapper holds its link: no other link can take its address meanwhile)."""
        address = addressof(impl)
        if address != self._link_address or self._link is None:
            self._link = Link.wrap(impl)
            self._link_address = address
        return self._link

    def in_progress(self, link: Link, pending: int) -> int:
        """The delivery in progress on ``link`` holds ``pending`` bytes so far; all of them now."""
        self.partial_total += pending - self.partial_bytes.get(link, 0)
        self.partial_bytes[link] = pending
        return self.partial_total

    def done(self, link: Link) -> None:
        """No delivery in progress on ``link`` any more (completed, dropped, or the link gone)."""
        self.partial_total -= self.partial_bytes.pop(link, 0)

    def next_tag(self) -> bytes:
        self.tag += 1
        return self.tag.to_bytes(8, "big")


class Receiving:
    """A client's receiver: our sending link on an entity. ``tokens``: the lock token of each
    delivery sent on it and not settled yet (peek-lock), by the delivery's tag."""

    __slots__ = ("link", "conn", "path", "key", "mode", "session_id", "wants_session", "deadline", "address",
                 "pending_session_id", "tokens")

    def __init__(self, link: Link, conn: ConnState, path: str, mode: str) -> None:
        self.link = link
        self.conn = conn
        self.path = path
        self.key = paths.entity_key(path)
        self.mode = mode
        self.session_id: str | None = None
        self.wants_session = False
        self.deadline = 0.0
        self.address = ""
        self.pending_session_id: str | None = None  # the session it asked for, while it waits
        self.tokens: dict[bytes, int] = {}  # delivery tag -> lock token


class Waiting(dict):
    """Entity key -> the receivers waiting on it with credit. A key lives while a receiver waits
    on it: the last one gone takes it away (a key for every entity ever waited on, 10,000
    entities made, attached to and deleted, was 10,000 empty sets for the life of the server)."""

    def add(self, r: Receiving) -> None:
        waiting = self.get(r.key)
        if waiting is None:
            waiting = self[r.key] = set()
        waiting.add(r)

    def discard(self, r: Receiving) -> None:
        waiting = self.get(r.key)
        if waiting is not None:
            waiting.discard(r)
            if not waiting:
                del self[r.key]
