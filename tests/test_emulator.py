"""Microsoft's emulator as a testcontainers module (sbconform.emulator), tested with stand-ins
(sbconform.standin): the real images cannot be pulled here. What is graded is the wiring: the
network and alias, the environment, the config mount, the ports, the order of readiness, the
connection strings, and that every failure removes what was started and says why in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("testcontainers", reason="the containers extra (testcontainers) is not installed")
pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")

from sbconform.emulator import EmulatorError, ServiceBusEmulatorContainer, standin_config, standin_images  # noqa: E402


@pytest.fixture(scope="module")
def images():
    from sbconform.containers import EngineUnavailable

    try:
        return standin_images(log=lambda *_: None)
    except EngineUnavailable as error:
        pytest.skip(f"no container engine: {error}")


_IMAGES: tuple[str, ...] = ()
_BEFORE: set[str] = set()


def _standin_containers() -> set[str]:
    """Containers of this checkout's stand-in images (the tag carries a digest of the sources, so
    another checkout's runs, on the same engine, use other images)."""
    from sbconform.containers import engine

    out = engine().run("ps", "-a", "--format", "{{.Image}} {{.Names}}", capture_output=True, text=True).stdout
    return {line for line in out.splitlines() if line.split(" ", 1)[0] in _IMAGES}


@pytest.fixture(autouse=True)
def _snapshot(request):
    """The stand-in containers that existed before the test (another run's), which it must not count."""
    global _BEFORE, _IMAGES
    if "images" in request.fixturenames:
        _IMAGES = tuple(request.getfixturevalue("images"))
        _BEFORE = _standin_containers()
    yield


def containers_left() -> list[str]:
    """Stand-in containers started since the test began and still there."""
    return sorted(_standin_containers() - _BEFORE)


