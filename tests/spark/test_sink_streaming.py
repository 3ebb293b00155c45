"""The sink under a real streaming query whose driver is killed with -9 and restarted.

Each run is ``tests/spark/sink_query.py`` in its own process group (driver, Spark JVM and
Python workers), restarted from the same checkpoint. The output is read back read_committed
and checked record by record against the input.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests import processes
from tests.runtime.harness import wait_until
from tests.spark.sink_harness import values

# Each test starts three or four Spark drivers (one after the other, or two side by side): on a
# loaded 2-core machine a start alone can take minutes. Every wait inside has its own deadline;
# this is the backstop.
pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]


def produce_inputs(bootstrap: str, topic: str, count: int, partitions: int) -> list[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    inputs = [f"r{i:05d}" for i in range(count)]
    for i, value in enumerate(inputs):
        producer.produce(topic, key=f"k{i % 50}".encode(), value=value.encode(),
                         partition=i % partitions)  # fmt: skip
    assert producer.flush(30) == 0
    return [v.upper() for v in inputs]


class Query:
    """One streaming query's command line; each ``start`` is a fresh driver process."""

    def __init__(self, tmp_path: Path, **options: object) -> None:
        self.progress = tmp_path / "progress.log"
        self.argv = [sys.executable, "-m", "tests.spark.sink_query",
                     "--checkpoint", str(tmp_path / "checkpoint"),
                     "--progress", str(self.progress)]  # fmt: skip
        for name, value in options.items():
            self.argv += [f"--{name.replace('_', '-')}", str(value)]
        self.log = (tmp_path / "driver.log").open("a")

    def start(self) -> subprocess.Popen:
        """A fresh driver in a process group of its own (driver, Spark JVM, Python workers)."""
        return processes.spawn(self.argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
                               what="a streaming query (tests.spark.sink_query)")  # fmt: skip

    def events(self) -> list[str]:
        return self.progress.read_text().splitlines() if self.progress.exists() else []


def kill_group(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def kill_mid_batch(query: Query, driver: subprocess.Popen, rng: random.Random) -> None:
    """Kill the driver's whole group part-way through a batch (after its start, before its end).

    The driver is frozen at a random moment after a batch began; if that batch had already
    ended by then, the driver runs on to its next batch and is tried again.
    """
    seen = len(query.events())
    deadline = time.monotonic() + 300
    while True:
        # Wait for a batch to begin after the ones already looked at, then let it run a little.
        wait_until(lambda s=seen: any(e.startswith("start") for e in query.events()[s:]),
                   max(1.0, deadline - time.monotonic()), "the query to begin a batch",
                   interval_s=0.05)  # fmt: skip
        time.sleep(rng.uniform(0.0, 0.6))
        os.killpg(driver.pid, signal.SIGSTOP)  # freeze, then look: is a batch in progress?
        events = query.events()
        if events[-1].startswith("start"):
            kill_group(driver)
            return
        assert driver.poll() is None, f"the query ended before it could be killed: {events}"
        seen = len(events)
        os.killpg(driver.pid, signal.SIGCONT)  # between batches: let it run to the next one


def test_query_killed_mid_batch_and_restarted_writes_each_record_once(
    bootstrap_servers, topic_factory, unique_name, tmp_path
) -> None:
    source, out = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    # Four batches of 150: both kills land in a run's first batch (the slowest, a fresh
    # driver's), and the later batches are spares should a kill find no batch under way.
    expected = produce_inputs(bootstrap_servers, source, 600, 2)
    query = Query(tmp_path, bootstrap=bootstrap_servers, input=source, output=out,
                  sink="fluvial", sink_id=unique_name("sink"), max_offsets=150)  # fmt: skip
    rng = random.Random(9)
    for _ in range(2):
        kill_mid_batch(query, query.start(), rng)

    final = query.start()
    assert final.wait(300) == 0, "the last run should catch up and stop by itself"
    output = values(bootstrap_servers, out)
    duplicates = {v: n for v, n in Counter(output).items() if n > 1}
    assert not duplicates
    assert sorted(output) == sorted(expected)


def test_crash_after_writes_before_spark_commit_duplicates_with_spark_sink_not_with_fluvial(
    bootstrap_servers, topic_factory, unique_name, tmp_path
) -> None:
    queries, outputs, expected = {}, {}, {}
    for sink in ("spark", "fluvial"):
        work = tmp_path / sink
        work.mkdir()
        source, outputs[sink] = topic_factory(f"in-{sink}"), topic_factory(f"out-{sink}")
        expected[sink] = produce_inputs(bootstrap_servers, source, 600, 1)
        queries[sink] = Query(work, bootstrap=bootstrap_servers, input=source,
                              output=outputs[sink], sink=sink, sink_id=unique_name("sink"),
                              max_offsets=200, crash_after_batch=1,
                              crash_flag=work / "crashed")  # fmt: skip

    # The two sinks' queries share nothing: their runs go side by side, and each restarts as
    # soon as its first run has died right after batch 1's writes.
    crashed = {sink: query.start() for sink, query in queries.items()}
    restarted: dict[str, subprocess.Popen] = {}

    def restart_each_crashed() -> bool:
        for sink, run in crashed.items():
            if sink not in restarted and run.poll() is not None:
                assert run.returncode == -signal.SIGKILL, sink
                assert queries[sink].events() == ["start 0", "done 0", "start 1", "done 1"]
                restarted[sink] = queries[sink].start()
        return len(restarted) == len(crashed)

    wait_until(restart_each_crashed, 600, "both queries to die after batch 1", interval_s=0.1)
    outcomes = {}
    for sink, run in restarted.items():
        assert run.wait(300) == 0, sink  # Spark replays batch 1, then runs batch 2
        assert queries[sink].events()[4:] == ["start 1", "done 1", "start 2", "done 2"]
        output = Counter(values(bootstrap_servers, outputs[sink]))
        assert set(output) == set(expected[sink])
        outcomes[sink] = sum(n - 1 for n in output.values())

    # Spark's writer wrote batch 1 (200 records) twice; fluvial's sink skipped the replay.
    assert outcomes == {"spark": 200, "fluvial": 0}
