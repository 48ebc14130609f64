"""Steps of features/transactions/: a transactional client (one connection) receives, declares
transactions, sends and settles in them, and discharges them. Checks use the common steps (peek,
receivers, "the operation fails with ...")."""

from __future__ import annotations

import re
from typing import Any

from sbconform.targets.base import TransactionalClient

from .common import IDS, step
from .world import World, message_attributes, quoted


def client(world: World, name: str) -> TransactionalClient:
    clients: dict[str, TransactionalClient] = world.__dict__.setdefault("txn_clients", {})
    if name not in clients:
        clients[name] = world.target.transaction_client()
        world.__dict__.setdefault("closers", []).append(clients[name].close)
    return clients[name]


def transaction(world: World, name: str) -> tuple[TransactionalClient, Any]:
    txns = world.__dict__.setdefault("txns", {})
    if name not in txns:
        raise AssertionError(f"the scenario never declared transaction {name!r}")
    return txns[name]


@step(r'client "(?P<c>[^"]+)" declares transaction "(?P<t>[^"]+)"')
def declare(world: World, c: str, t: str) -> None:
    the_client = client(world, c)
    txn = world.attempt(the_client.declare)
    if world.error_checked:
        world.__dict__.setdefault("txns", {})[t] = (the_client, txn)


@step(r'client "(?P<c>[^"]+)" receives (?P<n>\d+) messages? from "(?P<entity>[^"]+)"')
def client_receives(world: World, c: str, n: str, entity: str) -> None:
    got = world.attempt(client(world, c).receive, world.path(entity), int(n))
    world.__dict__.setdefault("txn_paths", {})[c] = world.path(entity)
    if got is not None:
        world.record(f"client:{c}", got)
        assert len(got) == int(n), f"client {c!r} received {[m.message_id for m in got]}, expected {n} messages"


@step(
    r'transaction "(?P<t>[^"]+)" sends (?P<ids>' + IDS + r')(?: with (?P<attrs>(?:(?! to ").)+))? to "(?P<entity>[^"]+)"'
    r'(?: via "(?P<via>[^"]+)")?$'
)
def transactional_send(world: World, t: str, ids: str, attrs: str | None, entity: str, via: str | None) -> None:
    the_client, txn = transaction(world, t)
    messages = [world.build(mid, message_attributes(attrs)) for mid in quoted(ids)]
    world.attempt(the_client.send, txn, world.path(entity), messages, world.path(via) if via else None)


@step(r'transaction "(?P<t>[^"]+)" sends messages "(?P<first>[^"]+)" to "(?P<last>[^"]+)" to "(?P<entity>[^"]+)"')
def transactional_send_range(world: World, t: str, first: str, last: str, entity: str) -> None:
    the_client, txn = transaction(world, t)
    prefix, a = re.fullmatch(r"(\D*)(\d+)", first).groups()
    b = re.fullmatch(r"\D*(\d+)", last).group(1)
    messages = [world.build(f"{prefix}{i}", {}) for i in range(int(a), int(b) + 1)]
    world.attempt(the_client.send, txn, world.path(entity), messages)


@step(r'client "(?P<c>[^"]+)" sends "(?P<mid>[^"]+)" to "(?P<entity>[^"]+)" in transaction "(?P<t>[^"]+)"')
def send_in_foreign_transaction(world: World, c: str, mid: str, entity: str, t: str) -> None:
    _, txn = transaction(world, t)
    world.attempt(client(world, c).send, txn, world.path(entity), [world.build(mid, {})])


@step(r'transaction "(?P<t>[^"]+)" (?P<op>completes|abandons|defers|dead-letters) "(?P<mid>[^"]+)"(?: on "(?P<entity>[^"]+)")?')
def transactional_settle(world: World, t: str, op: str, mid: str, entity: str | None) -> None:
    the_client, txn = transaction(world, t)
    name = next(c for c, cl in world.__dict__["txn_clients"].items() if cl is the_client)
    message = world.message(f"client:{name}", mid)
    outcome = {"completes": "complete", "abandons": "abandon", "defers": "defer", "dead-letters": "dead_letter"}[op]
    path = world.path(entity) if entity else message_path(world, name)
    extra = ("sbconform", "in a transaction") if outcome == "dead_letter" else (None, None)
    world.attempt(the_client.settle, txn, path, message, outcome, *extra)


def message_path(world: World, client_name: str) -> str:
    return world.__dict__["txn_paths"][client_name]


@step(r'transaction "(?P<t>[^"]+)" is (?P<how>committed|rolled back)')
def discharge(world: World, t: str, how: str) -> None:
    the_client, txn = transaction(world, t)
    world.attempt(the_client.discharge, txn, how == "committed")


@step(r'the connection of client "(?P<c>[^"]+)" drops')
def client_drops(world: World, c: str) -> None:
    world.attempt(client(world, c).drop)


@step(r'peeking "(?P<entity>[^"]+)" shows (?P<n>\d+) messages')
def peek_count(world: World, entity: str, n: str) -> None:
    found = world.peek_all(entity)
    assert len(found) == int(n), f"peek shows {len(found)} messages, expected {n}"
