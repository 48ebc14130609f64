"""Steps for subscription rules (features/rules). Rules are added, removed and listed through
the Target (``add_rule`` / ``remove_rule`` / ``list_rules``); what a subscription stored is
seen by peeking, as any client sees it.

SQL text is written between backquotes (`color = 'red'`), so that it may hold both kinds of
quotes. Filters are phrased as "the true filter", "the false filter", "SQL filter `...`" or
"correlation filter <properties>", e.g. ``correlation filter label "red" and property "n" = 5``.
This module also teaches the message phrases the correlation and SQL scenarios need
(``correlation id "x"``, ``label "x"``, ``to``, ``reply to``, ``reply to session``,
``property "k" = <value>`` and ``properties "a" = 1 and "b" = "x"``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pytest_bdd import parsers
from pytest_bdd import step as bdd_step

from sbreference import CorrelationFilter, FalseFilter, Rule, SqlFilter, SqlRuleAction, TrueFilter
from sbreference.rules import DEFAULT_RULE_NAME, RULE_NAME_PROPERTY

from . import world as world_module
from .world import World, parse_phrases, quoted

IDS = r'"[^"]+"(?:, "[^"]+")*'
SUB = r'"(?P<sub>[^"]+)"'
FILTER = r"(?P<filter>the true filter|the false filter|SQL filter `[^`]*`|correlation filter .+?)"
ACTION = r"(?: and action `(?P<action>[^`]*)`)?"


def step(pattern: str):
    return bdd_step(parsers.re(pattern))


# ------------------------------------------------------------------ phrases

VALUE = r'(?:"[^"]*"|-?\d+(?:\.\d+)?|true|false|null)'
PAIR = re.compile(r'"([^"]+)" = (' + VALUE + r")")


def literal(text: str) -> Any:
    """'"red"' -> 'red', '5' -> 5, '2.5' -> 2.5, 'true' -> True, 'null' -> None."""
    return json.loads(text)


def pairs(text: str) -> dict[str, Any]:
    """'"a" = 1 and "b" = "x"' -> {'a': 1, 'b': 'x'}."""
    found = {m[1]: literal(m[2]) for m in PAIR.finditer(text)}
    rest = PAIR.sub("", text).replace(" and ", "").strip()
    if not found or rest:
        raise ValueError(f"cannot read properties from {text!r}")
    return found


_SYSTEM = {
    "correlation id": "correlation_id",
    "message id": "message_id",
    "label": "subject",
    "subject": "subject",
    "to": "to",
    "reply to": "reply_to",
    "reply to session": "reply_to_session_id",
    "reply to session id": "reply_to_session_id",
    "content type": "content_type",
    "session id": "session_id",
}

_MESSAGE_EXTRA = [
    (re.compile(r'(correlation id|label|to|reply to|reply to session) "([^"]*)"'), lambda m: {_SYSTEM[m[1]]: m[2]}),
    (re.compile(r"propert(?:y|ies) (.+)"), lambda m: {"application_properties": pairs(m[1])}),
]
for _phrase in _MESSAGE_EXTRA:
    if _phrase[0].pattern not in [p.pattern for p, _ in world_module._MESSAGE_PHRASES]:
        world_module._MESSAGE_PHRASES.append(_phrase)

_CORRELATION = [
    (re.compile(r'(correlation id|message id|label|to|reply to|reply to session id|content type|session id) "([^"]*)"'),
     lambda m: {_SYSTEM[m[1]]: m[2]}),
    (re.compile(r"propert(?:y|ies) (.+)"), lambda m: {"properties": pairs(m[1])}),
]


def build_filter(text: str):
    if text == "the true filter":
        return TrueFilter()
    if text == "the false filter":
        return FalseFilter()
    if text.startswith("SQL filter `"):
        return SqlFilter(text[len("SQL filter `"):-1])
    if text.startswith("correlation filter "):
        return CorrelationFilter(**parse_phrases(text[len("correlation filter "):], _CORRELATION, "correlation filter property"))
    raise ValueError(f"unknown filter {text!r}")


def build_rule(name: str, filter_text: str, action: str | None) -> Rule:
    """A rule from its phrase; SQL is parsed here, so an invalid one raises the model's error
    (the target under test must refuse the same text: RULES-SQL-014)."""
    return Rule(name, build_filter(filter_text), SqlRuleAction(action) if action is not None else None)


def unchecked_rule(name: str, filter_text: str, action: str | None) -> Rule:
    """The rule as a client sends it: SQL not checked here, so the target's own answer to
    invalid text is what the scenario checks (RULES-SQL-014)."""
    if filter_text.startswith("SQL filter `"):
        f = SqlFilter.unchecked(filter_text[len("SQL filter `"):-1])
    else:
        f = build_filter(filter_text)
    return Rule(name, f, SqlRuleAction.unchecked(action) if action is not None else None)


# ------------------------------------------------------------------ topics


@step(r'a topic "(?P<name>[^"]+)" with subscription "(?P<sub>[^"]+)" that does not dead-letter on filter evaluation exceptions')
def topic_without_filter_dead_lettering(world: World, name: str, sub: str) -> None:
    path = world.paths[name] = world.target.create_topic(name)
    world.target.create_subscription(path, sub, dead_lettering_on_filter_evaluation_exceptions=False)


# ------------------------------------------------------------------ rules


@step(SUB + r" has only the rule \"(?P<name>[^\"]+)\" with " + FILTER + ACTION + "$")
def only_rule(world: World, sub: str, name: str, filter: str, action: str | None) -> None:
    path = world.path(sub)
    world.require_no_pending_error()
    for rule in world.target.list_rules(path):
        world.target.remove_rule(path, rule.name)
    world.target.add_rule(path, build_rule(name, filter, action))


@step(r'rule "(?P<name>[^"]+)" with ' + FILTER + ACTION + r" is added to " + SUB)
def add_rule(world: World, name: str, filter: str, action: str | None, sub: str) -> None:
    world.attempt(world.target.add_rule, world.path(sub), unchecked_rule(name, filter, action))


@step(r'rule "(?P<name>[^"]+)" with a SQL filter of (?P<n>\d+) characters is added to ' + SUB)
def add_long_rule(world: World, name: str, n: str, sub: str) -> None:
    text = "a = '" + "x" * (int(n) - 6) + "'"
    assert len(text) == int(n)
    world.attempt(world.target.add_rule, world.path(sub), unchecked_rule(name, f"SQL filter `{text}`", None))


@step(r'rule "(?P<name>[^"]+)" is removed from ' + SUB)
def remove_rule(world: World, name: str, sub: str) -> None:
    world.attempt(world.target.remove_rule, world.path(sub), name)


@step(r"the rules of " + SUB + r" are (?P<ids>" + IDS + r"|none)")
def rules_are(world: World, sub: str, ids: str) -> None:
    world.require_no_pending_error()
    names = [r.name for r in world.target.list_rules(world.path(sub))]
    expected = [] if ids == "none" else quoted(ids)
    assert names == expected, f"rules of {sub!r}: {names}, expected {expected}"


@step(r'the rule "(?P<name>[^"]+)" of ' + SUB + r" has " + FILTER + ACTION + "$")
def rule_has(world: World, name: str, sub: str, filter: str, action: str | None) -> None:
    world.require_no_pending_error()
    rules = {r.name: r for r in world.target.list_rules(world.path(sub))}
    assert name in rules, f"no rule {name!r} in {sub!r}: {sorted(rules)}"
    expected = build_rule(name, filter, action)
    got = rules[name]
    assert got.filter == expected.filter, f"rule {name!r} has filter {got.filter!r}, expected {expected.filter!r}"
    assert got.action == expected.action, f"rule {name!r} has action {got.action!r}, expected {expected.action!r}"


@step(r"the error says where: position (?P<n>\d+)")
def error_position(world: World, n: str) -> None:
    error = world.error
    assert error is not None, "no operation failed"
    assert re.search(rf"\bposition {n}\b", error.text), f"the error does not say position {n}: {error.text!r}"


# ------------------------------------------------------------------ copies


@step(r'peeking "(?P<entity>[^"]+)" shows (?P<n>\d+) copies of "(?P<mid>[^"]+)"')
def copies_of(world: World, entity: str, n: str, mid: str) -> None:
    found = [m for m in world.peek_all(entity) if m.message_id == mid]
    assert len(found) == int(n), f"{len(found)} copies of {mid!r} in {entity!r}: {[dict(m.application_properties) for m in found]}"


_CHECKS = [
    (re.compile(r'property "([^"]+)" = (' + VALUE + r")"), "equals"),
    (re.compile(r'no property "([^"]+)"'), "absent"),
    (re.compile(r'label "([^"]*)"'), "label"),
]


@step(
    r'the copy of "(?P<mid>[^"]+)" in "(?P<entity>[^"]+)" (?:made by rule "(?P<rule>[^"]+)"|without a rule name) has (?P<checks>.+)'
)
def copy_has(world: World, mid: str, entity: str, rule: str | None, checks: str) -> None:
    copies = [m for m in world.peek_all(entity) if m.message_id == mid]
    chosen = [m for m in copies if m.application_properties.get(RULE_NAME_PROPERTY) == rule]
    assert len(chosen) == 1, (
        f"{len(chosen)} copies of {mid!r} in {entity!r} with rule name {rule!r}; "
        f"rule names seen: {[m.application_properties.get(RULE_NAME_PROPERTY) for m in copies]}"
    )
    check_properties(chosen[0], checks)


def check_properties(copy: Any, checks: str) -> None:
    """'property "a" = 1 and no property "b" and label "x"' checked on a received or peeked message."""
    props = dict(copy.application_properties)
    for part in re.split(r",\s*|\s+and\s+(?=[a-z])", checks.strip()):
        for pattern, kind in _CHECKS:
            m = pattern.fullmatch(part.strip())
            if m is None:
                continue
            if kind == "equals":
                expected = literal(m[2])
                assert m[1] in props, f"the copy has no property {m[1]!r}: {props}"
                value = props[m[1]]
                assert value == expected and type(value) is type(expected), f"property {m[1]!r} is {value!r}, expected {expected!r}"
            elif kind == "absent":
                assert m[1] not in props, f"the copy has property {m[1]!r} = {props[m[1]]!r}"
            else:
                assert copy.subject == m[1], f"the copy's label is {copy.subject!r}, expected {m[1]!r}"
            break
        else:
            raise ValueError(f"unknown check {part!r}")


@step(r'property "(?P<name>[^"]+)" of the copies of (?P<mids>"[^"]+"(?: and "[^"]+")*) in (?P<entities>"[^"]+"(?: and "[^"]+")*) '
      r'holds (?P<n>\d+) different GUIDs')
def copies_hold_guids(world: World, name: str, mids: str, entities: str, n: str) -> None:
    """RULES-SQL-018: each value a GUID (an AMQP uuid through a client; the model's Guid), none repeated."""
    import uuid

    wanted = set(quoted(mids))
    values = [m.application_properties.get(name) for e in quoted(entities) for m in world.peek_all(e) if m.message_id in wanted]
    assert len(values) == int(n), f"{len(values)} copies of {sorted(wanted)} in {entities}, expected {n}: {values}"
    for value in values:
        assert isinstance(value, uuid.UUID) or (type(value).__name__ == "Guid" and uuid.UUID(value)), \
            f"property {name!r} is {value!r} ({type(value).__name__}), not a GUID"
    assert len({str(v) for v in values}) == len(values), f"property {name!r} repeats a GUID: {values}"


@step(r'the dead-lettered "(?P<mid>[^"]+)" in "(?P<entity>[^"]+)" has a dead-letter reason and description')
def dead_letter_reason(world: World, mid: str, entity: str) -> None:
    found = [m for m in world.peek_all(entity) if m.message_id == mid]
    assert found, f"{mid!r} is not in {entity!r}"
    assert found[0].dead_letter_reason, f"no dead-letter reason on {mid!r}"
    assert found[0].dead_letter_description, f"no dead-letter description on {mid!r}"


__all__ = ["DEFAULT_RULE_NAME"]
