"""``ConnState.link_info`` (``LinkRecords``) keeps its records by proton wrapper and by C
address (``at``) alike: a disposition or a flow is looked up by the C link alone."""

from __future__ import annotations

import pytest

proton = pytest.importorskip("proton")

from cproton import addressof  # noqa: E402

from sbconform.server.state import LinkInfo, LinkRecords  # noqa: E402


def _links(n: int):
    connection = proton.Connection()
    session = connection.session()
    return connection, [session.sender(f"link-{i}") for i in range(n)]


def test_every_change_keeps_both_views() -> None:
    _connection, (a, b, c) = _links(3)
    records = LinkRecords()
    records[a] = first = LinkInfo("entity", "q")
    records[b] = LinkInfo("node")
    records[c] = LinkInfo("refused")
    assert records.at[addressof(a._impl)] is first
    assert records.at.get(addressof(proton.Link.wrap(a._impl)._impl)) is first  # any wrapper's C link finds it
    records[a] = again = LinkInfo("detached")  # replaced
    assert records.at[addressof(a._impl)] is again and records.get(a) is again
    assert records.pop(b, None) is not None and records.pop(b, None) is None
    del records[c]
    assert list(records.at.values()) == list(records.values()) == [again]
    records.clear()
    assert not records and not records.at


@pytest.mark.parametrize("change", [
    lambda r, link: r.setdefault(link, LinkInfo("node")),
    lambda r, link: r.update({link: LinkInfo("node")}),
    lambda r, link: r.popitem(),
])
def test_a_change_that_would_skip_the_address_view_is_refused(change) -> None:
    _connection, (link,) = _links(1)
    records = LinkRecords()
    records[link] = LinkInfo("node")
    with pytest.raises(TypeError):
        change(records, link)
    assert records.at == {addressof(link._impl): records[link]}
