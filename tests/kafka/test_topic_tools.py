"""``fluvial topics create|list|describe`` and ``fluvial tail``, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from tests import processes
from tests.runtime.harness import Runner

from fluvial import serdes
from fluvial.records import Window, Windowed

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def fluvial(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([sys.executable, "-m", "fluvial.cli", *args], timeout=120)


def test_create_list_and_describe(
    bootstrap_servers: str, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("orders")
    created = fluvial(
        "topics", "create", name, "--partitions", "3", "--config", "cleanup.policy=compact",
        "--bootstrap-servers", bootstrap_servers,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    listed = fluvial("topics", "list", "--bootstrap-servers", bootstrap_servers)
    assert f"{name}\tpartitions=3\treplication=1" in listed.stdout.splitlines()
    assert "__consumer_offsets" not in listed.stdout
    described = fluvial(
        "topics", "describe", name, "--json", "--bootstrap-servers", bootstrap_servers
    )
    info = json.loads(described.stdout)
    assert [p["partition"] for p in info["partitions"]] == [0, 1, 2]
    assert info["configs"]["cleanup.policy"] == "compact"

    again = fluvial("topics", "create", name, "--bootstrap-servers", bootstrap_servers)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_tail_reads_committed_records_with_windowed_keys(
    bootstrap_servers: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("counts", partitions=2)
    keys = serdes.time_windowed(serdes.string(), 5000)
    values = serdes.long()
    now = int(time.time() * 1000)
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "transactional.id": f"{topic}-writer",
         "partitioner": "murmur2_random"}
    )  # fmt: skip
    producer.init_transactions(30)

    def send(key: str, count: int, offset_ms: int) -> None:
        window = Window(now - now % 5000, now - now % 5000 + 5000)
        producer.produce(
            topic, key=keys.serialize(topic, Windowed(key, window)),
            value=values.serialize(topic, count), timestamp=now + offset_ms,
        )  # fmt: skip

    producer.begin_transaction()
    for i in range(5):
        send(f"user-{i}", i, i)
    producer.commit_transaction(30)
    producer.begin_transaction()
    send("aborted", 99, 10)
    producer.flush(30)
    producer.abort_transaction(30)

    common = ["--key-serde", "string", "--window-size-ms", "5000", "--value-serde", "long",
              "--bootstrap-servers", bootstrap_servers]  # fmt: skip
    everything = fluvial("tail", topic, "--from-beginning", "--json", *common)
    assert everything.returncode == 0, everything.stderr
    rows = [json.loads(line) for line in everything.stdout.splitlines()]
    assert sorted((r["key"], r["value"]) for r in rows) == [(f"user-{i}", i) for i in range(5)]
    start = now - now % 5000
    assert {(r["window_start"], r["window_end"]) for r in rows} == {(start, start + 5000)}

    last_two = fluvial("tail", topic, "-n", "2", *common)
    lines = last_two.stdout.splitlines()
    assert len(lines) == 2, last_two.stdout
    assert "user-3@[" in lines[0] and lines[0].endswith("  3")
    assert "user-4@[" in lines[1] and lines[1].endswith("  4")


def test_tail_follows_new_records(
    bootstrap_servers: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("events")
    follower = processes.spawn(
        [sys.executable, "-m", "fluvial.cli", "tail", topic, "-f", "--bootstrap-servers",
         bootstrap_servers],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, what="fluvial tail -f",
    )  # fmt: skip
    try:
        producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
        seen = ""
        deadline = time.monotonic() + 60
        assert follower.stdout is not None
        import os
        import select

        os.set_blocking(follower.stdout.fileno(), False)
        while "hello" not in seen and time.monotonic() < deadline:
            producer.produce(topic, key=b"k", value=b"hello")
            producer.flush(10)
            ready, _, _ = select.select([follower.stdout], [], [], 1.0)
            if ready:
                seen += follower.stdout.read() or ""
        assert "k  hello" in seen
    finally:
        processes.stop(follower)
    assert follower.returncode is not None


def test_tail_of_a_missing_topic_says_how_to_make_it(bootstrap_servers: str) -> None:
    result = fluvial("tail", "no-such-topic-anywhere", "--bootstrap-servers", bootstrap_servers)
    assert result.returncode == 1
    assert "does not exist" in result.stderr and "fluvial topics create" in result.stderr


def test_tail_gives_the_last_records_of_every_partition_in_time_order(
    bootstrap_servers: str, topic_factory: Callable[..., str]
) -> None:
    """The last N records across all partitions, oldest first: the N a user wrote last over
    three partitions, and when records share a timestamp (a window's results do), the ends of
    all the partitions rather than one partition's tail."""
    topic = topic_factory("readings", partitions=3)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})

    def write(values: range, timestamp: Callable[[int], int]) -> None:
        for i in values:
            producer.produce(topic, key=f"sensor-{i}".encode(), value=str(i).encode(),
                             partition=i % 3, timestamp=timestamp(i))  # fmt: skip
            producer.flush(30)

    def tail(lines: int) -> list[dict]:
        shown = fluvial("tail", topic, "-n", str(lines), "--json",
                        "--bootstrap-servers", bootstrap_servers)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        return [json.loads(line) for line in shown.stdout.splitlines()]

    write(range(30), lambda i: now - 60_000 + i * 1000)
    rows = tail(6)
    assert [r["value"] for r in rows] == [str(i) for i in range(24, 30)]
    assert [r["partition"] for r in rows] == [0, 1, 2, 0, 1, 2]

    # A window's results: nine records at one time, three in each partition.
    write(range(30, 39), lambda i: now)
    rows = tail(3)
    assert sorted(r["partition"] for r in rows) == [0, 1, 2], rows
    assert sorted(r["value"] for r in rows) == ["36", "37", "38"]
    rows = tail(12)
    assert [r["value"] for r in rows[:3]] == ["27", "28", "29"]
    assert sorted(r["value"] for r in rows[3:]) == [str(i) for i in range(30, 39)]
    assert [r["timestamp_ms"] for r in rows] == sorted(r["timestamp_ms"] for r in rows)


