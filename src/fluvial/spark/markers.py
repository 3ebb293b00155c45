"""Batch markers of the Structured Streaming sink: what each writer partition last committed.

Partition ``p`` of the compacted marker topic holds the markers of writer partition ``p`` only,
each written in the same transaction as that partition's records. The last *committed* marker
of a partition is therefore the truth about which batch it last wrote.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.errors import FluvialError
from fluvial.kafka.admin import admin_client
from fluvial.runtime.clients import restore_consumer_settings

#: How long a marker read waits for a partition's last transaction to settle.
MARKER_PATIENCE_S = 10.0


@dataclass(frozen=True)
class BatchMarker:
    """What a writer partition last committed: its batch, the batch's split and its size."""

    batch_id: int
    partitions: int
    records: int

    def encode(self) -> bytes:
        """The marker as the bytes written to the marker topic (compact JSON)."""
        return json.dumps(
            {"batch": self.batch_id, "partitions": self.partitions, "records": self.records},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> BatchMarker:
        """Read a marker from the bytes :meth:`encode` wrote.

        :param data: a marker record's value.
        :returns: the marker.
        """
        doc = json.loads(data)
        return cls(int(doc["batch"]), int(doc["partitions"]), int(doc["records"]))


def marker_partitions(config: StreamsConfig, topic: str) -> int:
    """How many partitions the marker topic has; 0 when it does not exist yet."""
    admin = admin_client(config.bootstrap_servers, **config.client_config)
    # List every topic: asking for one by name lets a broker with auto.create.topics.enable
    # create it, with one partition, behind our back.
    found = admin.list_topics(timeout=30).topics.get(topic)
    if found is None or found.error is not None:
        return 0
    return len(found.partitions)


def wait_for_partitions(
    config: StreamsConfig, topic: str, partitions: int, timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while marker_partitions(config, topic) < partitions:
        if time.monotonic() > deadline:
            raise FluvialError(f"marker topic {topic!r} did not grow to {partitions} partitions")
        time.sleep(0.2)


def read_markers(
    config: StreamsConfig, topic: str, partitions: Iterable[int], *, stable_only: bool
) -> dict[int, BatchMarker]:
    """The last committed marker of each writer partition; partitions with none are absent.

    Only committed markers count (read_committed). ``stable_only`` is for writers that have
    just fenced the partition's producer: its last transaction is settled, so the read must
    reach the end of the partition, or fail. The driver reads without fencing and gives up on
    a partition whose transaction is still open; that partition's writer decides.
    """
    settings = restore_consumer_settings(config)
    settings["client.id"] = f"{config.application_id}-sink-markers"
    consumer = Consumer(settings)
    try:
        bounds: dict[int, tuple[int, int]] = {}
        for p in partitions:
            low, high = _watermarks(consumer, TopicPartition(topic, p))
            if high > low:
                bounds[p] = (low, high)
        found: dict[int, BatchMarker] = {}
        # Each transaction adds a marker and a commit record, so the last marker is near the
        # end; look further back only for partitions whose tail is aborted transactions.
        span = 8
        while bounds:
            starts = {p: max(low, high - span) for p, (low, high) in bounds.items()}
            last, unsettled = _scan(
                consumer, topic, starts, {p: high for p, (_, high) in bounds.items()},
                MARKER_PATIENCE_S if stable_only else 2.0,
            )  # fmt: skip
            if unsettled and stable_only:
                raise FluvialError(
                    f"marker topic {topic!r} partitions {sorted(unsettled)} did not "
                    f"settle within {MARKER_PATIENCE_S:.0f} s after fencing; the task will be "
                    "retried"
                )
            found.update({p: BatchMarker.decode(value) for p, value in last.items()})
            bounds = {
                p: (low, high)
                for p, (low, high) in bounds.items()
                if p not in last and p not in unsettled and starts[p] > low
            }
            span *= 4
        return found
    finally:
        consumer.close()


#: What a partition created a moment ago, or whose leader is moving, answers for a while.
_UNSETTLED_PARTITION = (
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
)


def _watermarks(consumer: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """Low and high watermarks; a partition created a moment ago, or whose leader moves, may
    need a metadata refresh."""
    deadline = time.monotonic() + 30
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
            return low, high
        except KafkaException as exc:
            error = exc.args[0]
            unsettled = error.code() in _UNSETTLED_PARTITION or error.retriable()
            if not unsettled or time.monotonic() > deadline:
                raise
            consumer.list_topics(tp.topic, timeout=10)
            time.sleep(0.2)


def _scan(
    consumer: Consumer,
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int],
    patience_s: float,
) -> tuple[dict[int, bytes], set[int]]:
    """Read each partition from its start to its end: the last committed value of each, and
    the partitions that could not reach their end in time (an open transaction holds them)."""
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])
    last: dict[int, bytes] = {}
    pending = set(starts)
    deadline = time.monotonic() + patience_s
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.1):
            error = msg.error()
            if error is None:
                partition, value = msg.partition(), msg.value()
                if partition is not None and value is not None:
                    last[partition] = value
            elif error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
        # Commit records take offsets but are never delivered: only the position tells
        # whether a partition's end was reached.
        positions = consumer.position([TopicPartition(topic, p) for p in pending])
        pending -= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
    consumer.unassign()
    return last, pending
