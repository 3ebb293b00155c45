"""Operating an application: crash recovery cost, poison records, and the reset tool."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial.kafka import free_port
from tests import processes
from tests.runtime.harness import (
    Runner,
    check_revisions_exactly_once,
    committed_offset,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    read_topic,
    scrape,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STORE = "KSTREAM-AGGREGATE-STATE-STORE-0000000003"


def final_values(revisions):  # noqa: ANN001, ANN201
    return dict(revisions)


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offset"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_recovery_restores_only_the_suffix_since_the_last_commit(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    views = generate_views(seed=5, count=4000)
    oracle, _ = oracle_counts(views)
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("counts")
    runner = Runner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                    tmp_path / "state", commit_ms=200)  # fmt: skip
    runner.start()
    # Paced: each chunk's counts are committed before the next chunk is sent, so the changelog
    # holds 20 commits' state changes (a commit logs each key it changed once).
    for end in range(150, 3001, 150):
        produce(bootstrap_servers, input_topic, views[end - 150 : end])
        revisions = sum(oracle_counts(views[:end])[0].values())  # one per counted view
        wait_until(lambda n=revisions: len(read_revisions(bootstrap_servers, output_topic)) >= n,
                   180, f"the counts of the first {end} views to be committed")  # fmt: skip
    produce(bootstrap_servers, input_topic, views[3000:3300])  # in flight at the crash
    runner.kill9()  # a crash, most likely with a transaction open
    changelog = f"{runner.app_id}-{STORE}-changelog"
    changelog_size = end_offset(bootstrap_servers, changelog)

    port = free_port()
    runner.start(prometheus_port=port)
    runner.wait_ready()
    metrics = scrape(port)
    produce(bootstrap_servers, input_topic, views[3300:])
    complete = lambda: final_values(read_revisions(bootstrap_servers, output_topic)) == oracle  # noqa: E731
    wait_until(complete, 180, "the output to reach the oracle")
    assert runner.stop() == 0, runner.output()

    restored = metrics["fluvial_worker_restored_total"]
    to_restore = metrics["fluvial_worker_restore_total"]
    # The RocksDB store on disk holds the state of the last commit: only changelog records
    # written after it (at most one commit's) are replayed, not the whole log of 20 and more.
    assert changelog_size > 100
    assert to_restore <= 0.25 * changelog_size, (to_restore, changelog_size)
    assert restored <= to_restore
    check_revisions_exactly_once(read_revisions(bootstrap_servers, output_topic), oracle)


def poison_input(bootstrap: str, topic: str) -> tuple[dict, int]:
    """Good page views with one undeserializable record in the middle; returns (oracle, offset)."""
    views = generate_views(seed=9, count=400)
    produce(bootstrap, topic, views[:200])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, key=b"user-x", value=b"{not json", timestamp=views[199].timestamp_ms,
                     partition=0)  # fmt: skip
    assert producer.flush(10) == 0
    produce(bootstrap, topic, views[200:])
    oracle, _ = oracle_counts(views)
    return oracle, 200


def test_poison_record_goes_to_the_dead_letter_topic_and_processing_continues(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("counts")
    dead_letters = topic_factory("dlt")
    oracle, poison_offset = poison_input(bootstrap_servers, input_topic)
    runner = Runner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                    tmp_path / "state",
                    extra_env={"FLUVIAL_TEST_ON_BAD": "log_and_continue",
                               "FLUVIAL_TEST_DLT": dead_letters})  # fmt: skip
    runner.start()
    complete = lambda: final_values(read_revisions(bootstrap_servers, output_topic)) == oracle  # noqa: E731
    wait_until(complete, 180, "every good record to be counted")
    assert runner.stop() == 0, runner.output()
    [dead] = read_topic(bootstrap_servers, dead_letters)
    assert dead.value() == b"{not json" and dead.key() == b"user-x"
    headers = dict(dead.headers())
    assert f"{input_topic}-0@{poison_offset}".encode() in headers["fluvial.source"]
    check_revisions_exactly_once(read_revisions(bootstrap_servers, output_topic), oracle)


def test_poison_record_with_fail_stops_without_committing_past_it(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("counts")
    _oracle, poison_offset = poison_input(bootstrap_servers, input_topic)
    runner = Runner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                    tmp_path / "state")  # fmt: skip
    runner.start()
    code = runner.wait(180)
    assert code == 1, runner.output()
    assert "cannot deserialize" in runner.output()
    assert f"{input_topic}-0@{poison_offset}" in runner.output()
    committed = committed_offset(bootstrap_servers, runner.app_id, input_topic)
    assert committed <= poison_offset, "nothing at or after the poison record was committed"


def test_reset_then_rerun_reproduces_the_final_output(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    views = generate_views(seed=13, count=1200)
    oracle, _ = oracle_counts(views)
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("counts")
    produce(bootstrap_servers, input_topic, views)
    runner = Runner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                    tmp_path / "state")  # fmt: skip
    runner.start()
    complete = lambda: final_values(read_revisions(bootstrap_servers, output_topic)) == oracle  # noqa: E731
    wait_until(complete, 180, "the first run to finish")
    assert runner.stop() == 0, runner.output()
    first_run = len(read_revisions(bootstrap_servers, output_topic))

    reset = processes.run(
        [sys.executable, "-m", "fluvial.cli", "reset", runner.app_id,
         "--bootstrap-servers", bootstrap_servers, "--state-dir", str(runner.state_dir)],
        timeout=180,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    assert "internal topic(s) deleted" in reset.stderr
    assert not (runner.state_dir / runner.app_id).exists(), "local state is wiped"
    assert committed_offset(bootstrap_servers, runner.app_id, input_topic) < 0

    runner.start()

    def rerun_complete() -> bool:
        again = read_revisions(bootstrap_servers, output_topic)[first_run:]
        return final_values(again) == oracle

    wait_until(rerun_complete, 180, "the rerun to reproduce the final output")
    assert runner.stop() == 0, runner.output()
    rerun = read_revisions(bootstrap_servers, output_topic)[first_run:]
    check_revisions_exactly_once(rerun, oracle)
