"""The container target: ``sbconform serve`` in a container started through testcontainers.

Needs a Docker-compatible engine (Docker, or podman: ``sbconform.containers``); without one
these tests are skipped, saying so. The image is built on first use (a base image made with
debootstrap if none is there: about a minute).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("testcontainers", reason="the containers extra (testcontainers) is not installed")
pytest.importorskip("azure.servicebus", reason="the sdk extra (azure-servicebus) is not installed")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def image():
    from sbconform.containers import EngineUnavailable, SERVE_IMAGE, engine, ensure_serve_image

    try:
        ensure_serve_image(SERVE_IMAGE, engine())
    except EngineUnavailable as error:
        pytest.skip(f"no container engine: {error}")
    return SERVE_IMAGE


def test_certify_through_a_container(image, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "sbconform.cli", "certify", "--target", "container", "--report-dir", str(tmp_path), "--jobs", "1",
         "--clause", "settlement", "--", "tests/test_features.py", "-k", "(deferred or peek) and not purged and not expired and not expiry and not subscription and not delivery_count"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["target"]["name"] == "container" and report["target"]["image"] == image
    passed = {cid for cid, c in report["clauses"].items() if c["status"] == "pass"}
    assert {"SETTLE-DEFR-001", "SETTLE-DEFR-002", "SETTLE-PEEK-001"} <= passed, sorted(passed)


def test_the_config_file_is_mounted_where_the_emulator_reads_it(image, tmp_path: Path) -> None:
    from sbreference import SECOND
    from sbconform.targets.container import ContainerTarget

    config = tmp_path / "Config.json"
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": "configured", "Properties": {"LockDuration": "PT7S", "MaxDeliveryCount": 4}}]}]}}))
    target = ContainerTarget(config=str(config))
    target.open()
    try:
        described = target.describe_entity("configured")
        assert (described["lock_duration"], described["max_delivery_count"]) == (7 * SECOND, 4)
        assert target.describe()["config"] == str(config)
    finally:
        target.close()


def test_bad_options_are_clear_errors(tmp_path: Path) -> None:
    from sbconform.targets.container import ContainerTarget

    with pytest.raises(ValueError, match="no such file"):
        ContainerTarget(config=str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="NAME=VALUE"):
        ContainerTarget(env="JUSTANAME")
    for port in ("abc", "0", "70000"):  # said of the option, not as int()'s "invalid literal"
        with pytest.raises(ValueError, match=rf"^port='{port}': expected"):
            ContainerTarget(port=port)
    other = ContainerTarget(image="example.invalid/some-emulator:1")
    assert other.control_mode == "none" and "entity-management" not in other.capabilities


def test_serve_container_gives_connection_strings_out_and_the_kit_controls(image) -> None:
    import datetime as dt

    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    from sbconform.local import LocalServiceBusError, ServeContainer

    config = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}
    with ServeContainer(config=config, image=image) as broker:
        with ServiceBusClient.from_connection_string(broker.get_connection_string()) as client:
            with client.get_queue_sender("orders") as sender:
                sender.schedule_messages(ServiceBusMessage("later"), dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
            broker.advance(dt.timedelta(hours=1))
            with client.get_queue_receiver("orders") as receiver:
                [got] = receiver.receive_messages(max_wait_time=5)
                assert str(got) == "later"
                receiver.complete_message(got)
        assert [q.name for q in broker.admin_client().list_queues()] == ["orders"]
        labels = broker.container.get_wrapped_container().labels
        assert "org.sbconform.session" in labels
    assert broker.container is None
    bad = {"UserConfig": {"Namespaces": [{"Name": "x", "Queues": [{"Name": "q", "Properties": {"MaxDeliveryCount": "three"}}]}]}}
    with pytest.raises(LocalServiceBusError, match=r"^config \(the dict given\): UserConfig\.Namespaces\[0\]\.Queues\[0\]\.Properties\.MaxDeliveryCount"):
        ServeContainer(config=bad, image=image).start()


def test_an_image_that_is_not_here_and_cannot_be_pulled_is_one_line_not_every_clause_failing(tmp_path: Path) -> None:
    # a typo in --option image= gave FAILED, 1 MUST clause failing, exit 1: the broker graded for the user's mistake
    from sbconform.containers import EngineUnavailable, engine

    try:
        engine()
    except EngineUnavailable as error:
        pytest.skip(f"no container engine: {error}")
    run = subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", "--target", "container", "--option",
                          "image=docker.io/library/nosuchimage-sbconform:1", "--clause", "SETTLE-COMP-001",
                          "--report-dir", str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nosuchimage-sbconform:1 is not here and could not be pulled" in lines[0], run.stderr
