"""The recording proxy (``sbconform record``): SDK traffic through it against ``sbconform
serve`` replays valid; against a deliberately broken broker, replay names the clause."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("proton")
pytest.importorskip("azure.servicebus")

from sbreference.namespace import Namespace  # noqa: E402
from sbconform.proxy.run import ProxyThread  # noqa: E402
from sbconform.trace.io import read_events  # noqa: E402
from sbconform.trace.replay import local_summary, locate, replay_local  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from proxy_support import (UPSTREAM_KEY, UPSTREAM_KEY_NAME, connection_string, python_flows, receive_n,  # noqa: E402
                           served)


def upstream_of(server) -> str:
    return connection_string(server.port, UPSTREAM_KEY_NAME, UPSTREAM_KEY)


def replay(path) -> dict:
    results = replay_local([str(path)])
    return {"results": results, "summary": local_summary(results, locate([str(path)]), 0.0)}


def events_of(path) -> list[dict]:
    return list(read_events(path))


@pytest.fixture
def recording(tmp_path):
    """(proxy connection string, trace dir, stop) against a healthy sbconform serve."""
    with served() as server:
        proxy = ProxyThread(upstream_of(server), tmp_path / "trace")
        port = proxy.start()
        yield connection_string(port), tmp_path / "trace", proxy
        proxy.stop()


def test_python_sdk_flows_through_the_proxy_replay_valid(recording):
    cs, out, proxy = recording
    seen = python_flows(cs)
    proxy.stop()
    # the SDK saw the broker as usual (the proxy re-signed its tokens with the upstream key)
    assert sorted(seen["first"]) == ["w1", "w2", "w3", "w4", "w5", "w6"]
    assert seen["abandoned_again"] == [("w3", 1)]  # the Python SDK shows the raw AMQP count
    assert seen["dead"] == [("w5", "bad")] and seen["rad"] == ["w7"]
    assert seen["session"] == ["s1", "s2"] and seen["state"] == b"state-1"
    events = events_of(out)
    ops = {(e["op"], e["phase"]) for e in events}
    for expected in [("send", "ok"), ("receive", "ok"), ("complete", "ok"), ("abandon", "ok"), ("defer", "ok"),
                     ("dead-letter", "ok"), ("renew-lock", "ok"), ("receive-deferred", "ok"), ("peek", "ok"),
                     ("accept-session", "ok"), ("set-session-state", "ok"), ("get-session-state", "ok"),
                     ("renew-session-lock", "ok"), ("close", "ok"), ("create-entity", "ok")]:
        assert expected in ops, expected
    sends = [e for e in events if e["op"] == "send" and e["phase"] == "ok"]
    assert {e["message_id"] for e in sends} == {f"w{i}" for i in range(1, 8)} | {"s1", "s2"}
    assert all(e["seq"] is not None for e in sends)
    batch = [e for e in events if e["op"] == "send" and e["phase"] == "invoke" and e["message_id"] in ("w5", "w6")]
    assert len({json.loads(e["args"])["batch"] for e in batch}) == 1
    again = [e for e in events if e["op"] == "receive" and e["phase"] == "ok" and e["message_id"] == "w3"]
    assert [e["delivery_count"] for e in again] == [1, 2]  # .NET convention in traces
    locks = [e["lock"] for e in events if e["op"] == "receive" and e["phase"] == "ok" and e["lock"]]
    assert len(locks) == len(set(locks))
    rad = [e for e in events if e["op"] == "receive" and e["phase"] == "ok" and e["message_id"] == "w7"]
    assert rad and rad[0]["lock"] is None and json.loads(rad[0]["args"] or "{}") == {}
    dl = [e for e in events if e["op"] == "dead-letter" and e["phase"] == "invoke"]
    assert json.loads(dl[0]["args"])["reason"] == "bad"
    result = replay(out)
    assert result["summary"]["violations"] == 0, result["results"]
    assert result["summary"]["unknown"] == 0, result["results"]
    assert {r["piece"] for r in result["results"] if r["status"] == "valid"} >= {"work", "sess"}


def test_the_cli_replays_the_recording(recording):
    cs, out, proxy = recording
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(cs) as client:
        with client.get_queue_sender("work") as s:
            s.send_messages(ServiceBusMessage("x", message_id="cli-1"))
        with client.get_queue_receiver("work") as r:
            for m in receive_n(r, 1):
                r.complete_message(m)
    proxy.stop()
    done = subprocess.run([sys.executable, "-m", "sbconform.cli", "replay", "--local", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 valid, 0 with a violation, 0 unknown" in done.stdout


def test_a_client_killed_holding_a_lock_is_a_dropped_connection_and_the_redelivery_replays_valid(recording):
    """SIGKILL closes the client's TCP connection without an AMQP close: its locks are lost
    (the broker hands the message to the next receiver at once), and the trace says so."""
    cs, out, proxy = recording
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with ServiceBusClient.from_connection_string(cs) as client:
        with client.get_queue_sender("work") as s:
            s.send_messages(ServiceBusMessage("x", message_id="orphan"))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from azure.servicebus import ServiceBusClient\n"
        f"c = ServiceBusClient.from_connection_string({cs!r})\n"
        "r = c.get_queue_receiver('work')\n"
        "m = r.receive_messages(max_message_count=1, max_wait_time=10)\n"
        "print([x.message_id for x in m], flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "['orphan']"
    finally:
        holder.kill()
        holder.wait(10)
    with ServiceBusClient.from_connection_string(cs) as client:
        with client.get_queue_receiver("work") as r:
            again = receive_n(r, 1)
            assert [(m.message_id, m.delivery_count) for m in again] == [("orphan", 1)]
            r.complete_message(again[0])
    proxy.stop()
    events = events_of(out)
    # the holder's connection is recorded as dropped. Under load an SDK connection of the
    # other clients was seen ending without an AMQP close too (two more drop events): it held
    # no lock, and the trace must say it faithfully, so only the holder's drop is required
    holder_client = next(e["client"] for e in events if e["op"] == "receive" and e["phase"] == "ok" and e.get("message_id") == "orphan")
    drops = [(e["phase"], e["entity"]) for e in events if e["op"] == "drop-connection" and e["client"] == holder_client]
    assert drops == [("invoke", "work"), ("ok", "work")]
    assert {e["entity"] for e in events if e["op"] == "drop-connection"} == {"work"}
    result = replay(out)
    assert result["summary"]["violations"] == 0 and result["summary"]["unknown"] == 0, result["results"]


def test_a_refused_attach_is_recorded_as_failed(recording):
    cs, out, proxy = recording
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import MessagingEntityNotFoundError

    with ServiceBusClient.from_connection_string(cs, retry_total=0) as client:
        with pytest.raises(MessagingEntityNotFoundError):
            with client.get_queue_sender("no-such-queue") as s:
                s.send_messages(ServiceBusMessage("x"))
    proxy.stop()
    attach = [(e["op"], e["phase"], e["entity"], e["error"]) for e in events_of(out) if e["op"] == "attach"]
    assert attach == [("attach", "invoke", "no-such-queue", None), ("attach", "fail", "no-such-queue", "entity-not-found")]
    assert proxy.proxy.stats.interpreter_errors == 0


def test_a_client_token_signed_with_a_key_the_proxy_does_not_hold_is_refused(recording):
    cs, out, proxy = recording
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusAuthorizationError

    port = int(cs.split("localhost:")[1].split(";")[0])
    bad = connection_string(port, "RootManageSharedAccessKey", "NOT-THE-KEY")
    with ServiceBusClient.from_connection_string(bad, retry_total=0) as client:
        with pytest.raises((ServiceBusAuthenticationError, ServiceBusAuthorizationError)):
            with client.get_queue_sender("work") as s:
                s.send_messages(ServiceBusMessage("x"))
    # the upstream key itself is not a key the proxy's clients may use either
    upstream_key = connection_string(port, UPSTREAM_KEY_NAME, UPSTREAM_KEY)
    with ServiceBusClient.from_connection_string(upstream_key, retry_total=0) as client:
        with pytest.raises((ServiceBusAuthenticationError, ServiceBusAuthorizationError)):
            with client.get_queue_sender("work") as s:
                s.send_messages(ServiceBusMessage("x"))
    assert proxy.proxy.rec.cbs.refused >= 2


# ------------------------------------------------------------------ broken brokers


class CompleteIgnored(Namespace):
    """Acknowledges complete but keeps the message: it comes back when the lock expires (SETTLE-COMP-001)."""

    def complete(self, conn, path, lock_token):
        self.renew_lock(conn, path, lock_token)


class LockLostAtOnce(Namespace):
    """Takes a peek-lock back the moment it is given: the message is handed to the next
    receiver while the first still holds its lock (SETTLE-LOCK-001)."""

    def receive(self, conn, path, max_count=1, mode="peek-lock", session_id=None, choose=None):
        found = super().receive(conn, path, max_count, mode, session_id, choose)
        for d in found:
            if d.lock_token is not None:
                self._receiving_store(path).release(self.clock.now, conn, d.lock_token)
        return found


def _broken_run(tmp_path, namespace_class, flow) -> dict:
    with served(namespace_class) as server:
        proxy = ProxyThread(upstream_of(server), tmp_path / "trace")
        port = proxy.start()
        try:
            flow(connection_string(port))
        finally:
            proxy.stop()
    return replay(tmp_path / "trace")


def test_a_broker_redelivering_a_completed_message_is_named_by_replay(tmp_path, request, monkeypatch, capsys):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    def flow(cs):
        with ServiceBusClient.from_connection_string(cs) as client:
            with client.get_queue_sender("short") as s:
                s.send_messages(ServiceBusMessage("x", message_id="done-once"))
            with client.get_queue_receiver("short") as r:
                first = receive_n(r, 1)
                r.complete_message(first[0])
            time.sleep(1.5)  # past the 1 s lock: the broken broker hands it out again
            with client.get_queue_receiver("short") as r:
                again = receive_n(r, 1, wait=5)
                assert [m.message_id for m in again] == ["done-once"]
                r.complete_message(again[0])

    result = _broken_run(tmp_path, CompleteIgnored, flow)
    bad = [r for r in result["results"] if r["status"] == "violation"]
    assert [(r["piece"], r["clause"], r["kind"], r["message_id"]) for r in bad] == [("short", "SETTLE-COMP-001", "delivered-after-complete", "done-once")]

    # the README's way to Spark: convert the recording to Parquet, replay it on Spark. `sbconform
    # replay` runs in this process, on the run's local Spark session (the ``spark`` fixture: one
    # JVM for the run); tests/test_cli_errors.py runs it in a process of its own, JVM and all
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    session = request.getfixturevalue("spark")
    convert = subprocess.run([sys.executable, "-m", "sbconform.cli", "convert", str(tmp_path / "trace"), str(tmp_path / "pq"), "--to", "parquet"],
                             capture_output=True, text=True)
    assert convert.returncode == 0, convert.stderr
    from sbconform.cli import main

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    capsys.readouterr()
    code = main(["replay", str(tmp_path / "pq"), "--master", "local[1]", "--out", str(tmp_path / "replay")])
    done = capsys.readouterr()
    assert code == 1, done.out + done.err[-3000:]
    assert "VIOLATION SETTLE-COMP-001" in done.out
    assert not session.sparkContext._jsc.sc().isStopped()  # a session the command did not start: left running


def test_a_broker_losing_a_lock_early_is_named_by_replay(tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    def flow(cs):
        with ServiceBusClient.from_connection_string(cs) as client:
            with client.get_queue_sender("work") as s:
                s.send_messages(ServiceBusMessage("x", message_id="locked"))
            with client.get_queue_receiver("work") as r1, client.get_queue_receiver("work") as r2:
                a = receive_n(r1, 1)
                b = receive_n(r2, 1)  # a correct broker has nothing for r2: the message is locked for 30 s
                assert [m.message_id for m in a + b] == ["locked", "locked"]

    result = _broken_run(tmp_path, LockLostAtOnce, flow)
    bad = [r for r in result["results"] if r["status"] == "violation"]
    assert [(r["piece"], r["clause"], r["message_id"]) for r in bad] == [("work", "SETTLE-LOCK-001", "locked")]


# ------------------------------------------------------------------ recording failures


class DiskFull:
    def write(self, event):
        raise OSError(28, "No space left on device")

    def close(self):
        pass


@pytest.mark.parametrize("policy", ["relay", "stop"])
def test_a_recording_failure_never_alters_traffic(tmp_path, policy):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    said: list[str] = []
    with served() as server:
        proxy = ProxyThread(upstream_of(server), tmp_path / "t", on_record_error=policy, say=said.append)
        cs = connection_string(proxy.start())
        sink = proxy.sink
        sink.write("admin", sink.op(), "wait", "invoke", args={"ms": 0})  # opens the file
        sink.writer = DiskFull()
        if policy == "relay":
            with ServiceBusClient.from_connection_string(cs, retry_total=0) as client:
                with client.get_queue_sender("work") as s:
                    s.send_messages(ServiceBusMessage("x", message_id="unrecorded"))
                with client.get_queue_receiver("work") as r:  # the broker got it: traffic went on, unrecorded
                    assert [m.message_id for m in receive_n(r, 1)] == ["unrecorded"]
        else:
            with pytest.raises(Exception):  # the proxy stops at the first event it cannot write
                with ServiceBusClient.from_connection_string(cs, retry_total=0) as client:
                    with client.get_queue_sender("work") as s:
                        for _ in range(50):
                            s.send_messages(ServiceBusMessage("x"))
                            time.sleep(0.05)
        if policy == "stop":
            proxy.thread.join(15)
            assert not proxy.thread.is_alive()
        proxy.stop()
    assert sink.failed and "No space left on device" in sink.failed
    assert sum("recording stopped" in line for line in said) == 1  # said once


# ------------------------------------------------------------------ the command


def test_record_command_stops_cleanly_on_sigterm_and_writes_held_sends(tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with served() as server:
        out = tmp_path / "trace"
        proc = subprocess.Popen([sys.executable, "-m", "sbconform.cli", "record", "--listen", "127.0.0.1:0",
                                 "--upstream", upstream_of(server), "--out", str(out), "--rotate", "1M"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()
            assert "listening on 127.0.0.1:" in first, first + proc.stderr.read()
            cs = proc.stdout.readline().strip()
            with ServiceBusClient.from_connection_string(cs) as client:
                with client.get_queue_sender("work") as s:
                    s.send_messages([ServiceBusMessage(f"m{i}", message_id=f"sig{i}") for i in range(8)])
                with client.get_queue_receiver("work") as r:
                    for m in receive_n(r, 6):
                        r.complete_message(m)
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr
    assert "stopped;" in stdout
    # --rotate is at least 1M (test_trace_leftovers): rotation is tested on the sink (test_proxy_units)
    assert len(sorted(out.glob("*.jsonl"))) == 1
    events = events_of(out)
    assert [e["pos"] for e in events] == list(range(len(events)))
    sends = {e["message_id"]: e["phase"] for e in events if e["op"] == "send" and e["phase"] != "invoke"}
    # six were received (their sends placed by sequence number), two were never seen again
    assert sorted(k for k, v in sends.items() if v == "ok") == sorted(f"sig{i}" for i in range(6))
    assert sorted(k for k, v in sends.items() if v == "info") == ["sig6", "sig7"]
    done = subprocess.run([sys.executable, "-m", "sbconform.cli", "replay", "--local", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_parquet_recording_replays(tmp_path):
    pytest.importorskip("pyarrow")
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    with served() as server:
        proxy = ProxyThread(upstream_of(server), tmp_path / "pq", fmt="parquet")
        cs = connection_string(proxy.start())
        with ServiceBusClient.from_connection_string(cs) as client:
            with client.get_queue_sender("work") as s:
                s.send_messages(ServiceBusMessage("x", message_id="pq-1"))
            with client.get_queue_receiver("work") as r:
                for m in receive_n(r, 1):
                    r.complete_message(m)
        proxy.stop()
    files = list((tmp_path / "pq").glob("*.parquet"))
    assert len(files) == 1
    result = replay(tmp_path / "pq")
    assert [r["status"] for r in result["results"]] == ["valid"]


@pytest.mark.parametrize("upstream, message", [
    ("Endpoint=localhost;SharedAccessKeyName=a;SharedAccessKey=b", "is not a URI"),
    ("SharedAccessKeyName=a;SharedAccessKey=b", "has no Endpoint"),
    ("Endpoint=sb://h:x;SharedAccessKeyName=a;SharedAccessKey=b", "port 'x' is not a number"),
    ("Endpoint=sb://h;SharedAccessKeyName=a", "needs SharedAccessKeyName and SharedAccessKey"),
])
def test_a_bad_upstream_connection_string_is_one_line_exit_2(tmp_path, upstream, message):
    done = subprocess.run([sys.executable, "-m", "sbconform.cli", "record", "--upstream", upstream, "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
