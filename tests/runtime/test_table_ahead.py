"""A table whose timestamps run ahead of its stream (docs/semantics.md, "Tables and event time").

Readings (3 partitions) carry their event time in the payload, about 20 minutes back; the
``sensors`` table (3 partitions) is written with ordinary producer timestamps, i.e. now.
Readings join the table, are re-keyed by site and go into a 1-minute windowed max with 30 s of
grace (tests/runtime/apps/table_ahead.py).

- Live, with the whole table read before the readings arrive, every reading finds its sensor
  and every window must equal the oracle: the table's wall-clock time must not count as the
  upstream tasks' progress on the repartition topic, or the downstream windows close early.
- As a backlog, each reading is processed before the table rows, which are newer: every
  reading misses the table (Kafka Streams' semantics), the same way on every run, and the
  join says so in a warning and a metric.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import serdes
from fluvial.kafka import free_port
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.partitioner import default_partition
from tests.runtime.apps import table_ahead as app
from tests.runtime.harness import (
    SparkRunner,
    committed_offset,
    flush,
    read_topic,
    scrape,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = Path(app.__file__)
PARTITIONS = 3
SENSORS, SITES = 24, 12
WINDOW_KEY = serdes.time_windowed(serdes.string(), app.WINDOW_MS)
LONG = serdes.long()
MISSES = "fluvial_node_join_misses_before_table_total"

Reading = tuple[str, int, int]  # sensor, event time, value


def site_of(sensor: int) -> str:
    return f"site-{sensor % SITES}"


def sensors_by_partition() -> list[list[str]]:
    """The sensors whose readings (and table rows) land in each partition."""
    found: list[list[str]] = [[] for _ in range(PARTITIONS)]
    for sensor in range(SENSORS):
        name = f"sensor-{sensor:02d}"
        found[default_partition(name.encode(), PARTITIONS)].append(name)
    assert all(found), found
    return found


def generate(seed: int, count: int) -> list[Reading]:
    """Readings over about 9 minutes of event time starting 20 minutes back, in time order
    but for a disorder of up to 10 s (grace is 30 s): no reading is late by its own order.
    They go to the partitions in turn, so that paced, every partition gets readings as often."""
    rng = random.Random(seed)
    placed = sensors_by_partition()
    now = int(time.time() * 1000)
    clock = now - 20 * 60_000
    clock -= clock % 60_000
    readings = []
    for i in range(count):
        clock += rng.randint(0, 3600)
        ts = clock - rng.randint(0, 10_000) if rng.random() < 0.2 else clock
        readings.append((rng.choice(placed[i % PARTITIONS]), ts, rng.randint(0, 1000)))
    return readings


def oracle(readings: list[Reading]) -> dict[tuple[str, int], int]:
    """Every reading joined: the max per (site, window start)."""
    best: dict[tuple[str, int], int] = defaultdict(lambda: -1)
    for sensor, ts, value in readings:
        window = (site_of(int(sensor.split("-")[1])), ts - ts % app.WINDOW_MS)
        best[window] = max(best[window], value)
    return dict(best)


def producer(bootstrap: str) -> Producer:
    # Keyed records land where Java's partitioner puts them: co-partitioned with the table.
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "partitioner": "murmur2_random"})  # fmt: skip


def produce_sensors(bootstrap: str, topic: str) -> None:
    """The table, stamped by the producer with the wall clock."""
    p = producer(bootstrap)
    for sensor in range(SENSORS):
        p.produce(topic, key=f"sensor-{sensor:02d}".encode(),
                  value=json.dumps({"site": site_of(sensor)}).encode())  # fmt: skip
    flush(p)


def produce_readings(
    bootstrap: str, topic: str, readings: list[Reading], *, chunk: int, pace_s: float
) -> None:
    """``chunk`` readings at a time, ``pace_s`` apart; the producer stamps them now, their
    event time is in the payload."""
    p = producer(bootstrap)
    for start in range(0, len(readings), chunk):
        for sensor, ts, value in readings[start : start + chunk]:
            p.produce(topic, key=sensor.encode(), value=json.dumps({"ts": ts, "v": value}).encode())
        p.poll(0)
        time.sleep(pace_s)
    flush(p)


def windows(bootstrap: str, out: str) -> dict[tuple[str, int], int]:
    """The last value of each window in the output, over every partition."""
    found = {}
    for partition in range(PARTITIONS):
        for m in read_topic(bootstrap, out, partition=partition):
            w = WINDOW_KEY.deserialize(None, m.key())
            found[(w.key, w.window.start_ms)] = LONG.deserialize(None, m.value())
    return found


def make_topics(bootstrap: str, unique_name, label: str) -> tuple[str, str, str]:  # noqa: ANN001
    """Readings, sensors and output topics, each with PARTITIONS partitions."""
    names = unique_name(f"{label}-readings"), unique_name(f"{label}-sensors"), unique_name(label)
    create_topics(bootstrap, [TopicSpec(n, PARTITIONS) for n in names])
    return names


def start(engine: str, bootstrap: str, app_id: str, topics: tuple[str, ...],
          state_dir: Path, prometheus_port: int | None = None) -> SparkRunner:  # fmt: skip
    """The app on ``engine``: on the local engine one worker per partition, on Spark short
    leases, so that upstream and downstream tasks run apart and pause apart."""
    readings, sensors, out = topics
    runner = SparkRunner(bootstrap, app_id, readings, out, state_dir, engine=engine, app=APP,
                         lease_ms=2000, commit_ms=100,
                         extra_env={"FLUVIAL_TEST_TABLE": sensors})  # fmt: skip
    runner.start(prometheus_port=prometheus_port)
    runner.wait_ready(240)
    return runner


def consumed(bootstrap: str, group: str, topic: str, ends: list[int]) -> bool:
    return all(committed_offset(bootstrap, group, topic, p) >= end for p, end in enumerate(ends))


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    return [len(read_topic(bootstrap, topic, partition=p)) for p in range(PARTITIONS)]


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_table_read_first_never_makes_readings_late(
    engine: str, bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    readings = generate(seed=35, count=300)
    expected = oracle(readings)
    topics = make_topics(bootstrap_servers, unique_name, "live")
    app_id = unique_name("live")
    runner = start(engine, bootstrap_servers, app_id, topics, tmp_path / app_id)
    try:
        produce_sensors(bootstrap_servers, topics[1])
        # The whole table is read (and committed) before the first reading is written.
        sensor_ends = end_offsets(bootstrap_servers, topics[1])
        wait_until(lambda: consumed(bootstrap_servers, app_id, topics[1], sensor_ends), 240,
                   "the application to read the whole table")  # fmt: skip
        # Paced: one reading per partition every 0.3 s at first (no writer falls idle), then
        # fast, about 500 times real time. Before the fix the upstream tasks, whose stream time
        # was the table's "now", held nothing back: whichever wrote first closed the windows
        # of the others' readings.
        warm_up = 30
        produce_readings(bootstrap_servers, topics[0], readings[:warm_up], chunk=1, pace_s=0.1)
        produce_readings(bootstrap_servers, topics[0], readings[warm_up:], chunk=15, pace_s=0.05)
        # Until every window is right, or a reading is dropped as late (none may be).
        wait_until(lambda: windows(bootstrap_servers, topics[2]) == expected
                   or "dropping record" in runner.output(), 240,
                   f"every window to equal the oracle ({engine})")  # fmt: skip
        found = windows(bootstrap_servers, topics[2])
        wrong = {w: (found.get(w), v) for w, v in expected.items() if found.get(w) != v}
        dropped = [line for line in runner.output().splitlines() if "dropping" in line]
        assert not wrong and not dropped, (
            f"{len(expected) - len(wrong)} of {len(expected)} windows right; wrong "
            f"(found, expected): {list(wrong.items())[:5]}\n" + "\n".join(dropped[-10:])
        )
    finally:
        code = runner.stop()
    assert code == 0, runner.output()[-3000:]


def run_backlog(
    engine: str, bootstrap: str, topics: tuple[str, str], app_id: str, out: str, state_dir: Path
) -> tuple[dict[tuple[str, int], int], float, list[str]]:
    """One run over the backlog, to its end: its windows, the join-miss metric, its warnings."""
    create_topics(bootstrap, [TopicSpec(out, PARTITIONS)])
    reading_ends = end_offsets(bootstrap, topics[0])
    port = free_port()
    runner = start(engine, bootstrap, app_id, (*topics, out), state_dir, port)
    try:
        wait_until(lambda: consumed(bootstrap, app_id, topics[0], reading_ends), 240,
                   f"every reading to be processed ({engine})")  # fmt: skip
        misses = wait_until(lambda: scrape(port).get(MISSES, 0) >= sum(reading_ends)
                            and scrape(port)[MISSES], 120,
                            "the join-miss metric to count every reading")  # fmt: skip
    finally:
        code = runner.stop()
    assert code == 0, runner.output()[-3000:]
    warnings = [line for line in runner.output().splitlines() if "is older than the table" in line]
    return windows(bootstrap, out), misses, warnings


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_backlog_misses_the_newer_table_the_same_way_every_run_and_says_why(
    engine: str, bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    readings = generate(seed=36, count=300)
    readings_topic, sensors, _ = make_topics(bootstrap_servers, unique_name, "backlog")
    produce_sensors(bootstrap_servers, sensors)
    produce_readings(bootstrap_servers, readings_topic, readings, chunk=len(readings), pace_s=0)
    results = []
    for run in range(2):
        app_id = unique_name(f"backlog-{run}")
        found, misses, warnings = run_backlog(
            engine, bootstrap_servers, (readings_topic, sensors), app_id,
            unique_name(f"backlog-{run}-out"), tmp_path / app_id,
        )  # fmt: skip
        results.append(found)
        assert misses == len(readings)
        # One warning per join and minute, naming the table, the gap and the ways out.
        assert 1 <= len(warnings) <= 3, warnings
        assert sensors in warnings[0] and "timestamp extractor" in warnings[0], warnings[0]
        assert "GlobalKTable" in warnings[0] and "versioned" in warnings[0], warnings[0]
    # Each reading is looked up as of its own time, before the newer table rows: none joins,
    # on every run, whatever the pace.
    assert results == [{}, {}]
