"""``check_event``'s one-pass check of the usual event agrees with the field-by-field check
on every event, well formed or not: it accepts exactly what that accepts, and whatever it
refuses is named by it."""

from __future__ import annotations

import json

from sbconform.trace import schema
from sbconform.trace.schema import FIELD_NAMES, TraceFormatError, check_event

#: one value of every kind a JSON line may hold, and the texts an args or result may be
VALUES = [None, ..., True, 0, 7, 2**40, 1.5, "", "x", [1], {"a": 1}, '{"max_count":1}', "{}", "[1]", "{bad", '"s"', "null"]
def usual(**changes):
    event = {"trace": "t", "pos": 3, "time": 10, "client": "c1", "conn": "c1.1", "op_id": 2, "op": "receive",
             "phase": "ok", "entity": "q", "message_id": "m1", "seq": 1, "lock": "7", "delivery_count": 1,
             "args": '{"max_count":1,"mode":"peek-lock"}'}
    event.update(changes)
    return {k: v for k, v in event.items() if v is not ...}


def outcome(check, event):
    try:
        return check(dict(event), "here")
    except TraceFormatError as error:
        return ("refused", str(error))


def test_one_pass_and_field_by_field_agree() -> None:
    cases = 0
    for name in [*FIELD_NAMES, "extra"]:
        for value in VALUES:
            for op in ["receive", "create-entity", "nope", None]:
                for phase in ["ok", "invoke", "done", None]:
                    schema._OBJECTS.clear()  # nothing learnt from an earlier case but the usual event's texts
                    check_event(usual(result='{"a": {}}'), "primer")
                    event = usual(**{"op": op, "phase": phase, name: value})
                    first = outcome(schema._check_event_field_by_field, event)
                    assert outcome(check_event, event) == first, event
                    assert outcome(check_event, event) == first, event  # again, with what the first call learnt
                    cases += 1
    assert cases > 1000


def test_a_text_seen_valid_does_not_pass_another_and_the_memory_is_bounded() -> None:
    schema._OBJECTS.clear()
    assert check_event(usual(args='{"a":1}'), "x")["args"] == '{"a":1}'
    for bad in ('{"a":1', '{"a":1}}', "[]", '{"a":1} '.strip() + "x"):
        try:
            check_event(usual(args=bad), "line 9")
        except TraceFormatError as error:
            assert "line 9: field 'args' is not a JSON object" in str(error)
        else:
            raise AssertionError(f"{bad!r} was accepted")
    for i in range(schema._OBJECTS_MAX * 2):
        check_event(usual(args=json.dumps({"i": i})), "x")
    assert len(schema._OBJECTS) <= schema._OBJECTS_MAX
    check_event(usual(result=json.dumps({"big": "x" * 10_000})), "x")
    assert all(len(t) <= schema._OBJECT_TEXT_MAX for t in schema._OBJECTS)