def test_a_user_starts_the_emulator_sends_and_receives(images, tmp_path: Path) -> None:
    """As a user would: the module in a with-block, the SDK on its connection string."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    emulator_image, sql_image = images
    config = standin_config(tmp_path / "Config.json", queues=2)
    with ServiceBusEmulatorContainer(emulator_image, sql_image, accept_eula=True, config=config) as emulator:
        with ServiceBusClient.from_connection_string(emulator.get_connection_string()) as client:
            with client.get_queue_sender("queue.2") as sender:
                sender.send_messages(ServiceBusMessage(b"hello", message_id="m1"))
            with client.get_queue_receiver("queue.2", max_wait_time=5) as receiver:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=5)
                assert [m.message_id for m in got] == ["m1"]
                receiver.complete_message(got[0])
        assert emulator.get_management_connection_string().startswith(f"Endpoint=sb://{emulator.host()}:{emulator.http_port()};")
    assert containers_left() == []


def test_the_eula_must_be_accepted(images) -> None:
    with pytest.raises(EmulatorError, match="license terms must be accepted"):
        ServiceBusEmulatorContainer(*images).start()
    assert containers_left() == []


def test_a_sql_server_that_never_becomes_ready_is_named_and_removed(images) -> None:
    emulator = ServiceBusEmulatorContainer(*images, accept_eula=True, sql_env={"STANDIN_NEVER_READY": "1"}, sql_timeout=8)
    with pytest.raises(EmulatorError, match="SQL Server container .* did not become ready"):
        emulator.start()
    assert containers_left() == []


def test_an_emulator_that_exits_shows_its_last_lines(images, tmp_path: Path) -> None:
    config = standin_config(tmp_path / "Config.json", queues=51)  # past the emulator's 50 entities
    emulator = ServiceBusEmulatorContainer(*images, accept_eula=True, config=config)
    with pytest.raises(EmulatorError) as error:
        emulator.start()
    assert "exited" in str(error.value) and "51 queues and topics configured" in str(error.value)
    assert containers_left() == []


def test_a_weak_sql_password_is_refused_by_the_sql_container(images) -> None:
    emulator = ServiceBusEmulatorContainer(*images, accept_eula=True, sql_password="short")
    with pytest.raises(EmulatorError, match="password policy"):
        emulator.start()
    assert containers_left() == []


def test_a_missing_config_file_is_an_error_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(EmulatorError, match="no such file"):
        ServiceBusEmulatorContainer(accept_eula=True, config=tmp_path / "nope.json")


def test_the_expectations_file_is_the_documented_limitations_of_the_catalog() -> None:
    """Every clause needing a capability the emulator documents it lacks is expected skipped there,
    with the documented reason; no other clause is; and the emulator target declares exactly those
    capabilities lacking (regenerate the file with sbconform.emulator.expectations_text())."""
    from sbconform.report import load_expectations
    from sbconform.targets.emulator import EmulatorTarget
    from sbspec.catalog import load_catalog

    catalog = load_catalog()
    path = Path(__file__).resolve().parent.parent / "expectations" / "microsoft-emulator.toml"
    loaded = load_expectations(path)
    target = EmulatorTarget(accept_eula="Y")
    lacking = set(target.lacking) - set(target.capabilities)
    documented = {"partitions", "partition-outage", "premium-namespace", "paired-namespaces", "small-quota"}
    assert documented <= lacking
    needing = {cid for cid, c in catalog.clauses.items() if set(c.needs) & documented}
    assert set(loaded) == needing, sorted(set(loaded) ^ needing)
    for cid, entry in loaded.items():
        assert entry["status"] == "skip" and ("Known limitations" in entry["reason"] or "Usage quotas" in entry["reason"]), cid


@pytest.mark.skipif(not __import__("os").environ.get("SBCONFORM_HEAVY"),
                    reason="the full certify run through the emulator stand-ins runs with SBCONFORM_HEAVY=1 (about 6 minutes with 2 jobs)")
def test_certify_the_emulator_target_against_the_stand_ins(images, tmp_path: Path) -> None:
    """--target emulator end to end, every clause of the catalog: the pair started per test process,
    entities provisioned through the emulator's management API (ServiceBusAdministrationClient over
    plain HTTP on its port 5300), every clause reported (pass, fail, or skipped with its reason: the
    documented limitations among them), none uncovered, and every container removed afterwards."""
    import sys

    repo = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [sys.executable, "-m", "sbconform.cli", "certify", "--target", "emulator", "--option", "accept_eula=Y",
         "--option", "standin=true", "--jobs", "2", "--report-dir", str(tmp_path), "--expectations",
         str(repo / "expectations" / "microsoft-emulator.toml")],
        cwd=repo, capture_output=True, text=True, timeout=1800,
    )
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]  # a verdict, not a broken run
    report = json.loads((tmp_path / "report.json").read_text())
    summary = report["summary"]
    assert summary["uncovered"] == 0 and summary["incomplete"] is None and summary["scope"] == "catalog", summary
    assert summary["pass"] > 90, summary  # provisioned and graded, not skipped wholesale
    for cid, clause in report["clauses"].items():
        assert clause["status"] in ("pass", "fail", "skip"), (cid, clause["status"])
        if clause["status"] == "skip":
            assert clause["reason"] or all(s["reason"] for s in clause["scenarios"]), cid
    for cid in ("SETTLE-DEFR-001", "SETTLE-PEEK-001", "SETTLE-COMP-001"):
        assert report["clauses"][cid]["status"] == "pass", (cid, report["clauses"][cid])
    assert report["clauses"]["PART-KEY-001"]["status"] == "skip"
    assert "partitioned entities aren't compatible" in json.dumps(report["clauses"]["PART-KEY-001"])
    assert containers_left() == []


# ------------------------------------------------ control=config: no management API, Config.json
class FakeEmulator:
    """Records the Config.json of each restart (the batching logic, without containers)."""

    def __init__(self) -> None:
        self.configs: list[dict] = []

    def restart(self, path) -> None:
        self.configs.append(json.loads(Path(path).read_text()))

    def get_connection_string(self) -> str:
        return "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"


def test_config_mode_restarts_once_for_a_batch_of_planned_tests_within_the_entity_quota(tmp_path: Path, monkeypatch) -> None:
    from sbconform.emulator_plan import Plan, entity_name
    from sbconform.targets.emulator import EmulatorTarget, _base_config

    tests = [f"tests/test_features.py::test_{i}" for i in range(30)]
    plan = tmp_path / "plan.jsonl"
    lines = []
    for test in tests:  # each test: a queue forwarding to a topic with one subscription (2 entities)
        lines.append({"test": test, "kind": "topic", "name": "t", "properties": {}})
        lines.append({"test": test, "kind": "subscription", "topic": "t", "name": "s", "properties": {"max_delivery_count": 3}})
        lines.append({"test": test, "kind": "queue", "name": "q", "properties": {"lock_duration": 5000, "forward_to": "t"}})
    plan.write_text("\n".join(json.dumps(line) for line in lines))
    target = EmulatorTarget(accept_eula="Y", control="config", plan=str(plan))
    fake = FakeEmulator()
    target.emulator, target.plan, target.mine, target._suffix = fake, Plan.load(plan), [], "x"
    fake.sbconform_config, fake.sbconform_restarts = _base_config(None), 0
    target.handles, target.client, target._low_level = [], None, None

    def run(test: str) -> tuple[str, str]:
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"{test} (call)")
        target.mine = []
        topic = target.create_topic("t")
        target.create_subscription(topic, "s", max_delivery_count=3)
        return topic, target.create_queue("q", lock_duration=5000, forward_to=topic)

    topic, queue = run(tests[0])
    assert (topic, queue) == (entity_name("t", tests[0]), entity_name("q", tests[0]))
    assert len(fake.configs) == 1
    [ns] = fake.configs[0]["UserConfig"]["Namespaces"]
    assert set(ns) <= {"Name", "Queues", "Topics"}  # the emulator's schema: no sbconform extensions
    # the image's two entities, then 24 whole tests of 2 queues and topics each: 50, the documented quota
    assert len(ns["Queues"]) + len(ns["Topics"]) == 50
    first = next(q for q in ns["Queues"] if q["Name"] == queue)
    assert first["Properties"] == {"LockDuration": "PT5S", "ForwardTo": topic}
    assert next(t for t in ns["Topics"] if t["Name"] == topic)["Subscriptions"] == [{"Name": "s", "Properties": {"MaxDeliveryCount": 3}}]
    for test in tests[1:24]:
        run(test)
    assert len(fake.configs) == 1  # the batch held them
    run(tests[24])
    assert len(fake.configs) == 2  # the next batch
    names = {q["Name"] for q in fake.configs[1]["UserConfig"]["Namespaces"][0]["Queues"]}
    assert entity_name("q", tests[24]) in names and entity_name("q", tests[29]) in names and entity_name("q", tests[0]) not in names


def test_config_mode_skips_what_config_json_cannot_say_and_refuses_bad_options(tmp_path: Path) -> None:
    from sbconform.targets.emulator import EmulatorTarget

    with pytest.raises(ValueError, match="no such file"):
        EmulatorTarget(accept_eula="Y", control="config", plan=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="for control=config"):
        EmulatorTarget(accept_eula="Y", control="admin", plan=__file__)
    with pytest.raises(ValueError, match="NAME=VALUE"):
        EmulatorTarget(accept_eula="Y", env="=x")
    target = EmulatorTarget(accept_eula="Y", control="config")
    assert "entity-management" not in target.capabilities and "Config.json" in target.lacking["entity-management"]


def test_an_emulator_without_management_api_is_provisioned_through_config_json(images, tmp_path: Path, monkeypatch) -> None:
    """The stand-in with its management API off (STANDIN_NO_MANAGEMENT=1, as emulator versions before
    it): control=config restarts it with a Config.json holding the queue, which then works over AMQP."""
    import urllib.error
    import urllib.request

    from sbreference import Message
    from sbconform.targets.emulator import EmulatorTarget

    target = EmulatorTarget(accept_eula="Y", standin="true", control="config", env="STANDIN_NO_MANAGEMENT=1")
    target.open()
    try:
        emulator = target.emulator
        with pytest.raises(urllib.error.HTTPError) as refused:  # no management API on the HTTP port
            urllib.request.urlopen(f"http://{emulator.host()}:{emulator.http_port()}/$Resources/queues", timeout=5)
        assert refused.value.code == 404
        queue = target.create_queue("orders", lock_duration=5000)
        assert emulator.sbconform_restarts == 1
        sender, receiver = target.sender(queue), target.receiver(queue)
        target.send(sender, [Message(body=b"x", message_id="m1")])
        [got] = target.receive(receiver, max_count=1, max_wait=5000)
        assert got.message_id == "m1" and got.locked_until - got.enqueued_time <= 5000 + 1000
        target.complete(receiver, got)
    finally:
        target.close()
        from sbconform.targets.emulator import _LOCK, _RUNNING

        with _LOCK:
            for key in [k for k, v in _RUNNING.items() if v is target.emulator]:
                _RUNNING.pop(key).stop()
    assert containers_left() == []


# ------------------------------------------------------------------ bad cases: one line, exit 2
def certify_cli(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    import sys

    repo = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", "--target", "emulator", *options,
                           "--report-dir", str(tmp_path / "report"), "--clause", "SETTLE-COMP-001"],
                          cwd=repo, capture_output=True, text=True, timeout=300)


def test_certify_without_the_eula_accepted_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = certify_cli(tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "accept_eula=Y" in run.stderr and not (tmp_path / "report" / "report.json").exists()


def test_certify_with_a_config_past_the_quotas_is_one_line_naming_it_and_leaves_nothing(images, tmp_path: Path) -> None:
    config = standin_config(tmp_path / "Config.json", queues=51)
    run = certify_cli(tmp_path, "--option", "accept_eula=Y", "--option", "standin=true", "--option", f"config={config}")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "exited" in run.stderr and "51 queues and topics configured" in run.stderr
    assert not (tmp_path / "report" / "report.json").exists()
    assert containers_left() == []


def test_the_stand_in_enforces_the_documented_quotas(images, tmp_path: Path) -> None:
    """Its management API refuses a 51st queue or topic and a time to live past 1 hour; its AMQP port
    an 11th connection (sbconform.emulator.QUOTAS, from the emulator's "Usage quotas")."""
    import datetime as dt

    from azure.core.exceptions import HttpResponseError
    from azure.servicebus.management import ServiceBusAdministrationClient
    from proton.utils import BlockingConnection

    from sbconform.server.admin_http import plain_http_transport

    with ServiceBusEmulatorContainer(*images, accept_eula=True) as emulator:  # starts with queue.1 and topic.1
        admin = ServiceBusAdministrationClient.from_connection_string(emulator.get_management_connection_string(),
                                                                      transport=plain_http_transport())
        with pytest.raises(HttpResponseError):
            admin.create_queue("long-lived", default_message_time_to_live=dt.timedelta(hours=2))
        admin.create_queue("an-hour", default_message_time_to_live=dt.timedelta(hours=1))
        for i in range(47):
            admin.create_queue(f"q{i}")
        with pytest.raises(HttpResponseError) as refused:
            admin.create_topic("the-51st")
        assert "50" in str(refused.value)
        url = f"amqp://{emulator.host()}:{emulator.amqp_port()}"
        connections = [BlockingConnection(url, allowed_mechs="ANONYMOUS", timeout=10) for _ in range(10)]  # each opened
        try:
            with pytest.raises(Exception):  # the eleventh is closed at once, before its OPEN is answered
                BlockingConnection(url, allowed_mechs="ANONYMOUS", timeout=10)
        finally:
            for connection in connections:
                connection.close()
    assert containers_left() == []


def test_a_scenario_needing_more_than_a_quota_is_skipped_naming_it() -> None:
    from sbconform.targets.emulator import EmulatorTarget

    target = EmulatorTarget(accept_eula="Y")
    target.handles = [object()] * 10
    with pytest.raises(pytest.skip.Exception, match="Number of concurrent connections to namespace: 10"):
        target.sender("q")
    with pytest.raises(pytest.skip.Exception, match=r"Message Time to Live \(1hr\).*overview-emulator"):
        target.create_queue("q", default_message_time_to_live=2 * 3600 * 1000)
    target.created = ["x"] * 48  # and the image's queue.1 and topic.1: 50
    with pytest.raises(pytest.skip.Exception, match="Number of entities"):
        target.create_topic("t")
    from sbreference import Message

    with pytest.raises(pytest.skip.Exception, match="a message time to live of 7200000 ms"):
        target.send(None, [Message(body=b"x", time_to_live=2 * 3600 * 1000)])


def test_the_emulators_ports_are_options_and_reach_its_container() -> None:
    """Images, tags, ports and environment are options: the ports the emulator listens on in its
    container (documented defaults 5672 and 5300) reach the container, the HTTP one also as
    EMULATOR_HTTP_PORT; a port that is no number is one option error."""
    from sbconform.emulator import ServiceBusEmulatorContainer
    from sbconform.targets.emulator import EmulatorTarget

    default = ServiceBusEmulatorContainer(accept_eula=True)
    assert (default.container_amqp_port, default.container_http_port) == (5672, 5300)
    assert "EMULATOR_HTTP_PORT" not in default.environment()
    moved = ServiceBusEmulatorContainer(accept_eula=True, http_port=5301, env={"X": "1"})
    assert moved.environment()["EMULATOR_HTTP_PORT"] == "5301" and moved.environment()["X"] == "1"
    assert EmulatorTarget(accept_eula="Y", amqp_port="5673", http_port="5301").ports == (5673, 5301)
    with pytest.raises(ValueError, match="port"):
        EmulatorTarget(accept_eula="Y", http_port="web")
