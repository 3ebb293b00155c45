"""A real multi-executor Spark cluster: a standalone master and two workers on this machine.

Each worker keeps its executors' local state in its own directory (as two machines would).
``kill -9`` of the worker JVM that runs the slot loses its executor; Spark runs the slot on
the other worker, which restores the state from the changelog, and the output still equals
the oracle.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.iq.harness import (
    STORE,
    ServedRunner,
    ask,
    counts_of,
    in_grace_views,
    standbys_caught_up,
)
from tests.runtime.harness import (
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    read_topic,
    wait_until,
)
from tests.spark.standalone import StandaloneCluster
from tests.spark.standalone import standalone_cluster as start_standalone_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    with start_standalone_cluster(tmp_path) as cluster:
        yield cluster


@pytest.mark.soak
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


def test_executor_loss_promotes_the_standby_on_the_other_worker(
    standalone_cluster: StandaloneCluster,
    bootstrap_servers: str,
    topic_factory,
    unique_name,
    tmp_path: Path,
) -> None:
    """With a standby per task, the slot lost with its executor lands on the worker that kept
    its tasks' standbys: it takes their copies over and restores almost nothing, where without
    standbys it replays its whole changelog (the test above)."""
    views = in_grace_views(seed=17, count=5000)
    oracle = counts_of(views)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "driver", engine="spark",
                          master=standalone_cluster.master_url, commit_ms=300,
                          extra_env={"FLUVIAL_SPARK_CONF": "spark.executor.memory=512m",
                                     "FLUVIAL_TEST_STANDBYS": "1"},
                          # The survivor's one core runs both slots' leases one after the
                          # other: stopping on a lease's commit takes two leases and more.
                          stop_timeout_s=90)  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()
        # Paced: each chunk's counts are committed before the next is sent, so the changelog
        # spans 10 commits and more (a commit logs each key it changed once).
        for end in range(400, 4001, 400):
            produce(bootstrap_servers, runner.input_topic, views[end - 400 : end])
            wait_until(
                lambda n=end: dict(read_revisions(bootstrap_servers, runner.output_topic))
                == counts_of(views[:n]),
                180, f"the committed output to reach the oracle of the first {end} views",
            )  # fmt: skip
        store_tasks = {"0": ["1_1", "1_3"], "1": ["1_0", "1_2"]}
        wait_until(lambda: standbys_caught_up(runner.port, store_tasks), 120,
                   "every standby's lag to reach 0", interval_s=1)  # fmt: skip

        def holder(slot: int) -> str | None:
            """The worker whose Python process ran the slot's last lease."""
            [pid] = [s["pid"] for s in _leases(runner)[-1]["slots"] if s["slot"] == slot]
            for name, state_dir in standalone_cluster.state_dirs.items():
                with contextlib.suppress(OSError):
                    path = state_dir / runner.app_id / ".slots" / f"slot-{slot}.pid"
                    if path.read_text() == str(pid):
                        return name
            return None

        lost = holder(0)
        assert lost is not None and holder(1) not in (None, lost), "one slot per worker"
        survivor = next(n for n in standalone_cluster.state_dirs if n != lost)
        copies = standalone_cluster.state_dirs[survivor] / runner.app_id / "standby" / "slot-1"
        assert {p.name for p in copies.iterdir()} >= {"1_0", "1_2"}, "slot 1 keeps slot 0's"
        changelog = f"{runner.app_id}-{STORE}-changelog"
        records = {p: len(read_topic(bootstrap_servers, changelog, partition=p)) for p in (0, 2)}
        slot0_records = sum(records.values())
        assert slot0_records > 100
        kept = [f"1_{p}" for p, n in records.items() if n]  # a task with no key keeps nothing
        leases_before = len(_leases(runner))

        standalone_cluster.workers[lost].send_signal(signal.SIGKILL)  # executor loss
        produce(bootstrap_servers, runner.input_topic, views[4000:])
        wait_until(lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                   240, "the committed output to reach the oracle")  # fmt: skip
        check_revisions_exactly_once(read_revisions(bootstrap_servers, runner.output_topic),
                                     oracle)  # fmt: skip
        for (category, start), count in sorted(oracle.items()):
            answer = ask(runner.port, f"/stores/{STORE}/keys/{category}?time={start}")
            assert answer.status == 200 and answer.body["value"] == count, answer.body

        # Slot 0's tasks now run on the survivor, in the directories of the standby copies.
        state = standalone_cluster.state_dirs[survivor] / runner.app_id
        assert (state / ".slots" / "slot-0.pid").exists()
        assert not any((copies / task).exists() for task in kept), "copies taken over"
        after = _leases(runner)[leases_before:]
        restored = sum(s["restored"] for lease in after for s in lease["slots"])
        moved = [s for lease in after for s in lease["slots"] if not s["reused"]]
        assert moved, f"the slot never started again: {after}"
        assert restored <= 0.2 * slot0_records, (restored, slot0_records, after)
        assert runner.stop() == 0, runner.output()[-5000:]
    finally:
        if runner.alive():
            runner.kill9()


def _leases(runner: ServedRunner) -> list[dict]:
    path = runner.state_dir / runner.app_id / "leases.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [lease for lease in map(json.loads, lines) if "slots" in lease]
