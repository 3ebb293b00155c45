"""The changelog ends committed with the input offsets cover every state change they produced.

An at-least-once restart restores changelogs only up to those ends (the changelog may run ahead
of the committed input). Ends that leave out the last interval's state changes would lose them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.runtime import Application
from fluvial.runtime.worker import CommitMetadata
from tests.runtime.harness import wait_until

pytestmark = [pytest.mark.kafka]


def committed(bootstrap: str, group: str, topic: str) -> TopicPartition:
    """The group's committed offset and metadata; retried while the coordinator is loading."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return wait_until(lambda: _committed(consumer, topic), 30, "the group coordinator")
    finally:
        consumer.close()


def _committed(consumer: Consumer, topic: str) -> TopicPartition | None:
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    except KafkaException:  # NOT_COORDINATOR or loading on a fresh cluster: ask again
        return None
    return tp


def test_committed_changelog_ends_include_the_intervals_last_writes(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    source, out = topic_factory("clicks"), topic_factory("counts")
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for i in range(60):
        producer.produce(source, key=f"page-{i % 6}".encode(), value=b"x", partition=0)
    assert producer.flush(30) == 0

    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(out, value_serde=serdes.long())
    )
    app_id = unique_name("app")
    # With the record cache on, the counts reach the changelog only when the cache is flushed,
    # right before the offsets are committed.
    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="at_least_once", commit_interval_ms=1000,
                           state_dir=str(tmp_path))  # fmt: skip
    changelog = f"{app_id}-counts-changelog"
    with Application(builder.build(), config) as app:
        wait_until(lambda: committed(bootstrap_servers, app_id, source).offset == 60, 60,
                   "the input offsets to be committed")  # fmt: skip
    app.raise_if_failed()

    metadata = CommitMetadata.decode(committed(bootstrap_servers, app_id, source).metadata)
    probe = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "probe"})
    _, changelog_end = probe.get_watermark_offsets(TopicPartition(changelog, 0), timeout=10)
    probe.close()
    assert changelog_end > 0
    assert metadata.changelog_ends == {(changelog, 0): changelog_end}
