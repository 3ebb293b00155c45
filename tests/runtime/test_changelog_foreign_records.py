"""A changelog record fluvial did not write stops the restore, with what to do.

fluvial writes every changelog record with its store key, and a compacted topic takes no
other. A record without one comes from another writer, once someone turned compaction off;
restoring it would put a key no store can hold.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import StreamsError
from fluvial.runtime import Application
from tests.event_times import event_time_base_ms
from tests.runtime.harness import committed_offset, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 3
KEYS = [f"user-{i}" for i in range(12)]


def _produce_input(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})  # fmt: skip
    base = event_time_base_ms()
    for i in range(count):
        producer.produce(topic, key=KEYS[i % len(KEYS)].encode(), value=b"click",
                         timestamp=base + i * 1000)  # fmt: skip
    assert producer.flush(30) == 0


def _committed_total(bootstrap: str, group: str, topic: str) -> int:
    return sum(max(0, committed_offset(bootstrap, group, topic, p)) for p in range(PARTITIONS))


def _high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
    finally:
        consumer.close()


def test_a_keyless_record_on_a_changelog_stops_the_restore_and_names_it(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    input_topic = topic_factory("clicks", partitions=PARTITIONS)
    output_topic = topic_factory("counts", partitions=PARTITIONS)
    app_id = unique_name("app")
    config = StreamsConfig(
        application_id=app_id,
        bootstrap_servers=bootstrap_servers,
        processing_guarantee="exactly_once_v2",
        commit_interval_ms=100,
        state_dir=str(tmp_path / "state"),
    )
    builder = StreamsBuilder()
    (
        builder.stream(input_topic, key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count()
        .to_stream()
        .to(output_topic, key_serde=serdes.string(), value_serde=serdes.long())
    )
    topology = builder.build()
    changelog_prefix = f"{app_id}-"
    _produce_input(bootstrap_servers, input_topic, 60)
    with Application(topology, config) as app:
        wait_until(
            lambda: _committed_total(bootstrap_servers, app_id, input_topic) == 60,
            120,
            "the first input to be processed and committed",
        )
        admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        [changelog] = [
            t for t in admin.list_topics(timeout=30).topics
            if t.startswith(changelog_prefix) and t.endswith("-changelog")
        ]  # fmt: skip
        # Someone makes the changelog a plain (not compacted) topic, which takes records without
        # a key, and another writer puts one on it...
        resource = ConfigResource(ResourceType.TOPIC, changelog, incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
        ])  # fmt: skip
        for done in admin.incremental_alter_configs([resource]).values():
            done.result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap_servers})
        landed: list[int] = []
        producer.produce(changelog, value=b"\x00\x00\x00\x00\x00\x00\x00\x07", partition=0,
                         on_delivery=lambda _error, msg: landed.append(msg.offset()))  # fmt: skip
        assert producer.flush(30) == 0 and len(landed) == 1 and landed[0] is not None
        # ... and the application commits store updates after it: a restore reads it.
        _produce_input(bootstrap_servers, input_topic, 60)
        wait_until(
            lambda: _committed_total(bootstrap_servers, app_id, input_topic) == 120,
            120,
            "the second input to be processed and committed",
        )
    app.raise_if_failed()
    assert _high_watermark(bootstrap_servers, changelog, 0) > landed[0] + 1, (
        "the application wrote no store update after the keyless record"
    )
    # The task moves to a machine without its state: it restores the whole changelog.
    shutil.rmtree(tmp_path / "state" / app_id)

    app = Application(topology, config)
    app.start()
    try:
        assert app.wait(300), "the application went on restoring a keyless changelog record"
    finally:
        app.close()
    assert app.errors and all(isinstance(e, StreamsError) for e in app.errors), app.errors
    message = str(app.errors[0])
    assert f"changelog {changelog}-0 holds a record without a key at offset {landed[0]}" in (
        message
    )
    assert f"fluvial reset {app_id}" in message
