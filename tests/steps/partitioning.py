"""Steps for partitioned entities (features/partitioning). Partitions are observed the
way any client can observe them: the top 16 bits of a sequence number name the
partition (``sbreference.partition_of``)."""

from __future__ import annotations

import re

from pytest_bdd import parsers
from pytest_bdd import step as bdd_step

from sbreference import partition_of

from .world import World, assert_locked_for, compares_clocks, entity_properties, message_attributes, quoted, seconds

IDS = r'"[^"]+"(?:, "[^"]+")*'


def step(pattern: str):
    return bdd_step(parsers.re(pattern))


def id_range(first: str, last: str) -> list[str]:
    """'u1', 'u16' -> ['u1', ..., 'u16']."""
    a, b = re.fullmatch(r"(.*?)(\d+)", first), re.fullmatch(r"(.*?)(\d+)", last)
    if not a or not b or a[1] != b[1]:
        raise ValueError(f"not a range of ids: {first!r} to {last!r}")
    return [f"{a[1]}{i}" for i in range(int(a[2]), int(b[2]) + 1)]


def ids_of(text: str) -> list[str]:
    """'"u1" to "u3" and "k1", "k2"' -> every id named, ranges expanded."""
    out: list[str] = []
    for part in re.split(r"\s+and\s+", text):
        match = re.fullmatch(r'"([^"]+)" to "([^"]+)"', part.strip())
        out.extend(id_range(match[1], match[2]) if match else quoted(part))
    return out


def partitions_of(world: World, ref: str) -> dict[str, list[int]]:
    """message id -> the partitions its copies sit in (by peeking everything)."""
    out: dict[str, list[int]] = {}
    for m in world.peek_all(ref):
        out.setdefault(m.message_id, []).append(partition_of(m.sequence_number))
    return out


def messages_per_partition(world: World, ref: str) -> dict[int, int]:
    """partition -> how many messages sit in it (by peeking everything)."""
    per: dict[int, int] = {}
    for places in partitions_of(world, ref).values():
        for p in places:
            per[p] = per.get(p, 0) + 1
    return per


# ------------------------------------------------------------------ set-up


@step(r'a partitioned queue "(?P<name>[^"]+)"(?: with (?P<props>(?:(?! forwarding| is created).)+))?')
def partitioned_queue(world: World, name: str, props: str | None) -> None:
    world.paths[name] = world.target.create_queue(name, enable_partitioning=True, **entity_properties(props or ""))


@step(r'a partitioned topic "(?P<name>[^"]+)" with subscriptions (?P<subs>.+)')
def partitioned_topic(world: World, name: str, subs: str) -> None:
    path = world.paths[name] = world.target.create_topic(name, enable_partitioning=True)
    for sub in quoted(subs):
        world.target.create_subscription(path, sub)


@step(r'a (?P<partitioned>partitioned )?queue "(?P<name>[^"]+)" forwarding to "(?P<dest>[^"]+)"')
def forwarding_queue(world: World, partitioned: str | None, name: str, dest: str) -> None:
    world.paths[name] = world.target.create_queue(name, enable_partitioning=bool(partitioned), forward_to=world.path(dest))


@step(r"a Premium namespace with (?P<n>\d+) partitions")
def premium_namespace(world: World, n: str) -> None:
    premium = world.target.premium_namespace(int(n))
    world.extra_targets = getattr(world, "extra_targets", []) + [premium]
    world.target = premium  # every later step of the scenario talks to it


@step(r"a Basic namespace")
def basic_namespace(world: World) -> None:
    basic = world.target.basic_namespace()
    world.extra_targets = getattr(world, "extra_targets", []) + [basic]
    world.target = basic  # every later step of the scenario talks to it


@step(r'a (?P<kind>partitioned queue|non-partitioned queue|queue) "(?P<name>[^"]+)" is created')
def try_create(world: World, kind: str, name: str) -> None:
    props = {"partitioned queue": {"enable_partitioning": True}, "non-partitioned queue": {"enable_partitioning": False}}.get(kind, {})
    path = world.attempt(world.target.create_queue, name, **props)
    if path is not None:
        world.paths[name] = path


