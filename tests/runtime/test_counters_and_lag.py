"""What a running application says is true, on both engines, with a real broker and 3 partitions.

Input with late, undecodable and failing records goes through a re-key (a repartition topic),
a user function that fails for some records, and a windowed count. Then:

- each reason a record reached no output has its own counter, exact, and no counter ever goes
  down while the application runs (on Spark too, where slots move between Python workers);
- a record that failed after the repartition is dead-lettered under the name of the record the
  user wrote (input topic, partition, offset), not of the repartition topic;
- the application's lag covers its input and repartition topics, and says "caught up" only when
  both are processed and committed (``fluvial status`` from another process too);
- once caught up, an idle application writes nothing: its repartition and output topics' end
  offsets do not move over many commit intervals (and Spark leases).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial.loader import load_app
from fluvial.metrics import WorkerMetrics, summarize
from fluvial.runtime.app_lag import BEHIND_EXIT_CODE, LagWatch, read_application_lag
from fluvial.runtime.runner import status_line
from tests.event_times import event_time_base_ms
from tests.runtime.harness import read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = Path(__file__).parent / "apps" / "counters.py"
PARTITIONS = 3
GOOD, UNDECODABLE, FAILING, LATE = 10, 1, 2, 2  # per partition
COUNTERS = ("late_records", "null_key_records", "invalid_timestamps", "undecodable_records",
            "failed_records", "dead_letters", "unproduced_records", "records_in",
            "records_processed", "records_out", "commits")  # fmt: skip


class Producing:
    """An idempotent producer that remembers where each record landed."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "partitioner": "murmur2_random"})  # fmt: skip
        self.landed: list[tuple[int, int, bytes]] = []  # partition, offset, value

    def send(self, topic: str, partition: int, key: str, value: bytes, timestamp: int) -> None:
        def delivered(error: Any, msg: Any) -> None:
            assert error is None, error
            self.landed.append((msg.partition(), msg.offset(), msg.value()))

        self.producer.produce(topic, key=key.encode(), value=value, partition=partition,
                              timestamp=timestamp, on_delivery=delivered)  # fmt: skip

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def view(n: int, user: str, **extra: Any) -> bytes:
    return json.dumps({"n": n, "user": user, **extra}).encode()


