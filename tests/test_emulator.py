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


def containers_left(image_prefix: str = "localhost/sbconform-standin") -> list[str]:
    from sbconform.containers import engine

    out = engine().run("ps", "-a", "--format", "{{.Image}} {{.Names}}", capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.startswith(image_prefix)]


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
    from spec.catalog import load_catalog

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
