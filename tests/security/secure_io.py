"""Reading and writing Figure 2's topics as a given principal of the secured cluster."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.runtime.harness import LONG, WINDOW_KEY, PageView


def produce(bootstrap: str, settings: dict[str, str], topic: str, views: list[PageView]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **settings, "enable.idempotence": True})
    for view in views:
        producer.produce(topic, key=view.key.encode(), value=view.value(),
                         timestamp=view.timestamp_ms, partition=0)  # fmt: skip
    assert producer.flush(30) == 0


def read_all(bootstrap: str, settings: dict[str, str], topic: str, *, committed: bool = True):  # noqa: ANN201
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            **settings,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        records = []
        deadline = time.monotonic() + 60
        done = high <= low
        while not done and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    done = msg.error().code() == -191  # _PARTITION_EOF
                    continue
                records.append(msg)
                done = msg.offset() >= high - 1
        return records, high
    finally:
        consumer.close()


def read_revisions(bootstrap: str, settings: dict[str, str], topic: str) -> list:
    records, _high = read_all(bootstrap, settings, topic)
    return [
        (
            (
                WINDOW_KEY.deserialize(topic, m.key()).key,
                WINDOW_KEY.deserialize(topic, m.key()).window.start_ms,
            ),
            LONG.deserialize(topic, m.value()),
        )  # fmt: skip
        for m in records
    ]


def committed_offset(bootstrap: str, settings: dict[str, str], group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, **settings, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()