class Sampler:
    """Reads the counters every few milliseconds while the application runs: none may go down."""

    def __init__(self, metrics: Callable[[], list[WorkerMetrics]]) -> None:
        self.metrics = metrics
        self.decreases: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last: dict[str, float] = {}
        last_tasks: dict[tuple[str, str], int] = {}
        while not self._stop.wait(0.02):
            workers = self.metrics()
            totals = summarize(workers)
            for name in COUNTERS:
                if totals[name] < last.get(name, 0):
                    self.decreases.append(f"{name} {last[name]:g} -> {totals[name]:g}")
                last[name] = max(last.get(name, 0), totals[name])
            for w in workers:
                for task, counts in w.task_metrics.items():
                    for name, count in counts.items():
                        key = (task, name)
                        if count < last_tasks.get(key, 0):
                            self.decreases.append(
                                f"task {task} {name} {last_tasks[key]} -> {count}"
                            )
                        last_tasks[key] = max(last_tasks.get(key, 0), count)
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def end_offsets(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-reader"})
    try:
        ends = {}
        for topic in topics:
            for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                ends[(topic, partition)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10
                )[1]
        return ends
    finally:
        consumer.close()


@pytest.fixture
def app_env(
    bootstrap_servers: str, topic_factory: Callable[..., str], app_id_factory, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, str]]:  # fmt: skip
    env = {
        "FLUVIAL_TEST_INPUT": topic_factory("views", partitions=PARTITIONS),
        "FLUVIAL_TEST_OUTPUT": topic_factory("counts", partitions=PARTITIONS),
        "FLUVIAL_TEST_DEAD": topic_factory("dead"),
        "FLUVIAL_TEST_APP_ID": app_id_factory(),
        "FLUVIAL_TEST_BOOTSTRAP": bootstrap_servers,
        "FLUVIAL_TEST_STATE_DIR": str(tmp_path / "state"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env


def start_engine(engine: str) -> Any:
    if engine == "local":
        from fluvial.runtime import Application

        loaded = load_app(APP)
        app = Application(loaded.topology, loaded.config)
    else:
        from fluvial.spark.engine import SparkApplication

        # Short leases: over the run, slots land on other Python workers, which start them anew.
        app = SparkApplication(APP, master="local[2]", slots=2, lease_seconds=2.0,
                               spark_conf={"spark.driver.memory": "1g"})  # fmt: skip
    app.start()
    return app


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_counters_lag_idle_and_dead_letters_tell_the_truth(
    engine: str, app_env: dict[str, str], bootstrap_servers: str
) -> None:
    loaded = load_app(APP)
    topology, config = loaded.topology, loaded.config
    assert config is not None
    source, output, dead = (app_env[n] for n in ("FLUVIAL_TEST_INPUT", "FLUVIAL_TEST_OUTPUT",
                                                 "FLUVIAL_TEST_DEAD"))  # fmt: skip
    [repartition] = [t.name for t in topology.internal_topics(config.application_id)
                     if t.name.endswith("-repartition")]  # fmt: skip
    base = event_time_base_ms()
    producing = Producing(bootstrap_servers)
    n = 0
    for partition in range(PARTITIONS):
        for i in range(GOOD):
            n += 1
            producing.send(source, partition, "k", view(n, f"user-{i % 4}"), base + i * 100)
        for _ in range(UNDECODABLE):
            producing.send(source, partition, "k", b"{not json", base + 500)
        for i in range(FAILING):
            n += 1
            producing.send(source, partition, "k", view(n, f"user-{i}", fail=True), base + 600)
        # Moves every writer's stream time a minute on: the first window closes (no grace).
        n += 1
        producing.send(source, partition, "k", view(n, "user-0"), base + 60_000)
    producing.flush()
    failing = {(p, o) for p, o, value in producing.landed if b'"fail": true' in value}
    undecodable = {(p, o) for p, o, value in producing.landed if value == b"{not json"}

    app = start_engine(engine)
    sampler = Sampler(app.metrics)
    watch = LagWatch(topology, config, interval_s=0.5).start()
    started = time.monotonic()
    try:

        def totals() -> dict[str, float]:
            return summarize(app.metrics())

        def caught_up() -> bool:
            app.raise_if_failed()
            return read_application_lag(topology, config).caught_up

        try:
            wait_until(lambda: totals()["failed_records"] >= PARTITIONS * FAILING and caught_up(),
                       240, "the first input processed and committed")  # fmt: skip
        except AssertionError as error:
            lag = read_application_lag(topology, config)
            raise AssertionError(f"{error}: {totals()}; {lag}") from None
        assert totals()["failed_records"] == PARTITIONS * FAILING, totals()
        # Now records later than the closed window, on every partition, for user-0, whose
        # downstream task's stream time the minute-later records moved on.
        for partition in range(PARTITIONS):
            for i in range(LATE):
                n += 1
                producing.send(source, partition, "k", view(n, "user-0"), base + 200 + i)
        producing.flush()
        try:
            wait_until(lambda: totals()["late_records"] == PARTITIONS * LATE and caught_up(),
                       240, "the late records dropped and committed")  # fmt: skip
        except AssertionError as error:
            lag = read_application_lag(topology, config)
            raise AssertionError(f"{error}: {totals()}; {lag}") from None

        # Each reason apart, exact.
        found = totals()
        assert found["late_records"] == PARTITIONS * LATE, found
        assert found["undecodable_records"] == PARTITIONS * UNDECODABLE, found
        assert found["failed_records"] == PARTITIONS * FAILING, found
        assert found["dead_letters"] == PARTITIONS * (UNDECODABLE + FAILING), found
        assert found["null_key_records"] == found["unproduced_records"] == 0, found

        def late_by_node() -> float:
            return sum(float(line.rsplit(" ", 1)[1])
                       for line in app.prometheus_metrics().splitlines()
                       if line.startswith("fluvial_node_dropped_records_total{")
                       and 'reason="late"' in line)  # fmt: skip

        # Per operator too (on Spark, per-task counters arrive when a lease ends).
        wait_until(lambda: late_by_node() == PARTITIONS * LATE, 60, "late records per operator")
        wait_until(lambda: "(caught up)" in status_line(app, started, watch), 30,
                   "the status line to say caught up")  # fmt: skip
        line = status_line(app, started, watch)
        assert f"late {PARTITIONS * LATE}" in line and f"failed {PARTITIONS * FAILING}" in line
        assert f"undecodable {PARTITIONS * UNDECODABLE}" in line, line

        # Dead letters name the records the user wrote, even after the repartition.
        letters = read_topic(bootstrap_servers, dead)
        assert len(letters) == PARTITIONS * (UNDECODABLE + FAILING)
        named = set()
        for letter in letters:
            headers = dict(letter.headers())
            assert headers["fluvial.topic"] == source.encode(), headers
            where = (int(headers["fluvial.partition"]), int(headers["fluvial.offset"]))
            assert headers["fluvial.source"] == f"{source}-{where[0]}@{where[1]}".encode()
            named.add(where)
            if where in failing:
                assert headers["fluvial.repartition"].startswith(repartition.encode()), headers
        assert named == failing | undecodable

        # Idle means idle: nothing more is written, commit after commit, lease after lease.
        topics = [repartition, output, dead]
        before = end_offsets(bootstrap_servers, topics)
        commits = totals()["commits"]
        leases = getattr(app, "leases", 0)
        wait_until(lambda: getattr(app, "leases", 0) >= leases + 5, 120, "five more leases") \
            if engine == "spark" else time.sleep(5)  # fmt: skip
        assert end_offsets(bootstrap_servers, topics) == before, "an idle application wrote"
        assert totals()["commits"] == commits, "an idle application committed"
        assert caught_up()
    finally:
        watch.stop()
        sampler.stop()
        app.close()
    assert sampler.samples > 10
    assert not sampler.decreases, sampler.decreases

    # Stopped, with records waiting in the input and in the repartition topic: behind, by
    # exactly those records, in each topic; and `fluvial status` says so from another process.
    for partition in range(PARTITIONS):
        producing.send(source, partition, "k", view(0, "user-9"), base + 70_000)
    producing.send(repartition, 1, "user-9", view(0, "user-9"), base + 70_000)
    producing.flush()
    lag = read_application_lag(topology, config)
    assert not lag.caught_up
    assert lag.by_topic() == {source: PARTITIONS, repartition: 1}, lag
    if engine == "local":
        done = subprocess.run(
            [sys.executable, "-m", "fluvial.cli", "status", str(APP)], env=os.environ,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == BEHIND_EXIT_CODE, done.stdout + done.stderr
        assert f"{repartition}  lag 1  (repartition)" in done.stdout, done.stdout
        assert "behind, 4 record(s) to process" in done.stdout, done.stdout
