"""The fault matrix on three brokers: kill -9 of the app and of a partition leader, a SIGSTOP
zombie, while input flows. Each fault kind is its own scenario, checked record by record."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.kafka.local import LocalKafka
from fluvial.verify.check import VerifyReport, verify_outputs
from fluvial.verify.matrix import MatrixReport, run_matrix

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def assert_clean(report: MatrixReport, faults_per_kind: int, records: int) -> None:
    for scenario in report.scenarios:
        detail = (scenario.summary(), scenario.problems)
        assert scenario.injected == faults_per_kind, detail
        assert scenario.records == records, detail
        counts = (scenario.duplicates, scenario.lost, scenario.bad_revisions, scenario.wrong_finals)
        assert counts == (0, 0, 0, 0), detail
        assert scenario.verdict == "PASS", detail
    assert report.verdict == "PASS"


def test_exactly_once_under_app_kills_and_zombies(
    three_brokers: LocalKafka, tmp_path: Path
) -> None:
    report = run_matrix(seed=42, records=1500, faults=("kill-app", "zombie"), fault_count=2,
                        duration_s=20, commit_interval_ms=300, cluster=three_brokers,
                        work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=2, records=1500)
    # One row per fault kind with its own numbers, then the overall verdict.
    rows = report.table_rows()
    assert [r[:3] for r in rows] == [
        ("kill-app", "2", "1500"), ("zombie", "2", "1500"), ("all", "4", "3000"),
    ]  # fmt: skip


def test_exactly_once_under_leader_kills(three_brokers: LocalKafka, tmp_path: Path) -> None:
    """The first kill takes the broker that also coordinates the app's group: the Kafka client
    can then hang in send offsets, and the slot must get past it on its own (within about
    40 s, hence the long input)."""
    report = run_matrix(seed=42, records=1500, faults=("kill-broker",), fault_count=2,
                        duration_s=80, commit_interval_ms=300, cluster=three_brokers,
                        work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=2, records=1500)


def test_kills_inside_long_open_transactions(three_brokers: LocalKafka, tmp_path: Path) -> None:
    """A 3 s commit interval: every kill lands with a transaction open."""
    report = run_matrix(seed=7, records=1500, faults=("kill-app",), fault_count=3,
                        duration_s=30, commit_interval_ms=3000, cluster=three_brokers,
                        work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=3, records=1500)


def test_at_least_once_loses_nothing(three_brokers: LocalKafka, tmp_path: Path) -> None:
    report = run_matrix(seed=3, records=1500, guarantee="at_least_once", fault_count=2,
                        faults=("kill-app", "kill-broker"), duration_s=25,
                        commit_interval_ms=1000, cluster=three_brokers,
                        work_dir=tmp_path)  # fmt: skip
    for scenario in report.scenarios:
        assert scenario.injected == 2, scenario.problems
        assert scenario.lost == 0 and scenario.wrong_finals == 0, scenario.problems
    assert report.verdict == "PASS"


@pytest.mark.spark
def test_exactly_once_on_spark_under_worker_and_driver_kills(
    three_brokers: LocalKafka, tmp_path: Path
) -> None:
    """kill -9 of the PySpark worker running a slot (Spark retries the task, which fences the
    killed attempt), and kill -9 of the driver's whole process group (JVM and workers too)."""
    workers = run_matrix(seed=11, engine="spark", faults=("kill-spark-worker",), records=1000,
                         fault_count=2, duration_s=30, commit_interval_ms=500,
                         spark_lease_ms=2500, cluster=three_brokers,
                         work_dir=tmp_path / "workers")  # fmt: skip
    assert_clean(workers, faults_per_kind=2, records=1000)
    # The kills were task failures that Spark itself retried within their lease.
    assert workers.scenarios[0].task_retries >= 1, workers.scenarios[0]
    # A driver restart costs a JVM start: the input flows long enough for two of them.
    drivers = run_matrix(seed=11, engine="spark", faults=("kill-app",), records=1500,
                         fault_count=2, duration_s=75, commit_interval_ms=500,
                         spark_lease_ms=2500, cluster=three_brokers,
                         work_dir=tmp_path / "drivers")  # fmt: skip
    assert_clean(drivers, faults_per_kind=2, records=1500)


def test_faults_must_apply_to_the_engine() -> None:
    with pytest.raises(ValueError, match="kill-spark-worker"):
        run_matrix(engine="local", faults=("kill-spark-worker",))
    with pytest.raises(ValueError, match="zombie"):
        run_matrix(engine="spark", faults=("zombie",))


def test_the_verifier_catches_a_duplicate(bootstrap_servers: str, topic_factory) -> None:
    """The checker itself must fail on a doubled echo record and a skipped revision."""
    from confluent_kafka import Producer

    from fluvial import serdes

    long = serdes.long()
    inp, echo, agg = topic_factory("in"), topic_factory("echo"), topic_factory("agg")
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for topic in (inp, echo):
        producer.produce(topic, key=b"k1", value=long.serialize(None, 5))
    producer.produce(echo, key=b"k1", value=long.serialize(None, 5))  # a duplicate
    producer.produce(agg, key=b"k1", value=b'{"sum": 5, "count": 1, "min": 5, "max": 5}')
    producer.produce(agg, key=b"k1", value=b'{"sum": 10, "count": 2, "min": 5, "max": 5}')
    assert producer.flush(10) == 0
    report = VerifyReport("none", 0, "exactly_once_v2", "local", 0)
    verify_outputs(bootstrap_servers, inp, echo, agg, True, report)
    assert report.duplicates == 1 and report.bad_revisions == 1 and report.wrong_finals == 1
    assert report.verdict == "FAIL"
