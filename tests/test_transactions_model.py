"""The transaction coordinator of the reference model (sbreference/transactions.py): unit tests and
the rollback / commit properties (TXN-ROLLBACK-001, TXN-ATOM-001)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbreference import ErrorCode, Message, Namespace, ServiceBusError
from sbreference.transactions import TRANSACTION_TIMEOUT


def fresh(**kw) -> tuple[Namespace, int]:
    ns = Namespace(**kw)
    ns.create_queue("q", lock_duration=30_000)
    ns.create_queue("other")
    return ns, ns.connect()


def bodies(ns: Namespace, path: str) -> list[str]:
    return [d.message.body for d in ns.peek(path, 1, 1000)]


def code_of(fn, *args, **kw) -> ErrorCode:
    with pytest.raises(ServiceBusError) as e:
        fn(*args, **kw)
    return e.value.code


def test_sends_are_invisible_until_commit_and_then_all_appear():
    ns, c = fresh()
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "q", [Message(body="a"), Message(body="b")])
    assert bodies(ns, "q") == []
    assert ns.receive(c, "q", 10) == []
    committed = ns.transactions.discharge(c, t, fail=False)
    assert bodies(ns, "q") == ["a", "b"]
    assert committed == {"q": [1, 2]}


def test_settlement_takes_effect_at_commit_and_the_message_stays_locked_until_then():
    ns, c = fresh()
    ns.send(c, "q", Message(body="m"))
    (d,) = ns.receive(c, "q")
    t = ns.transactions.declare(c)
    ns.transactions.settle(c, t, "complete", "q", d.lock_token)
    assert ns.runtime_info("q")["active"] == 1  # still there, locked
    assert ns.receive(c, "q") == []  # and nobody else gets it
    ns.transactions.discharge(c, t, fail=False)
    assert bodies(ns, "q") == []


def test_rollback_leaves_the_settled_message_locked_by_its_receiver():
    ns, c = fresh()
    ns.send(c, "q", Message(body="m"))
    (d,) = ns.receive(c, "q")
    t = ns.transactions.declare(c)
    ns.transactions.settle(c, t, "dead_letter", "q", d.lock_token, "why", "because")
    ns.transactions.discharge(c, t, fail=True)
    assert bodies(ns, "q/$deadletterqueue") == []
    ns.complete(c, "q", d.lock_token)  # the lock is still the receiver's
    assert bodies(ns, "q") == []


def test_a_commit_whose_lock_was_lost_applies_nothing():
    ns, c = fresh()
    ns.send(c, "q", [Message(body="m1"), Message(body="m2")])
    d1, d2 = ns.receive(c, "q", 2)
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "q", Message(body="new"))
    ns.transactions.settle(c, t, "complete", "q", d1.lock_token)
    ns.transactions.settle(c, t, "complete", "q", d2.lock_token)
    ns.complete(c, "q", d2.lock_token)  # settled outside the transaction meanwhile
    assert code_of(ns.transactions.discharge, c, t, fail=False) == ErrorCode.TRANSACTION_ROLLBACK
    assert bodies(ns, "q") == ["m1"]  # m1 not completed, "new" not sent


def test_the_timeout_runs_from_the_first_operation():
    ns, c = fresh()
    t = ns.transactions.declare(c)
    ns.clock.advance(TRANSACTION_TIMEOUT * 3)  # idle time before the first operation does not count
    ns.transactions.send(c, t, "q", Message(body="a"))
    ns.clock.advance(TRANSACTION_TIMEOUT - 1)
    ns.transactions.send(c, t, "q", Message(body="b"))
    ns.clock.advance(1)
    assert code_of(ns.transactions.discharge, c, t, fail=False) == ErrorCode.TRANSACTION_TIMEOUT
    assert bodies(ns, "q") == []
    assert code_of(ns.transactions.discharge, c, t, fail=False) == ErrorCode.TRANSACTION_UNKNOWN


def test_work_after_the_timeout_is_refused():
    ns, c = fresh()
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "q", Message(body="a"))
    ns.clock.advance(TRANSACTION_TIMEOUT)
    assert code_of(ns.transactions.send, c, t, "q", Message(body="b")) == ErrorCode.TRANSACTION_TIMEOUT


def test_unknown_discharged_and_foreign_transactions():
    ns, c = fresh()
    other = ns.connect()
    assert code_of(ns.transactions.discharge, c, 99, fail=False) == ErrorCode.TRANSACTION_UNKNOWN
    t = ns.transactions.declare(c)
    assert code_of(ns.transactions.send, other, t, "q", Message(body="x")) == ErrorCode.TRANSACTION_UNKNOWN
    ns.transactions.discharge(c, t, fail=False)
    assert code_of(ns.transactions.discharge, c, t, fail=True) == ErrorCode.TRANSACTION_UNKNOWN
    assert code_of(ns.transactions.send, c, t, "q", Message(body="x")) == ErrorCode.TRANSACTION_UNKNOWN
    assert bodies(ns, "q") == []


def test_a_transaction_is_scoped_to_one_entity_unless_sent_via_it():
    ns, c = fresh()
    ns.send(c, "q", Message(body="in"))
    (d,) = ns.receive(c, "q")
    t = ns.transactions.declare(c)
    ns.transactions.settle(c, t, "complete", "q", d.lock_token)
    assert code_of(ns.transactions.send, c, t, "other", Message(body="out")) == ErrorCode.INVALID_OPERATION
    ns.transactions.send(c, t, "other", Message(body="out"), via="q")  # the transfer entity
    assert bodies(ns, "other") == []
    ns.transactions.discharge(c, t, fail=False)
    assert bodies(ns, "other") == ["out"] and bodies(ns, "q") == []


def test_the_connection_going_away_rolls_back():
    ns, c = fresh()
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "q", Message(body="a"))
    ns.drop_connection(c)
    assert bodies(ns, "q") == []
    assert code_of(ns.transactions.discharge, c, t, fail=False) == ErrorCode.TRANSACTION_UNKNOWN


@pytest.mark.clauses("TXN-TIER-001")
def test_basic_tier_has_no_transactions():
    ns = Namespace(sku="basic")
    assert code_of(ns.transactions.declare, ns.connect()) == ErrorCode.INVALID_OPERATION


def test_at_most_100_messages():
    ns, c = fresh()
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "q", [Message(body=str(i)) for i in range(100)])
    assert code_of(ns.transactions.send, c, t, "q", Message(body="101")) == ErrorCode.QUOTA_EXCEEDED


def test_a_send_that_would_be_refused_is_refused_when_enlisted():
    ns, c = fresh()
    ns.create_queue("sq", requires_session=True)
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "sq", Message(body="ok", session_id="s"))
    assert code_of(ns.transactions.send, c, t, "sq", Message(body="no session")) == ErrorCode.INVALID_OPERATION
    ns.transactions.discharge(c, t, fail=False)
    assert bodies(ns, "sq") == ["ok"]


def test_one_lock_is_settled_once_per_transaction():
    ns, c = fresh()
    ns.send(c, "q", Message(body="m"))
    (d,) = ns.receive(c, "q")
    t = ns.transactions.declare(c)
    ns.transactions.settle(c, t, "defer", "q", d.lock_token)
    assert code_of(ns.transactions.settle, c, t, "complete", "q", d.lock_token) == ErrorCode.MESSAGE_LOCK_LOST


# ------------------------------------------------------------------ properties

# Operations: ("send", body) plain, ("recv",) plain peek-lock receive, ("settle", i, kind) plain
# settlement of the i-th held lock, ("tsend", body) and ("tsettle", i, kind) in the transaction,
# ("time", ms).
SETTLE_KINDS = ["complete", "abandon", "defer", "dead_letter"]
op = st.one_of(
    st.tuples(st.just("send"), st.text("abc", min_size=1, max_size=3)),
    st.tuples(st.just("recv")),
    st.tuples(st.just("settle"), st.integers(0, 5), st.sampled_from(SETTLE_KINDS)),
    st.tuples(st.just("tsend"), st.text("xyz", min_size=1, max_size=3)),
    st.tuples(st.just("tsettle"), st.integers(0, 5), st.sampled_from(SETTLE_KINDS)),
    st.tuples(st.just("time"), st.integers(0, 20_000)),
)


def observe(ns: Namespace) -> tuple:
    """Everything a client could see: messages by state in the queue and its dead-letter queue, and counts."""
    return (
        [(d.message.body, d.sequence_number, d.state.value, d.delivery_count) for d in ns.peek("q", 1, 1000)],
        [(d.message.body, d.sequence_number) for d in ns.peek("q/$deadletterqueue", 1, 1000)],
        sorted(ns.runtime_info("q").items()),
    )


def run(ops, transactional: bool, commit: bool = False, then_apply=()) -> tuple[Namespace, list, bool]:
    """Run ``ops`` on a fresh namespace. With ``transactional`` the transactional ones are enlisted
    in one transaction, discharged at the end (committed if ``commit``); without, they are skipped
    and ``then_apply`` (work as plain operations) is applied at the end instead. Returns the
    namespace, the work the transaction accepted, and whether the discharge (or the plain work)
    succeeded."""
    ns, c = fresh()
    held: list[int] = []
    t = ns.transactions.declare(c) if transactional else None
    enlisted = []
    for o in ops:
        try:
            if o[0] == "send":
                ns.send(c, "q", Message(body=o[1]))
            elif o[0] == "recv":
                held += [d.lock_token for d in ns.receive(c, "q", 1)]
            elif o[0] == "settle" and held:
                getattr(ns, o[2])(c, "q", held[o[1] % len(held)])
            elif o[0] == "time":
                ns.clock.advance(o[1])
            elif o[0] == "tsend" and transactional:
                ns.transactions.send(c, t, "q", Message(body=o[1]))
                enlisted.append(("send", o[1]))
            elif o[0] == "tsettle" and held and transactional:
                token = held[o[1] % len(held)]
                ns.transactions.settle(c, t, o[2], "q", token)
                enlisted.append((o[2], token))
        except ServiceBusError:
            pass
    ok = True
    try:
        if transactional:
            ns.transactions.discharge(c, t, fail=not commit)
        else:
            for kind, arg in then_apply:
                if kind != "send":
                    getattr(ns, kind)(c, "q", arg)
            sends = [Message(body=arg) for kind, arg in then_apply if kind == "send"]
            if sends:
                ns.send(c, "q", sends)
    except ServiceBusError:
        ok = False
    return ns, enlisted, ok


@pytest.mark.clauses("TXN-ROLLBACK-001")
@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_rollback_leaves_the_entity_as_if_the_transaction_never_ran(ops):
    """TXN-ROLLBACK-001, over random interleavings of transactional and plain operations."""
    assert observe(run(ops, transactional=True, commit=False)[0]) == observe(run(ops, transactional=False)[0])


@pytest.mark.clauses("TXN-ATOM-001")
@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=25))
def test_a_commit_applies_all_of_its_work_at_once_or_nothing(ops):
    """TXN-ATOM-001: a successful commit leaves the entity exactly as if its work had been done at
    the commit as plain operations (settlements, then the sends as one batch); a failed one leaves
    it as a rollback does."""
    committed, enlisted, ok = run(ops, transactional=True, commit=True)
    if ok:
        twin, _, twin_ok = run(ops, transactional=False, then_apply=enlisted)
        assert twin_ok
        assert observe(committed) == observe(twin)
    else:
        assert observe(committed) == observe(run(ops, transactional=False)[0])


def test_each_send_of_a_transaction_is_checked_as_it_was_sent():
    """Two 200 KB sends in one transaction (review: they were checked as one 400 KB batch)."""
    ns, c = fresh()
    t = ns.transactions.declare(c)
    ns.transactions.send(c, t, "q", Message(body=b"x" * 200_000))
    ns.transactions.send(c, t, "q", Message(body=b"y" * 200_000))
    ns.transactions.discharge(c, t, fail=False)
    assert ns.runtime_info("q")["active"] == 2


def test_a_connection_holds_a_bounded_number_of_transactions_and_bytes():
    from sbreference.transactions import MAX_ACTIVE_PER_CONNECTION

    ns, c = fresh()
    ids = [ns.transactions.declare(c) for _ in range(MAX_ACTIVE_PER_CONNECTION)]
    assert code_of(ns.transactions.declare, c) == ErrorCode.QUOTA_EXCEEDED
    ns.transactions.discharge(c, ids[0], fail=True)
    ns.transactions.declare(c)  # room again
    ns.close_connection(c)
    assert ns.transactions.active == {} and ns.transactions.by_connection == {}


def test_a_disposition_of_several_locks_is_enlisted_whole_or_not_at_all():
    ns, c = fresh()
    ns.send(c, "q", [Message(body="a"), Message(body="b")])
    a, b = ns.receive(c, "q", 2)
    t = ns.transactions.declare(c)
    assert code_of(ns.transactions.settle_all, c, t, "complete", "q", [a.lock_token, 999]) == ErrorCode.MESSAGE_LOCK_LOST
    ns.transactions.discharge(c, t, fail=False)
    assert sorted(bodies(ns, "q")) == ["a", "b"]