def test_delete_refuses_a_running_applications_internal_topics_unless_forced(
    bootstrap_servers: str,
    topic_factory: Callable[..., str],
    app_id_factory: Callable[[], str],
    tmp_path: Path,
) -> None:
    app_id = app_id_factory()
    runner = Runner(bootstrap_servers, app_id, topic_factory("views", partitions=3),
                    topic_factory("counts", partitions=3), tmp_path / "state")  # fmt: skip
    runner.start()
    runner.wait_ready()
    assert runner.proc is not None and runner.proc.poll() is None, runner.output()
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    internal = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(app_id)
                      and t.endswith(("-changelog", "-repartition")))  # fmt: skip
    changelog, repartition = internal
    assert changelog.endswith("-changelog") and repartition.endswith("-repartition")
    connection = ["--bootstrap-servers", bootstrap_servers]

    refused = fluvial("topics", "delete", changelog, repartition, *connection)
    assert refused.returncode == 1
    said = " ".join(refused.stderr.split())
    assert f"refusing to delete {changelog!r}" in said and f"application {app_id!r}" in said
    assert f"group '{app_id}-driver'" in said and f"kill {runner.proc.pid}" in said, said
    assert f"fluvial reset {app_id}" in said and "--force" in said
    assert "Nothing was deleted" in said
    missing = fluvial("topics", "delete", "no-such-topic-anywhere", runner.output_topic,
                      *connection)  # fmt: skip
    assert missing.returncode == 1 and "no topic 'no-such-topic-anywhere'" in missing.stderr
    assert {changelog, repartition, runner.output_topic} <= set(admin.list_topics().topics)

    forced = fluvial("topics", "delete", repartition, "--force", *connection)
    assert forced.returncode == 0, forced.stderr
    assert repartition not in admin.list_topics(timeout=30).topics

    runner.stop()
    stopped = fluvial("topics", "delete", changelog, runner.output_topic, *connection)
    assert stopped.returncode == 0, stopped.stderr
    assert f"deleted topic {changelog}" in stopped.stderr
    assert not {changelog, runner.output_topic} & set(admin.list_topics(timeout=30).topics)