@step(r"(?P<n>\d+) (?P<kind>partitioned queues|queues) are created")
def create_many(world: World, n: str, kind: str) -> None:
    for i in range(int(n)):
        path = world.attempt(world.target.create_queue, f"bulk-{kind[0]}{i}", enable_partitioning=kind.startswith("partitioned"))
        if path is None:
            return


# ----------------------------------------------------------------- sending


@step(r'messages "(?P<first>[^"]+)" to "(?P<last>[^"]+)"(?: with (?P<attrs>.+?))? are sent to "(?P<entity>[^"]+)"')
def send_range(world: World, first: str, last: str, attrs: str | None, entity: str) -> None:
    attributes = message_attributes(attrs)
    sender = world.sender(entity)
    for mid in id_range(first, last):
        world.attempt(world.target.send, sender, [world.build(mid, attributes)])
        if not world.error_checked:
            return


@step(r'a transaction sends (?P<items>.+) to "(?P<entity>[^"]+)"')
def send_in_transaction(world: World, items: str, entity: str) -> None:
    messages = []
    for match in re.finditer(r'"([^"]+)"(?: with ((?:(?! and ").)+))?', items):
        messages.append(world.build(match[1], message_attributes(match[2])))
    world.attempt(world.target.send_transaction, [(world.sender(entity), messages)])


# ------------------------------------------------------------- management


@step(r'"(?P<entity>[^"]+)" is updated to (?P<what>enable|disable) partitioning')
def update_partitioning(world: World, entity: str, what: str) -> None:
    world.attempt(world.target.update_entity, world.path(entity), enable_partitioning=what == "enable")


@step(r'"(?P<entity>[^"]+)" is updated with (?P<props>.+)')
def update_entity(world: World, entity: str, props: str) -> None:
    world.attempt(world.target.update_entity, world.path(entity), **entity_properties(props))


@step(r'"(?P<entity>[^"]+)" is deleted')
def delete_entity(world: World, entity: str) -> None:
    world.attempt(world.target.delete_entity, world.path(entity))


@step(r'the partition holding "(?P<mid>[^"]+)" in "(?P<entity>[^"]+)" (?P<change>goes down|comes back)')
def partition_of_message_changes(world: World, mid: str, entity: str, change: str) -> None:
    if not hasattr(world, "down"):
        world.down = {}
    if change == "goes down":
        index = partitions_of(world, entity)[mid][0]
        world.down[mid] = index
        world.target.make_partition_unavailable(world.path(entity), index)
    else:
        world.target.make_partition_available(world.path(entity), world.down[mid])


@step(r'partition (?P<index>\d+) of "(?P<entity>[^"]+)" (?P<change>goes down|comes back)')
def partition_changes(world: World, index: str, entity: str, change: str) -> None:
    if change == "goes down":
        world.target.make_partition_unavailable(world.path(entity), int(index))
    else:
        world.target.make_partition_available(world.path(entity), int(index))


@step(r'peeking (?P<n>\d+) messages? of "(?P<entity>[^"]+)"')
def peek_some(world: World, n: str, entity: str) -> None:
    world.peek_request = int(n)
    world.peeked = world.target.peek(world.peeker(entity), int(n), 1)
    world.peeked_entity = entity


# ------------------------------------------------------------------ checks


@step(r'"(?P<entity>[^"]+)" has (?P<n>\d+) partitions')
def partition_count(world: World, entity: str, n: str) -> None:
    counts = world.target.entity_counts(world.path(entity))
    assert counts.get("partition_count") == int(n), f"{entity!r} has {counts.get('partition_count')} partitions"


@step(r'every message "(?P<first>[^"]+)" to "(?P<last>[^"]+)" of "(?P<entity>[^"]+)" is held once, in one of its (?P<n>\d+) partitions')
def held_once(world: World, first: str, last: str, entity: str, n: str) -> None:
    """PART-STRUCT-001 as a client sees it: browsing the whole entity shows each message
    exactly once, and its sequence number names one of the entity's partitions."""
    seen: dict[str, list[int]] = {}
    for m in world.peek_all(entity):
        seen.setdefault(m.message_id, []).append(m.sequence_number)
    wanted = id_range(first, last)
    assert sorted(seen) == sorted(wanted), f"browsing {entity!r} shows {sorted(seen)}, expected {wanted}"
    for mid, seqs in seen.items():
        assert len(seqs) == 1, f"{mid} is held {len(seqs)} times (sequence numbers {seqs})"
        assert 0 <= partition_of(seqs[0]) < int(n), f"{mid}'s sequence number {seqs[0]} names partition {partition_of(seqs[0])}"


