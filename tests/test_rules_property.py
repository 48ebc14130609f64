"""Properties of topic fan-out with rules, over random rule sets and messages (Hypothesis).

For any subscriptions, rules and messages (on plain and partitioned topics):
- each subscription stores, for each message, one plain copy if any rule without action selects
  it plus one copy per rule with an action that selects it, and nothing else (RULES-RULE-002/003,
  RULES-ACT-001), counted here from the filters alone, without the model's routing code;
- each copy made by an action carries that rule's name and the action's change, and the plain
  copy is the message as sent (RULES-ACT-002);
- once every copy is received and completed, the topic holds nothing and its size is 0 (the
  accounting of extra copies balances).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from sbreference import CorrelationFilter, FalseFilter, Message, Namespace, Rule, SqlFilter, SqlRuleAction, TrueFilter
from sbreference.rules import RULE_NAME_PROPERTY

COLORS = ["red", "blue", "green"]

filters = st.one_of(
    st.just(TrueFilter()),
    st.just(FalseFilter()),
    st.sampled_from(COLORS).map(lambda c: CorrelationFilter(properties={"color": c})),
    st.sampled_from(COLORS).map(lambda c: CorrelationFilter(subject=c)),
    st.integers(0, 4).map(lambda n: SqlFilter(f"qty > {n}")),
    st.sampled_from(COLORS).map(lambda c: SqlFilter(f"color = '{c}' OR sys.Label = '{c}'")),
)


def selects(f, m: Message) -> bool:
    """The oracle: what each drawn filter selects, written out by hand."""
    props = m.application_properties
    if isinstance(f, TrueFilter):
        return True
    if isinstance(f, FalseFilter):
        return False
    if isinstance(f, CorrelationFilter):
        if f.subject is not None:
            return m.subject == f.subject
        return props.get("color") == f.properties["color"]
    text = f.expression
    if text.startswith("qty > "):
        return "qty" in props and props["qty"] > int(text.split()[-1])
    color = text.split("'")[1]
    return props.get("color") == color or m.subject == color


rule_specs = st.lists(st.tuples(filters, st.booleans()), max_size=4)
messages = st.lists(
    st.builds(
        lambda color, qty, label: (color, qty, label),
        st.one_of(st.none(), st.sampled_from(COLORS)),
        st.one_of(st.none(), st.integers(0, 5)),
        st.one_of(st.none(), st.sampled_from(COLORS)),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(rule_specs, min_size=1, max_size=3), messages, st.booleans())
def test_fan_out_stores_exactly_the_selected_copies(subscriptions, sent, partitioned):
    ns = Namespace()
    ns.create_topic("t", enable_partitioning=partitioned)
    paths = []
    for i, specs in enumerate(subscriptions):
        ns.create_subscription("t", f"s{i}", max_delivery_count=10)
        path = f"t/Subscriptions/s{i}"
        ns.remove_rule(path, "$Default")
        for j, (f, with_action) in enumerate(specs):
            ns.add_rule(path, Rule(f"r{j}", f, SqlRuleAction(f"SET by = 'r{j}'") if with_action else None))
        paths.append((path, specs))
    conn = ns.connect()
    built = []
    for k, (color, qty, label) in enumerate(sent):
        props = {key: v for key, v in (("color", color), ("qty", qty)) if v is not None}
        m = Message(b"x", message_id=f"m{k}", subject=label, application_properties=props, partition_key="pk")
        ns.send(conn, "t", m)
        built.append(m)
    for path, specs in paths:
        expected: Counter = Counter()
        for m in built:
            if any(selects(f, m) and not act for f, act in specs):
                expected[(m.message_id, None)] += 1
            for j, (f, act) in enumerate(specs):
                if act and selects(f, m):
                    expected[(m.message_id, f"r{j}")] += 1
        got = ns.receive(conn, path, 1000)
        seen = Counter((d.message_id, d.message.application_properties.get(RULE_NAME_PROPERTY)) for d in got)
        assert seen == expected, (path, specs)
        for d in got:
            rule = d.message.application_properties.get(RULE_NAME_PROPERTY)
            original = built[int(d.message_id[1:])]
            if rule is None:
                assert d.message == original
            else:
                assert d.message.application_properties == {**original.application_properties, "by": rule, RULE_NAME_PROPERTY: rule}
            ns.complete(conn, path, d.lock_token)
        assert len({d.sequence_number for d in got}) == len(got)  # copies in one subscription never share a number
    info = ns.runtime_info("t")  # a topic reports its size, not message counts (SETTLE-ENT-004): its subscriptions do
    assert info["size_bytes"] == 0 and all(ns.runtime_info(p)["active"] == 0 for p, _ in paths), info
