"""The Spark engine as ``fluvial run`` drives it: same results as the local engine, warm state
across leases, speculation refused, and a driver killed with -9 resumes where it committed."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
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

from fluvial import StreamsConfig, serdes
from fluvial.errors import ConfigError
from fluvial.spark.engine import (
    SparkApplication,
    check_no_speculation,
    parse_spark_conf,
    with_task_retries,
)

REGROUP = Path(__file__).parent / "apps" / "regroup.py"


def test_speculation_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="spark.speculation=false"):
        check_no_speculation({"spark.speculation": "true"})
    check_no_speculation({"spark.speculation": "false"})
    check_no_speculation({})


def test_a_default_timestamp_extractor_outside_app_py_is_refused(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("def build(builder):\n    builder.stream('a').to('b')\n")
    config = StreamsConfig(default_timestamp_extractor=lambda record, partition_time: 0)
    with pytest.raises(ConfigError, match="must be set in app.py's own config"):
        SparkApplication(app, config)


def test_local_masters_retry_failed_slot_tasks() -> None:
    assert with_task_retries("local[*]") == "local[*,4]"
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local") == "local[1,4]"
    assert with_task_retries("local[2,3]") == "local[2,3]"
    assert with_task_retries("spark://host:7077") == "spark://host:7077"


@pytest.mark.kafka
def test_fluvial_run_refuses_speculation(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("in"),
                         topic_factory("out"), tmp_path / "state",
                         extra_env={"FLUVIAL_SPARK_CONF": "spark.speculation=true"})  # fmt: skip
    runner.start()
    assert runner.wait(120) == 1
    assert "spark.speculation=true would run a second copy" in runner.output()


@pytest.mark.kafka
def test_fluvial_run_refuses_a_missing_output_topic_before_anything_runs(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    missing = unique_name("counts")
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("in"), missing,
                         tmp_path / "state")  # fmt: skip
    runner.start()
    assert runner.wait(120) == 1
    output = runner.output()
    assert f"output topic '{missing}' does not exist" in output, output[-2000:]
    assert f"fluvial topics create {missing} --partitions 1" in output
    assert "task(s) on" not in output and runner.leases() == []  # no slot ran
    # Nothing made the topic behind the application's back (the broker creates none either).
    topics = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=10).topics
    assert missing not in topics


def test_spark_settings_are_an_option_of_fluvial_run() -> None:
    from typer.testing import CliRunner

    from fluvial.cli import app

    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--spark-conf" in shown.output and "spark-submit --conf" in shown.output
    refused = CliRunner().invoke(app, ["run", str(REGROUP), "--spark-conf", "spark.ui.port"])
    assert refused.exit_code != 0
    assert "--spark-conf entry 'spark.ui.port' is not KEY=VALUE" in refused.output
    assert parse_spark_conf(["spark.ui.port=4040", "a.b= c=d "]) == {
        "spark.ui.port": "4040", "a.b": "c=d",
    }  # fmt: skip


def final_counts(bootstrap: str, topic: str) -> dict[str, int]:
    final = {}
    for msg in read_topic(bootstrap, topic):
        final[msg.key().decode()] = serdes.long().deserialize(topic, msg.value())
    return final


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_spark_and_local_engines_give_the_same_output(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """Two sub-topologies (a repartition topic) over 2 input partitions: 4 tasks, 2 slots."""
    views = generate_views(seed=3, count=4000)
    input_topic = topic_factory("views", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for view in views:
        producer.produce(input_topic, key=view.key.encode(), value=view.value())
    assert producer.flush(30) == 0
    expected = dict(Counter(v.category for v in views))

    outputs = {}
    runners = {}
    for engine in ("local", "spark"):
        runner = SparkRunner(bootstrap_servers, unique_name(f"{engine}-app"), input_topic,
                             topic_factory(f"{engine}-counts"), tmp_path / engine, app=REGROUP,
                             engine=engine, commit_ms=200, lease_ms=1500)  # fmt: skip
        runner.start()
        runners[engine] = runner
    try:
        for engine, runner in runners.items():
            wait_until(
                lambda r=runner: final_counts(bootstrap_servers, r.output_topic) == expected,
                150,
                f"the {engine} engine to count every view",
            )
            outputs[engine] = final_counts(bootstrap_servers, runner.output_topic)
        # A few more leases with nothing to do: state must stay warm, not be restored again.
        spark = runners["spark"]
        wait_until(lambda: len(spark.leases()) >= 6, 60, "a few more leases")
    finally:
        for runner in runners.values():
            assert runner.stop() == 0, runner.output()[-5000:]
    assert outputs["spark"] == outputs["local"] == expected

    leases = [lease for lease in runners["spark"].leases() if "slots" in lease]
    assert {len(lease["slots"]) for lease in leases} == {2}, "two partitions give two slots"
    assert all(sorted(s["slot"] for s in lease["slots"]) == [0, 1] for lease in leases), leases
    later = [slot for lease in leases[1:] for slot in lease["slots"]]
    # Spark hands a lease's two tasks to its two idle Python workers in either order (about
    # half the leases swap them); the driver places each task on the slot whose warm Worker its
    # process holds. So every slot keeps its Worker, in the same process, and restores nothing.
    assert all(slot["reused"] for slot in later), f"a slot's Worker was not reused: {leases}"
    for before, after in zip(leases, leases[1:], strict=False):
        pids = {slot["slot"]: slot["pid"] for slot in before["slots"]}
        assert {slot["slot"]: slot["pid"] for slot in after["slots"]} == pids, leases
        assert all(slot["restored"] == 0 for slot in after["slots"]), leases


def driver_runs(runner: SparkRunner) -> set[str]:
    return {lease["run"] for lease in runner.leases() if "slots" in lease}


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_driver_kill_9_then_rerun_resumes_exactly_once(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    rng = random.Random(9)
    views = generate_views(seed=9, count=2400)
    oracle, _dropped = oracle_counts(views)
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("pageviews"),
                         topic_factory("counts"), tmp_path / "state", commit_ms=300)  # fmt: skip
    runner.start()
    runner.wait_ready(120)
    for kill, i in enumerate(range(0, len(views), 800)):
        produce(bootstrap_servers, runner.input_topic, views[i : i + 800])
        if kill < 2:
            wait_until(lambda k=kill: len(driver_runs(runner)) == k + 1, 60, "a lease of this run")
            time.sleep(rng.uniform(0.5, 2.0))
            runner.kill9()  # the driver, its JVM and executors: mid-lease, mid-transaction
            runner.start()
            runner.wait_ready(120)
    try:
        wait_until(
            lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
            150,
            "the committed output to reach the oracle's final counts",
        )
    finally:
        assert runner.stop() == 0, runner.output()[-5000:]
    check_revisions_exactly_once(read_revisions(bootstrap_servers, runner.output_topic), oracle)
    assert len(driver_runs(runner)) == 3