@step(r'every message of "(?P<entity>[^"]+)" is in exactly one partition')
def one_partition_each(world: World, entity: str) -> None:
    store = world.target.namespace.receiving_store(world.path(entity))
    holders: dict[int, list[int]] = {}
    for index, partition in enumerate(store.partitions):
        for seq in partition.messages:
            holders.setdefault(seq, []).append(index)
    assert holders, "no messages"
    for seq, where in holders.items():
        assert where == [partition_of(seq)], f"message {seq} is held by partitions {where}"


@step(r'the messages of "(?P<entity>[^"]+)" are spread over (?P<n>\d+) partitions?')
def spread_over(world: World, entity: str, n: str) -> None:
    used = {p for places in partitions_of(world, entity).values() for p in places}
    assert len(used) == int(n), f"the messages of {entity!r} are in partitions {sorted(used)}"


@step(r'the messages (?P<ids>.+) of "(?P<entity>[^"]+)" are in (?P<n>one|\d+ different) partitions?')
def messages_in_partitions(world: World, ids: str, entity: str, n: str) -> None:
    where = partitions_of(world, entity)
    wanted = ids_of(ids)
    used = [where[mid][0] for mid in wanted]
    if n == "one":
        assert len(set(used)) == 1, f"{wanted} are in partitions {used}"
    else:
        assert len(set(used)) == int(n.split()[0]) == len(wanted), f"{wanted} are in partitions {used}"


@step(r'"(?P<a>[^"]+)" and "(?P<b>[^"]+)" are in (?P<relation>the same partition|different partitions) of "(?P<entity>[^"]+)"')
def same_or_different(world: World, a: str, b: str, relation: str, entity: str) -> None:
    where = partitions_of(world, entity)
    same = where[a][0] == where[b][0]
    assert same == (relation == "the same partition"), f"{a!r} is in {where[a]}, {b!r} in {where[b]}"


@step(r'the copies of "(?P<mid>[^"]+)" in "(?P<entity>[^"]+)" are in (?P<n>\d+) different partitions')
def copies_spread(world: World, mid: str, entity: str, n: str) -> None:
    places = partitions_of(world, entity)[mid]
    assert len(set(places)) == int(n) == len(places), f"copies of {mid!r} are in partitions {places}"


@step(r'(?P<n>\d+) copies of message "(?P<mid>[^"]+)" are sent to "(?P<entity>[^"]+)"')
def send_copies(world: World, n: str, mid: str, entity: str) -> None:
    sender = world.sender(entity)
    for _ in range(int(n)):
        world.attempt(world.target.send, sender, [world.build(mid, {})])
        if not world.error_checked:
            return


@step(r'the copies of "(?P<mid>[^"]+)" in "(?P<entity>[^"]+)" are spread over more than one partition')
def copies_not_pinned(world: World, mid: str, entity: str) -> None:
    places = partitions_of(world, entity)[mid]
    assert len(places) > 1 and len(set(places)) > 1, f"the {len(places)} copies of {mid!r} are all in partitions {sorted(set(places))}"


@step(r'no partition of "(?P<entity>[^"]+)" holds more than (?P<most>\d+) of its (?P<total>\d+) messages')
def no_partition_favoured(world: World, entity: str, most: str, total: str) -> None:
    per = messages_per_partition(world, entity)
    assert sum(per.values()) == int(total), f"{entity!r} holds {sum(per.values())} messages, not {total}"
    assert max(per.values()) <= int(most), f"messages per partition: {per}"


