"""The pytest plugin keeps its run state in ``config.stash`` (issue 12: no attributes hung on
the pytest config), with the records of ``sbconform.results``."""

from __future__ import annotations

import pytest

from sbconform.pytest_plugin import META, RESULTS, SESSION, TargetSession, target_session


def test_the_plugin_state_is_in_the_stash_not_on_the_config(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> None:
    session = pytestconfig.stash[SESSION]
    assert isinstance(session, TargetSession) and target_session(pytestconfig) is session
    meta = pytestconfig.stash[META][request.node.nodeid]  # this very test, as collected
    assert meta["title"] == request.node.nodeid and meta["kind"] == "test" and meta["clauses"] == []
    assert isinstance(pytestconfig.stash[RESULTS], list)
    assert not [name for name in vars(pytestconfig) if name.startswith("_sb")]
