"""Issue 12: one delegating ``TargetWrapper`` under recording, metering and every mutant (each
overrides only what it observes or breaks, ``unwrap()`` finds the target under them), and the
modules split by concern stay under 500 lines with their public names importable from where
they were imported before."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from sbreference import Message
from sbconform.targets import TargetWrapper
from sbconform.targets.base import Target
from sbconform.targets.reference import ReferenceTarget

ROOT = Path(__file__).resolve().parents[1]

#: module -> names importable from it before the split (grep of the repository)
BEFORE = {
    "sbconform.paired": ["PairedNamespaceSender", "SendAvailabilityPairedNamespaceOptions", "from_sdk_message",
                         "set_entity_available", "Meter", "MeteredTarget", "Operation", "PairedClient", "PairedFactory",
                         "PingRecord", "SendRecord", "message_of", "operations_per_moved_message", "run_together", "unwrap",
                         "SYPHON_BATCH", "SYPHON_POLL", "SENDER_FIELDS", "sdk_retries_off", "without_sdk_retries"],
    "sbconform.trace.recorder": ["ADMIN", "RecordingTarget", "TestTrace", "TraceRecorder", "trace_file_name",
                                 "RecordingTransactionalClient", "DEFINITE_TRANSACTION_ERRORS", "message_args",
                                 "received_fields", "settled_fields"],
    "sbconform.targets.base": ["PEEK_LOCK", "RECEIVE_AND_DELETE", "Received", "Handle", "TransactionalClient", "Target",
                               "TargetWrapper", "unwrap"],
    "sbconform.trace.replay": ["check_batches", "exit_code", "local_summary", "locate", "replay_local", "run_local",
                               "summarize", "error_row", "result_schema", "validate_batch", "replay_spark",
                               "spark_session", "check_partition", "_file_checker", "_bound_checker", "_write_results"],
}

SPLIT = ["sbconform/paired/__init__.py", "sbconform/paired/metering.py", "sbconform/paired/factory.py",
         "sbconform/paired/application.py", "sbconform/trace/recorder.py", "sbconform/trace/recorded_clients.py",
         "sbconform/targets/base.py", "sbconform/targets/wrapper.py", "sbconform/trace/replay.py",
         "sbconform/trace/spark_replay.py", "sbconform/progress.py"]


@pytest.mark.parametrize("module", sorted(BEFORE))
def test_the_names_are_importable_where_they_were(module) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in BEFORE[module] if not hasattr(loaded, name)]
    assert not missing, f"{module} no longer offers {missing}"


def test_the_wrapper_is_one_class_wherever_it_is_imported_from() -> None:
    from sbconform.targets import base, wrapper

    assert base.TargetWrapper is wrapper.TargetWrapper is TargetWrapper and base.unwrap is wrapper.unwrap


@pytest.mark.parametrize("path", SPLIT)
def test_split_modules_stay_under_500_lines(path) -> None:
    lines = len((ROOT / path).read_text(encoding="utf-8").splitlines())
    assert lines < 500, f"{path}: {lines} lines"


def _wrappers() -> list[type]:
    import mutants

    from sbconform.paired import MeteredTarget
    from sbconform.trace.recorder import RecordingTarget

    return [RecordingTarget, MeteredTarget, *mutants.MUTANTS, *mutants.PAIRED_MUTANTS, *mutants.RULES_MUTANTS]


@pytest.mark.parametrize("cls", _wrappers(), ids=lambda c: c.__name__)
def test_recording_metering_and_every_mutant_are_delegating_wrappers(cls) -> None:
    assert issubclass(cls, TargetWrapper)
    # only what they observe or break is their own: no wrapper re-implements TargetWrapper's
    # plain delegation, nor keeps a copy of the wrapped target beside ``inner``
    own = {name for klass in cls.__mro__[: cls.__mro__.index(TargetWrapper)] for name in vars(klass)}
    interface = {name for name, value in vars(Target).items() if callable(value) and not name.startswith("_")}
    assert own & interface, f"{cls.__name__} overrides nothing of the Target interface"
    assert "unwrap" not in own and "__getattr__" not in own


def test_unwrap_goes_through_recording_metering_and_a_mutant() -> None:
    import mutants

    from sbconform.paired import Meter, MeteredTarget
    from sbconform.trace.recorder import RecordingTarget, TraceRecorder

    class Discard:
        def write(self, event) -> None:
            pass

    mutant = mutants.CompleteIgnored()
    stack = MeteredTarget(RecordingTarget(mutant, TraceRecorder(Discard(), "t")), "primary", Meter())
    bottom = stack.unwrap()
    assert isinstance(bottom, ReferenceTarget) and bottom is mutant.inner
    assert stack.inner.target is stack.inner.inner is mutant  # RecordingTarget.target: the same as inner
    for wrapper in (stack, stack.inner, mutant):  # no copy of the wrapped target beside ``inner``
        copies = [k for k, v in vars(wrapper).items() if v is wrapper.inner and k != "inner"]
        assert not copies, f"{type(wrapper).__name__} keeps the wrapped target as {copies}"
    # the stack behaves as the mutant it wraps: complete is ignored, the message comes back
    stack.open()
    queue = stack.create_queue("q")
    stack.send(stack.sender(queue), [Message(b"x", message_id="m")])
    receiver = stack.receiver(queue)
    first = stack.receive(receiver, 1)
    stack.complete(receiver, first[0])
    stack.wait(first[0].locked_until - stack.now() + 1)
    assert [m.message_id for m in stack.receive(receiver, 1)] == ["m"]
    assert [op.kind for op in stack.meter.operations] == ["send", "receive", "receive"]