@step(r'each of the (?P<count>\d+) partitions of "(?P<entity>[^"]+)" holds (?P<n>\d+) messages')
def evenly(world: World, count: str, entity: str, n: str) -> None:
    per = messages_per_partition(world, entity)
    assert sorted(per) == list(range(int(count))) and set(per.values()) == {int(n)}, f"messages per partition: {per}"


@step(r'receiver "(?P<r>[^"]+)" got (?P<ids>' + IDS + r") in that order among its messages")
def relative_order(world: World, r: str, ids: str) -> None:
    got = [m.message_id for m in world.got.get(r, [])]
    wanted = quoted(ids)
    assert [mid for mid in got if mid in wanted] == wanted, f"receiver {r!r} got {got}"


@step(r'receiver "(?P<r>[^"]+)" got exactly (?P<ids>.+) in any order')
def got_set(world: World, r: str, ids: str) -> None:
    world.require_no_pending_error()
    got = sorted(m.message_id for m in world.got.get(r, []))
    assert got == sorted(ids_of(ids)), f"receiver {r!r} got {got}"


@step(r'receiver "(?P<r>[^"]+)" got (?P<n>\d+) messages, not "(?P<mid>[^"]+)"')
def got_count_without(world: World, r: str, n: str, mid: str) -> None:
    got = [m.message_id for m in world.got.get(r, [])]
    assert len(got) == int(n) and mid not in got, f"receiver {r!r} got {len(got)} messages: {got}"


@step(r'receiver "(?P<r>[^"]+)" got the head of one of the partitions of "(?P<entity>[^"]+)"')
def got_a_head(world: World, r: str, entity: str) -> None:
    """Nothing older than what it got was still available in the same partition."""
    (m,) = world.got[r]
    partition = partition_of(m.sequence_number)
    older = [
        p.message_id for p in world.peek_all(entity)
        if partition_of(p.sequence_number) == partition and p.sequence_number < m.sequence_number
        and p.state == "active" and p.locked_until is None and p.message_id not in world.held.get(r, {})
    ]
    assert not older, f"receiver {r!r} got {m.message_id!r} while {older} were ahead of it in partition {partition}"


@step(r"the peek shows messages of one partition, oldest first")
def peek_one_partition(world: World) -> None:
    assert world.peeked, "the peek shows nothing"
    parts = {partition_of(m.sequence_number) for m in world.peeked}
    assert len(parts) == 1, f"the peek mixes partitions {sorted(parts)}"
    seqs = [m.sequence_number for m in world.peeked]
    assert seqs == sorted(seqs), f"not oldest first: {seqs}"
    partition = parts.pop()
    oldest = min(m.sequence_number for m in world.peek_all(world.peeked_entity) if partition_of(m.sequence_number) == partition)
    assert seqs[0] == oldest, f"the peek did not start at partition {partition}'s oldest message"


@step(r"the peek may show fewer than (?P<n>\d+) messages")
def peek_may_be_short(world: World, n: str) -> None:
    shown = world.peeked
    assert len(shown) <= int(n)
    if len(shown) < int(n):  # then its partition has nothing more to show
        partition = partition_of(shown[0].sequence_number)
        rest = [m for m in world.peek_all(world.peeked_entity) if partition_of(m.sequence_number) == partition]
        assert len(rest) == len(shown), f"the peek stopped at {len(shown)} though its partition holds {len(rest)}"


@step(compares_clocks(r'every message receiver "(?P<r>[^"]+)" got is locked until (?P<n>\d+) seconds after it was received'))
def all_locked_for(world: World, r: str, n: str) -> None:
    world.require_no_pending_error()
    got = world.got.get(r, [])
    assert got, f"receiver {r!r} got nothing"
    for m in got:
        assert_locked_for(world, m.locked_until, world.receive_began[m.message_id], world.received_at[m.message_id], n,
                          f"{m.message_id!r}", "it was received")


@step(r'"(?P<entity>[^"]+)" reports (?P<n>\d+) active messages and availability "(?P<status>[^"]+)"')
def reports(world: World, entity: str, n: str, status: str) -> None:
    counts = world.target.entity_counts(world.path(entity))
    assert (counts["active"], counts.get("availability_status")) == (int(n), status), f"{entity!r} reports {counts}"
