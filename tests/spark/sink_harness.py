"""Helpers for the Structured Streaming sink tests: read whole topics back."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition


def read_all(
    bootstrap: str, topic: str, *, committed_only: bool = True, settings: dict | None = None
) -> list:
    """Every record of every partition of ``topic`` up to its current end; ``settings`` are
    client settings (a secured cluster's)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            **(settings or {}),
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        records = []
        pending = set(ends)
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        pending.discard(msg.partition())
                    continue
                records.append(msg)
                if msg.offset() >= ends[msg.partition()] - 1:
                    pending.discard(msg.partition())
        assert not pending, f"could not read {topic} to its end"
        return records
    finally:
        consumer.close()


def values(bootstrap: str, topic: str, *, committed_only: bool = True) -> list[str]:
    return [m.value().decode() for m in read_all(bootstrap, topic, committed_only=committed_only)]
