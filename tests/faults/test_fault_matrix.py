"""The fault matrix on three brokers: kill -9 of the app and of a partition leader, a SIGSTOP
zombie (on both engines), while input flows. Each fault kind is its own scenario, checked record by record.

The scenarios count faults, not seconds: every --duration-s here is far shorter than the faults
take, and the input runs on until each fault has been injected and recovered from. Each test
gives its scenarios an explicit timeout, inside pytest's, so a hang fails with the scenario's
own error naming what it waited for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.kafka.local import LocalKafka
from fluvial.verify.check import VerifyReport, input_repeats, verify_outputs
from fluvial.verify.matrix import MatrixReport, run_matrix

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def assert_clean(report: MatrixReport, faults_per_kind: int, min_records: int) -> None:
    for scenario in report.scenarios:
        detail = (scenario.summary(), scenario.problems)
        assert scenario.injected == faults_per_kind, detail
        # The input ran on past its minimum while the faults took their time, and the check
        # covered every record the producer had acknowledged.
        assert scenario.records >= min_records, detail
        assert scenario.records == scenario.produced + scenario.input_duplicates, detail
        counts = (scenario.duplicates, scenario.lost, scenario.bad_revisions, scenario.wrong_finals)
        assert counts == (0, 0, 0, 0), detail
        assert scenario.problems == [], detail
        assert scenario.verdict == "PASS", detail
    assert report.verdict == "PASS"


@pytest.mark.timeout(900)
def test_exactly_once_under_app_kills_and_zombies(
    three_brokers: LocalKafka, tmp_path: Path
) -> None:
    report = run_matrix(seed=42, records=600, faults=("kill-app", "zombie"), fault_count=2,
                        duration_s=5, timeout_s=360, commit_interval_ms=300,
                        cluster=three_brokers, work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=2, min_records=600)
    # One row per fault kind with its own numbers, then the overall verdict.
    kill_app, zombie = report.scenarios
    assert report.table_rows() == [
        ("kill-app", "2", str(kill_app.records), "0", "0", "PASS"),
        ("zombie", "2", str(zombie.records), "0", "0", "PASS"),
        ("all", "4", str(kill_app.records + zombie.records), "0", "0", "PASS"),
    ]


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_exactly_once_under_leader_kills(three_brokers: LocalKafka, tmp_path: Path) -> None:
    """The first kill takes the broker that also coordinates the app's group: the Kafka client
    can then hang in send offsets, and the slot must get past it on its own (its deadline is
    30 s). Each kill counts only once the broker is back in sync and the app commits again."""
    report = run_matrix(seed=42, records=600, faults=("kill-broker",), fault_count=2,
                        duration_s=5, timeout_s=480, commit_interval_ms=300,
                        cluster=three_brokers, work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=2, min_records=600)


@pytest.mark.soak
@pytest.mark.timeout(600)
def test_kills_inside_long_open_transactions(three_brokers: LocalKafka, tmp_path: Path) -> None:
    """A 3 s commit interval: every kill lands with a transaction open."""
    report = run_matrix(seed=7, records=600, faults=("kill-app",), fault_count=2,
                        duration_s=5, timeout_s=480, commit_interval_ms=3000,
                        cluster=three_brokers, work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=2, min_records=600)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_at_least_once_loses_nothing(three_brokers: LocalKafka, tmp_path: Path) -> None:
    report = run_matrix(seed=3, records=600, guarantee="at_least_once", fault_count=1,
                        faults=("kill-app", "kill-broker"), duration_s=5, timeout_s=360,
                        commit_interval_ms=1000, cluster=three_brokers,
                        work_dir=tmp_path)  # fmt: skip
    for scenario in report.scenarios:
        detail = (scenario.summary(), scenario.problems)
        assert scenario.injected == 1, detail
        assert (
            scenario.records >= 600
            and scenario.records == scenario.produced + scenario.input_duplicates
        ), detail
        assert scenario.lost == 0 and scenario.wrong_finals == 0, detail
    assert report.verdict == "PASS"


@pytest.mark.soak
@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_exactly_once_on_spark_under_worker_and_driver_kills(
    three_brokers: LocalKafka, tmp_path: Path
) -> None:
    """kill -9 of the PySpark worker running a slot (Spark retries the task, which fences the
    killed attempt), and kill -9 of the driver's whole process group (JVM and workers too)."""
    workers = run_matrix(seed=11, engine="spark", faults=("kill-spark-worker",), records=500,
                         fault_count=2, duration_s=5, timeout_s=420, commit_interval_ms=500,
                         spark_lease_ms=2500, cluster=three_brokers,
                         work_dir=tmp_path / "workers")  # fmt: skip
    assert_clean(workers, faults_per_kind=2, min_records=500)
    # The kills were task failures that Spark itself retried within their lease.
    assert workers.scenarios[0].task_retries >= 1, workers.scenarios[0]
    # A driver restart costs a JVM start (up to a minute here), and the input waits for it:
    # one here; `fluvial verify --engine spark` runs more.
    drivers = run_matrix(seed=11, engine="spark", faults=("kill-app",), records=500,
                         fault_count=1, duration_s=5, timeout_s=480, commit_interval_ms=500,
                         spark_lease_ms=2500, cluster=three_brokers,
                         work_dir=tmp_path / "drivers")  # fmt: skip
    assert_clean(drivers, faults_per_kind=1, min_records=500)


