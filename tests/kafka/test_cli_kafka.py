"""``fluvial kafka start|status|stop|logs`` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from tests import processes

from fluvial.errors import KafkaSetupError
from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, create_topics

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def fluvial(*args: str) -> subprocess.CompletedProcess[str]:
    result = processes.run([sys.executable, "-m", "fluvial.cli", *args], timeout=180)
    if args[:2] == ("kafka", "start"):
        # The broker outlives the CLI: it is the test's to stop, even if the test fails.
        data_dir = Path(args[args.index("--data-dir") + 1])
        for line in java_processes_using(data_dir):
            processes.adopt(int(line.split()[0]), f"the broker in {data_dir}")
    return result


def java_processes_using(data_dir: Path) -> list[str]:
    out = processes.run(["pgrep", "-af", str(data_dir)], timeout=30).stdout
    return [line for line in out.splitlines() if "kafka.Kafka" in line]


def test_start_twice_stop_and_restart_keeps_data(tmp_path: Path, fluvial_home: Path) -> None:
    data_dir = tmp_path / "cluster"
    port = str(free_port())
    where = ["--data-dir", str(data_dir), "--port", port]

    first = fluvial("kafka", "start", *where, "--heap", "512m")
    assert first.returncode == 0, first.stderr
    bootstrap = first.stdout.strip()
    assert bootstrap == f"127.0.0.1:{port}"

    second = fluvial("kafka", "start", *where)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == bootstrap
    assert "already running" in second.stderr
    assert len(java_processes_using(data_dir)) == 1, "a second start must not launch a broker"

    status = fluvial("kafka", "status", *where)
    assert status.returncode == 0 and "serving" in status.stdout

    logs = fluvial("kafka", "logs", *where, "-n", "5")
    assert logs.returncode == 0 and logs.stdout.count("\n") == 5

    topic = f"survives-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [TopicSpec(topic, partitions=1)])
    # Idempotent, so the broker keeps the records in the order sent even when a request is
    # retried; any difference after the restart is then the broker's doing.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(60) == 0

    stop = fluvial("kafka", "stop", *where)
    assert stop.returncode == 0, stop.stderr
    assert java_processes_using(data_dir) == [], "stop must leave no broker process behind"
    down = fluvial("kafka", "status", *where)
    assert down.returncode == 1 and "not serving" in down.stdout

    again = fluvial("kafka", "start", *where)
    assert again.returncode == 0, again.stderr
    try:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "after-restart",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 180
        while len(values) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        consumer.close()
        sent = [f"v{i}".encode() for i in range(20)]
        assert sorted(values) == sorted(sent), (
            f"records lost or repeated across the restart: {values}"
        )
        assert values == sent, f"records reordered across the restart: {values}"
    finally:
        fluvial("kafka", "stop", *where)
    assert java_processes_using(data_dir) == []


def test_port_in_use_is_a_one_line_error_with_the_fix(
    kafka_cluster: LocalKafka, tmp_path: Path, fluvial_home: Path
) -> None:
    result = fluvial(
        "kafka", "start", "--data-dir", str(tmp_path / "other"), "--port", str(kafka_cluster.port)
    )
    assert result.returncode == 1
    assert "already in use" in result.stderr and "--port" in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_missing_java_is_reported_with_the_fix(tmp_path: Path, fluvial_home: Path) -> None:
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java-here")}
    result = processes.run(
        [sys.executable, "-m", "fluvial.cli", "kafka", "start", "--data-dir", str(tmp_path / "c"),
         "--port", str(free_port())],
        env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Java 17+" in result.stderr and "JAVA_HOME" in result.stderr


def test_broker_that_cannot_start_shows_its_log(tmp_path: Path) -> None:
    cluster = LocalKafka(tmp_path / "bad", port=free_port(), heap="not-a-size")
    with pytest.raises(Exception) as failure:
        cluster.start()
    assert "exited during start-up" in str(failure.value)
    assert "Invalid maximum heap size" in str(failure.value)


def test_a_start_that_fails_in_a_with_block_stops_the_brokers_it_launched(tmp_path: Path) -> None:
    """A failure (or a Ctrl-C, a SIGTERM) while the cluster comes up, after its brokers were
    launched: a ``with`` block whose start raised never runs ``__exit__``, so ``__enter__``
    itself must stop them. Here the cluster is given half a second to come up."""
    data_dir = tmp_path / "impatient"
    cluster = LocalKafka(data_dir, port=free_port(), heap="512m", startup_timeout_s=0.5)
    with pytest.raises(KafkaSetupError, match="did not come up within"), cluster:
        pass
    assert (data_dir / "broker-1" / "server.properties").exists(), "the broker was launched"
    left = java_processes_using(data_dir)
    for line in left:  # stopped by the test's teardown, and named in the summary
        processes.adopt(int(line.split()[0]), f"the broker in {data_dir}")
    assert left == []
