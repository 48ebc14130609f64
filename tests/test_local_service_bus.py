"""sbconform.local.LocalServiceBus and the plugin's local_service_bus fixture: `sbconform serve`
for an application's own tests (README "A local Service Bus for your tests")."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("azure.servicebus")
pytest.importorskip("proton")

from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusError  # noqa: E402

from sbconform.local import LocalServiceBus, LocalServiceBusError  # noqa: E402

pytest_plugins = ["pytester"]
CONFIG = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
    {"Name": "orders", "Properties": {"LockDuration": "PT30S"}}]}]}}


def client(bus: LocalServiceBus) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(bus.connection_string, retry_total=0)


def test_an_application_uses_it_through_the_sdk_and_the_admin_client_and_nothing_is_left() -> None:
    with LocalServiceBus(config=CONFIG) as bus:
        with client(bus) as c:
            with c.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("hello", message_id="m1"))
            with c.get_queue_receiver("orders") as receiver:
                [got] = receiver.receive_messages(1, max_wait_time=5)
                assert (str(got), got.message_id) == ("hello", "m1")
                receiver.complete_message(got)
        admin = bus.admin_client()
        assert [q.name for q in admin.list_queues()] == ["orders"]
        assert admin.get_queue("orders").lock_duration == dt.timedelta(seconds=30)
        process, folder = bus._process, bus._folder
        assert folder is not None and os.path.exists(folder)
    assert process.poll() is not None  # stopped
    assert not os.path.exists(folder)  # the config written for the dict is gone
    bus.stop()  # idempotent


def test_advance_expires_locks_and_enqueues_scheduled_messages_without_waiting() -> None:
    with LocalServiceBus(config=CONFIG) as bus, client(bus) as c:
        with c.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("now"))
            sender.schedule_messages(ServiceBusMessage("in an hour"), dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        with c.get_queue_receiver("orders") as receiver:
            [first] = receiver.receive_messages(1, max_wait_time=5)
            bus.advance(31)  # past the 30 s lock
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(first)
            [again] = receiver.receive_messages(1, max_wait_time=5)
            assert (str(again), again.delivery_count) == ("now", 1)  # one failed delivery before
            receiver.complete_message(again)
            assert receiver.receive_messages(1, max_wait_time=1) == []  # the scheduled one is not due
            bus.advance(dt.timedelta(hours=1))
            [later] = receiver.receive_messages(1, max_wait_time=5)
            assert str(later) == "in an hour"
            receiver.complete_message(later)


def test_an_entity_taken_down_fails_every_operation_until_brought_back_with_what_it_held() -> None:
    with LocalServiceBus(config=CONFIG) as bus, client(bus) as c:
        with c.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("kept"))
        bus.take_down("orders")
        with pytest.raises(ServiceBusError, match="entity-disabled"):
            with c.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("refused"))
        bus.bring_back("orders")
        with c.get_queue_receiver("orders") as receiver:
            [got] = receiver.receive_messages(1, max_wait_time=5)
            assert str(got) == "kept"
            receiver.complete_message(got)
        with pytest.raises(LocalServiceBusError, match="^entity-availability: .*'sbemulatorns/nope' could not be found"):
            bus.take_down("nope")


def test_mistakes_are_one_line_naming_what_and_where() -> None:
    bad = {"UserConfig": {"Namespaces": [{"Name": "x", "Queues": [{"Name": "q", "Properties": {"LockDuration": "one minute"}}]}]}}
    with pytest.raises(LocalServiceBusError) as raised:
        LocalServiceBus(config=bad).start()
    assert str(raised.value) == ("config (the dict given): UserConfig.Namespaces[0].Queues[0].Properties.LockDuration: "
                                 "'one minute' is not an ISO 8601 duration like 'PT1M' or 'P1DT2H'")
    with pytest.raises(LocalServiceBusError, match=r"^/nowhere/Config\.json: cannot read the config file: No such file"):
        LocalServiceBus(config="/nowhere/Config.json").start()
    with pytest.raises(TypeError, match="config: a Config.json path or a dict"):
        LocalServiceBus(config=["not", "a", "config"])  # type: ignore[arg-type]
    idle = LocalServiceBus()
    with pytest.raises(LocalServiceBusError, match="not started"):
        idle.advance(1)
    with pytest.raises(LocalServiceBusError, match="not started"):
        idle.admin_connection_string


def test_a_server_stopped_under_a_test_is_named_and_bad_arguments_are_refused() -> None:
    bus = LocalServiceBus().start()
    try:
        for wrong in (-1, float("nan"), float("inf"), "10", True):
            with pytest.raises(ValueError, match="advance: a number of seconds"):
                bus.advance(wrong)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="an entity path"):
            bus.take_down("/")
        with pytest.raises(LocalServiceBusError, match="already started"):
            bus.start()
        bus._process.kill()
        bus._process.wait()
        with pytest.raises(LocalServiceBusError, match=rf"^sbconform serve \(pid {bus._process.pid}\) stopped, exit code -9"):
            bus.advance(1)
    finally:
        bus.stop()


def test_the_pytest_fixture_serves_a_test_its_config_and_names_a_bad_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=textwrap.dedent('''
        import pytest
        from azure.servicebus import ServiceBusClient, ServiceBusMessage

        @pytest.mark.local_service_bus(config={"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "jobs"}]}]}})
        def test_uses_its_queue(local_service_bus):
            with ServiceBusClient.from_connection_string(local_service_bus.connection_string) as c:
                with c.get_queue_sender("jobs") as s:
                    s.send_messages(ServiceBusMessage("x"))
            assert local_service_bus.admin_client().get_queue_runtime_properties("jobs").active_message_count == 1

        def test_default_entities(local_service_bus):
            assert sorted(q.name for q in local_service_bus.admin_client().list_queues()) == ["queue.1"]

        @pytest.mark.local_service_bus(config="missing.json")
        def test_bad_config(local_service_bus):
            pass
    '''))
    run = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    out = run.stdout.str() + run.stderr.str()
    assert re.search(r"\b2 passed\b.*\b1 error\b", out), out
    assert "local_service_bus: missing.json: cannot read the config file: No such file or directory" in out, out
    assert "Traceback" not in out and "LocalServiceBusError" not in out, out


def test_the_readme_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    from test_cli_readme import blocks, section

    [code] = [b for b in blocks("python", section("### A local Service Bus for your application's tests")) if "LocalServiceBus(" in b]
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out == "0\n"


def test_a_server_outlives_no_test_process_killed_outright(tmp_path: Path) -> None:
    """A test process killed with SIGKILL (a CI runner's timeout) runs no cleanup: its server
    must stop by itself rather than hold its ports and memory for ever."""
    script = tmp_path / "app.py"
    script.write_text("from sbconform.local import LocalServiceBus\nimport time\n"
                      "bus = LocalServiceBus().start()\nprint(bus._process.pid, flush=True)\ntime.sleep(60)\n")
    app = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        server = int(app.stdout.readline())
    finally:
        app.kill()
        app.wait()
        app.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(server):
        time.sleep(0.1)
    alive = _alive(server)
    if alive:
        os.kill(server, signal.SIGKILL)
    assert not alive, "sbconform serve kept running after the process that started it was killed"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has stopped
    except FileNotFoundError:
        return False


def test_the_ports_an_application_names_are_used_and_a_taken_one_is_one_line() -> None:
    import socket

    def free() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    amqp, http = free(), free()
    with LocalServiceBus(port=amqp, http_port=http) as bus:
        assert (bus.port, bus.http_port) == (amqp, http)
        assert f"sb://localhost:{amqp};" in bus.connection_string and f"sb://localhost:{http};" in bus.admin_connection_string
        with pytest.raises(LocalServiceBusError, match=rf"^cannot listen on 127\.0\.0\.1:{amqp}: "):
            LocalServiceBus(port=amqp).start()
    for wrong in (-1, 65536, "5672", True):
        with pytest.raises(ValueError, match="port: a port number"):
            LocalServiceBus(port=wrong)  # type: ignore[arg-type]


def test_a_server_that_crashes_while_starting_is_named_by_its_error_not_by_the_traceback_header(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash prints 'Traceback (most recent call last):' first; the error named must be the
    traceback's last line (the exception), read after the server has exited, not that header."""
    (tmp_path / "sitecustomize.py").write_text(
        "import socket\n"
        "def _refuse(*args, **kwargs):\n"
        "    raise RuntimeError('injected crash at listen')\n"
        "socket.socket.listen = _refuse\n", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(LocalServiceBusError) as refused:
        LocalServiceBus().start()
    message = str(refused.value)
    assert "injected crash at listen" in message and "Traceback" not in message, message
    assert "\n" not in message
