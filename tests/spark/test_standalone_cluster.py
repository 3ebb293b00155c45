"""A real multi-executor Spark cluster: a standalone master and two workers on this machine.

Each worker keeps its executors' local state in its own directory (as two machines would).
``kill -9`` of the worker JVM that runs the slot loses its executor; Spark runs the slot on
the other worker, which restores the state from the changelog, and the output still equals
the oracle.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.iq.harness import STORE, ServedRunner, ask, counts_of, in_grace_views
from tests.runtime.harness import (
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    wait_until,
)
from tests.spark.standalone import StandaloneCluster
from tests.spark.standalone import standalone_cluster as start_standalone_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    with start_standalone_cluster(tmp_path) as cluster:
        yield cluster


def test_executor_loss_moves_slot_and_restores_from_changelog(
    standalone_cluster: StandaloneCluster,
    bootstrap_servers: str,
    topic_factory,
    unique_name,
    tmp_path: Path,
) -> None:
    views = generate_views(seed=13, count=3000)
    oracle, _dropped = oracle_counts(views)
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("pageviews"),
                         topic_factory("counts"), tmp_path / "driver", commit_ms=300,
                         master=standalone_cluster.master_url,
                         extra_env={"FLUVIAL_SPARK_CONF": "spark.executor.memory=512m"})  # fmt: skip
    runner.start()
    runner.wait_ready(120)
    produce(bootstrap_servers, runner.input_topic, views[:1500])

    def holder() -> str | None:
        """The worker whose executor runs the slot (its state directory has the slot's pid)."""
        for name, state_dir in standalone_cluster.state_dirs.items():
            if (state_dir / runner.app_id / ".slots" / "slot-0.pid").exists():
                return name
        return None

    first = wait_until(holder, 120, "the slot to run on a worker")
    wait_until(lambda: len([s for s in runner.leases() if "slots" in s]) >= 2, 120, "two leases")
    standalone_cluster.workers[first].send_signal(signal.SIGKILL)  # executor loss
    produce(bootstrap_servers, runner.input_topic, views[1500:])
    try:
        wait_until(
            lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
            180,
            "the committed output to reach the oracle's final counts",
        )
    finally:
        assert runner.stop() == 0, runner.output()[-5000:]
    check_revisions_exactly_once(read_revisions(bootstrap_servers, runner.output_topic), oracle)
    other = next(n for n in standalone_cluster.state_dirs if n != first)
    assert (standalone_cluster.state_dirs[other] / runner.app_id / ".slots" / "slot-0.pid").exists()
    leases = [lease for lease in runner.leases() if "slots" in lease]
    moved = [s for lease in leases for s in lease["slots"] if not s["reused"]]
    assert any(s["restored"] > 0 for s in moved), f"no restore from the changelog: {leases}"


def test_queries_route_to_the_executor_that_holds_each_key(
    standalone_cluster: StandaloneCluster,
    bootstrap_servers: str,
    topic_factory,
    unique_name,
    tmp_path: Path,
) -> None:
    """Two slots on two workers, each with its own state directory: the driver's endpoint
    answers every window of every key from the executor that holds it, equal to the oracle."""
    views = in_grace_views(seed=5, count=2000)
    oracle = counts_of(views)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "driver", engine="spark",
                          master=standalone_cluster.master_url,
                          extra_env={"FLUVIAL_SPARK_CONF": "spark.executor.memory=512m"})  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()
        produce(bootstrap_servers, runner.input_topic, views)
        wait_until(lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                   180, "the committed output to reach the oracle")  # fmt: skip
        # The executors keep their stores in the workers' directories, never the driver's: the
        # driver learns each slot's endpoint from the lease results alone.
        holders = {
            name
            for name, state_dir in standalone_cluster.state_dirs.items()
            if any((state_dir / runner.app_id / ".slots").glob("slot-*.endpoint"))
        }
        assert holders == {"worker-a", "worker-b"}, holders
        assert not (runner.state_dir / runner.app_id / ".slots").exists()
        slots = set()
        for (category, start), count in sorted(oracle.items()):
            answer = ask(runner.port, f"/stores/{STORE}/keys/{category}?time={start}")
            assert answer.status == 200, answer.body
            assert answer.body["value"] == count, (category, start, answer.body)
            slots.add(answer.body["slot"])
        assert slots == {0, 1}, "keys owned by each of the two slots are answered"
        everything = ask(runner.port, f"/stores/{STORE}/windows").body["windows"]
        assert {(w["key"], w["start"]): w["value"] for w in everything} == oracle
        assert runner.stop() == 0, runner.output()[-5000:]
    finally:
        if runner.alive():
            runner.kill9()
