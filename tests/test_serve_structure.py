"""The shape of ``sbconform serve`` (issue 12): modules by concern, each under 500 lines, and
no attribute of ours hung on proton's objects (the server keeps dicts keyed by them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

proton = pytest.importorskip("proton")  # the sdk extra; make certify installs only the test extra

SERVER = Path(__file__).resolve().parents[1] / "sbconform" / "server"
#: an assignment to an attribute of a proton link, delivery, session, connection or terminus
ASSIGNED = re.compile(r"\b(link|dlv|delivery|session|connection|c|source|target)\.([A-Za-z_]\w*)\s*=(?!=)")
OWNER = {"link": proton.Link, "dlv": proton.Delivery, "delivery": proton.Delivery, "session": proton.Session,
         "connection": proton.Connection, "c": proton.Connection, "source": proton.Terminus, "target": proton.Terminus}
#: proton's own record attributes (set in ``Endpoint._init``; ``condition`` is read when the endpoint closes)
PROTONS_RECORD = {"condition"}


def protons_own(owner: type, attribute: str) -> bool:
    return hasattr(owner, attribute) or (issubclass(owner, proton.Endpoint) and attribute in PROTONS_RECORD)


def test_every_server_module_is_under_500_lines() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in SERVER.glob("*.py")}
    assert sizes and all(n < 500 for n in sizes.values()), {k: n for k, n in sizes.items() if n >= 500}


def test_the_server_sets_only_protons_own_attributes_on_protons_objects() -> None:
    """proton's wrappers store any unknown attribute in the C object's record (``link.sb_role``
    used to work that way, with ``type: ignore``): only proton's own properties may be set."""
    ours = []
    for path in sorted(SERVER.glob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name, attribute in ASSIGNED.findall(line):
                if not protons_own(OWNER[name], attribute):
                    ours.append(f"{path.name}:{number}: {name}.{attribute}")
            if "setattr(" in line:
                ours.append(f"{path.name}:{number}: setattr")
    assert not ours, ours


def test_the_check_sees_an_attribute_of_ours() -> None:
    """The pattern catches what it is there for (an invented attribute is not proton's)."""
    line = '        link.sb_role = "node"'
    found = ASSIGNED.findall(line)
    assert found == [("link", "sb_role")] and not protons_own(proton.Link, "sb_role")


def test_every_event_the_dispatcher_acts_on_reaches_it() -> None:
    """The connection loop pops, unread, every proton event outside ``_HANDLED`` (most are
    proton's own bookkeeping): an event type ``_event`` acts on but missing there would be
    dropped silently. Both lists are read from the source."""
    from sbconform.server import connections

    source = (SERVER / "connections.py").read_text(encoding="utf-8")
    body = source[source.index("    def _event(self"):]
    end = body.find("\n    def ", 10)
    body = body if end < 0 else body[:end]
    acted_on = {getattr(proton.Event, name).number for name in re.findall(r"kind == Event\.([A-Z_]+)", body)}
    acted_on.add(proton.Event.DELIVERY.number)  # handed to _delivery by _events itself
    acted_on.add(proton.Event.LINK_FLOW.number)  # handed to _flow by _events itself
    assert len(acted_on) >= 9, acted_on
    assert acted_on <= connections._HANDLED, acted_on - connections._HANDLED