@pytest.mark.soak
@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_exactly_once_on_spark_under_zombie_drivers(
    three_brokers: LocalKafka, tmp_path: Path
) -> None:
    """SIGSTOP of the driver's whole process group, a second driver takes over, then SIGCONT:
    the first stops by itself (its epoch was fenced) and nothing is lost or counted twice."""
    report = run_matrix(seed=13, engine="spark", faults=("zombie",), records=500,
                        fault_count=1, duration_s=5, timeout_s=600, commit_interval_ms=500,
                        spark_lease_ms=2500, cluster=three_brokers,
                        work_dir=tmp_path)  # fmt: skip
    assert_clean(report, faults_per_kind=1, min_records=500)


def test_a_scenario_past_its_timeout_says_what_it_waited_for(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """No app starts within 0.2 s: the scenario fails with an error that names the stage and
    the condition not seen, and stops the app it started."""
    report = run_matrix(seed=1, records=10, faults=("kill-app",), fault_count=1, duration_s=0.1,
                        timeout_s=0.2, bootstrap_servers=bootstrap_servers,
                        work_dir=tmp_path)  # fmt: skip
    (scenario,) = report.scenarios
    assert scenario.verdict == "FAIL" and report.verdict == "FAIL"
    assert scenario.injected == 0
    (problem,) = scenario.problems
    assert problem.startswith("at start-up: not seen within the scenario's 0.2 s timeout: "
                              "the app reported it was running."), problem  # fmt: skip
    assert "raise --timeout-s" in problem
    assert list((tmp_path / "kill-app").glob("app-*.log")), "the app was started"
    assert _processes_with_state_under(tmp_path) == []


def _processes_with_state_under(root: Path) -> list[int]:
    """Live processes whose environment points the verify app's state below ``root``."""
    marker = f"FLUVIAL_VERIFY_STATE_DIR={root}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_faults_must_apply_to_the_engine() -> None:
    with pytest.raises(ValueError, match="kill-spark-worker"):
        run_matrix(engine="local", faults=("kill-spark-worker",))
    with pytest.raises(ValueError, match="kill-spark-worker"):
        run_matrix(engine="local", faults=("zombie", "kill-spark-worker"))
    with pytest.raises(ValueError, match="must exceed duration_s"):
        run_matrix(duration_s=60, timeout_s=30)


def test_the_verifier_catches_a_duplicate(bootstrap_servers: str, topic_factory) -> None:
    """The checker itself must fail on a doubled echo record and a skipped revision."""
    from confluent_kafka import Producer

    from fluvial import serdes

    long = serdes.long()
    inp, echo, agg = topic_factory("in"), topic_factory("echo"), topic_factory("agg")
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
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


def test_the_verifier_catches_input_the_brokers_lost(bootstrap_servers: str, topic_factory) -> None:
    """The oracle is the input the producer had acknowledged: an acknowledged record missing
    from the input topic fails the check, even when the outputs match the topic."""
    from confluent_kafka import Producer

    from fluvial import serdes

    long = serdes.long()
    inp, echo, agg = topic_factory("in"), topic_factory("echo"), topic_factory("agg")
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for topic in (inp, echo):
        producer.produce(topic, key=b"k1", value=long.serialize(None, 5))
    producer.produce(agg, key=b"k1", value=b'{"sum": 5, "count": 1, "min": 5, "max": 5}')
    assert producer.flush(10) == 0
    report = VerifyReport("none", 0, "exactly_once_v2", "local", 0)
    verify_outputs(bootstrap_servers, inp, echo, agg, True, report, sent={"k1": [5, 7]})
    assert (report.produced, report.records) == (2, 1)
    assert (report.duplicates, report.lost, report.bad_revisions, report.wrong_finals) == (0,) * 4
    assert report.problems == [
        "input of k1: the topic holds 1 records, the producer had 2 acknowledged"
    ]
    assert report.verdict == "FAIL"
    # The same outputs against the input as acknowledged pass.
    clean = VerifyReport("none", 0, "exactly_once_v2", "local", 0)
    verify_outputs(bootstrap_servers, inp, echo, agg, True, clean, sent={"k1": [5]})
    assert clean.verdict == "PASS" and clean.produced == 1


def test_the_verifier_catches_a_bucket_counted_twice(bootstrap_servers: str, topic_factory) -> None:
    """Each bucket's final aggregate is checked against its keys' input: a record counted twice
    there (a restart that took a merged partition's records again) fails the check."""
    from confluent_kafka import Producer

    from fluvial import serdes
    from fluvial.verify.check import bucket_of

    long = serdes.long()
    inp, echo, agg, buckets = (topic_factory(n) for n in ("in", "echo", "agg", "buckets"))
    keys = [k for k in (f"k{n}" for n in range(50)) if bucket_of(k) == bucket_of("k1")][:2]
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for key, value in zip(keys, (5, 7), strict=True):
        for topic in (inp, echo):
            producer.produce(topic, key=key.encode(), value=long.serialize(None, value))
        producer.produce(agg, key=key.encode(),
                         value=f'{{"sum": {value}, "count": 1, "min": {value}, "max": {value}}}'.encode())  # fmt: skip
    bucket = bucket_of("k1").encode()
    producer.produce(buckets, key=bucket, value=b'{"sum": 5, "count": 1, "min": 5, "max": 5}')
    producer.produce(buckets, key=bucket, value=b'{"sum": 12, "count": 2, "min": 5, "max": 7}')
    assert producer.flush(10) == 0
    right = VerifyReport("none", 0, "exactly_once_v2", "local", 0)
    verify_outputs(bootstrap_servers, inp, echo, agg, True, right, bucket_topic=buckets)
    assert right.verdict == "PASS"
    producer.produce(buckets, key=bucket, value=b'{"sum": 19, "count": 3, "min": 5, "max": 7}')
    assert producer.flush(10) == 0
    doubled = VerifyReport("none", 0, "exactly_once_v2", "local", 0)
    verify_outputs(bootstrap_servers, inp, echo, agg, True, doubled, bucket_topic=buckets)
    assert doubled.wrong_finals == 1 and doubled.verdict == "FAIL"
    assert doubled.problems == [
        f"{bucket.decode()}: final {{'sum': 19, 'count': 3, 'min': 5, 'max': 7}} "
        "!= oracle {'sum': 12, 'count': 2, 'min': 5, 'max': 7}"
    ]


def test_input_repeats_of_acknowledged_records_are_input_missing_ones_are_not() -> None:
    """A broker kill can make the idempotent input producer write a batch twice: the repeats
    are input (the app must process them exactly once too), never a lost record."""
    assert input_repeats([5, 7, 9], [5, 7, 9]) == 0
    assert input_repeats([5, 7, 9], [5, 7, 5, 7, 9]) == 2  # a batch written twice
    assert input_repeats([5, 7, 9], [5, 9]) is None  # an acknowledged record lost
    assert input_repeats([5, 7, 9], [5, 7, 9, 11]) is None  # a record nobody acknowledged
    assert input_repeats([5, 7, 9], [5, 9, 7]) is None  # out of order
    assert input_repeats([], []) == 0
