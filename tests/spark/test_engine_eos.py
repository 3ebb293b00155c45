"""Figure 2 on the Spark engine under exactly-once: Python workers and drivers killed with -9.

Every test drives ``fluvial run --engine spark --master local[2]`` as a real process against
the session's Kafka, and checks the committed output record by record against the oracle.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from tests.runtime.harness import (
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def final_values(revisions):  # noqa: ANN001, ANN201
    return dict(revisions)


def wait_for_oracle(runner: SparkRunner, oracle: dict, timeout_s: float = 150) -> None:
    def complete() -> bool:
        return final_values(read_revisions(runner.bootstrap, runner.output_topic)) == oracle

    wait_until(complete, timeout_s, "the committed output to reach the oracle's final counts")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_slot_worker(runner: SparkRunner, killed: list[int], slot: int = 0) -> None:
    """kill -9 the PySpark Python worker that runs the slot now (not one killed before)."""

    def running() -> int | None:
        pid = runner.slot_pid(slot)
        return pid if pid is not None and pid not in killed and alive(pid) else None

    pid = wait_until(running, 60, "a live Python worker to run the slot", interval_s=0.1)
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


def test_figure2_eos_on_spark_survives_python_worker_kill_9(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    rng = random.Random(5)
    views = generate_views(seed=5, count=3000)
    oracle, dropped = oracle_counts(views)
    assert dropped > 0
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("pageviews"),
                         topic_factory("counts"), tmp_path / "state", commit_ms=300)  # fmt: skip
    runner.start()
    runner.wait_ready(120)
    killed = []
    for i in range(0, len(views), 500):
        produce(bootstrap_servers, runner.input_topic, views[i : i + 500])
        time.sleep(rng.uniform(1.0, 3.0))
        if len(killed) < 4:
            # Leases last 2 s and commits come every 300 ms: most kills land mid-transaction.
            # One kill per completed lease, so Spark's retries (4 attempts) are never used up.
            completed = len(runner.leases())
            kill_slot_worker(runner, killed)
            wait_until(lambda n=completed: len(runner.leases()) > n, 90, "the lease to end")
    try:
        wait_for_oracle(runner, oracle)
    finally:
        assert runner.stop() == 0, runner.output()[-5000:]
    check_revisions_exactly_once(read_revisions(bootstrap_servers, runner.output_topic), oracle)
    leases = runner.leases()
    retried = [s for lease in leases for s in lease.get("slots", []) if s["attempt"] > 0]
    # Spark itself retried killed slot tasks within their lease; each retry started a fresh
    # Worker, which fenced the killed attempt's transactional id before restoring.
    assert retried, f"no Spark task retry recorded in {leases}"
    assert all(not s["reused"] for s in retried)
