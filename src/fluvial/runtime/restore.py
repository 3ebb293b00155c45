"""Restoring task state from changelog topics: only the suffix a store is missing."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.processor.task import StreamTask
from fluvial.runtime.clients import restore_consumer_settings
from fluvial.runtime.metrics import WorkerMetrics
from fluvial.runtime.state import TaskState
from fluvial.state.base import ChangelogRecord

log = logging.getLogger(__name__)

BATCH = 2000
TIMEOUT_S = 60.0
# How long the readable end may stay short of the changelog's end before the rest is taken to
# be transaction markers that are never delivered.
EOF_PATIENCE_S = 10.0


class Restorer:
    """Replays changelog partitions into a task's stores before it processes anything."""

    def __init__(self, config: StreamsConfig, metrics: WorkerMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self._consumer: Consumer | None = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(restore_consumer_settings(self.config))
        return self._consumer

    def restore(
        self,
        task: StreamTask,
        state: TaskState,
        limits: dict[tuple[str, int], int] | None = None,
    ) -> None:
        """Bring every store of ``task`` up to its changelog's end, or to ``limits`` if given."""
        for store_name, (topic, partition) in task.changelog_partitions().items():
            store = task.stores[store_name]
            consumer = self._client()
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=TIMEOUT_S
            )
            start = store.committed_offset
            if start is not None and start > high:
                # The store is ahead of its changelog (the topic was recreated): start over.
                log.warning("store %s is ahead of %s-%d; restoring it afresh",
                            store_name, topic, partition)  # fmt: skip
                store.destroy()
                store.init(state.task_dir)
                start = None
            start = low if start is None else max(start, low)
            limit = (limits or {}).get((topic, partition))
            if limit is not None:
                high = min(high, limit)
            if start >= high:
                continue
            self.metrics.restore_total += high - start
            restored = self._replay(task, store_name, topic, partition, start, high)
            log.info("restored %d records of %s into %s (task %s)",
                     restored, topic, store_name, task.task_id)  # fmt: skip
            store.committed_offset = high  # nothing is uncommitted while restoring
            store.flush()

    def _replay(
        self, task: StreamTask, store_name: str, topic: str, partition: int, start: int, end: int
    ) -> int:
        consumer = self._client()
        consumer.assign([TopicPartition(topic, partition, start)])
        restored = 0
        position = start
        stalled_since = time.monotonic()
        deadline = time.monotonic() + 10 * TIMEOUT_S
        while position < end:
            if time.monotonic() > deadline:
                raise StreamsError(f"restoring {topic}-{partition} stalled at offset {position}")
            batch: list[ChangelogRecord] = []
            for msg in consumer.consume(BATCH, 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The end of what is readable now. Transaction markers take offsets
                        # but are never delivered, so only the consumer's position says
                        # whether the end was reached; an end short of it means an abort's
                        # markers are still being written: keep reading.
                        [tp] = consumer.position([TopicPartition(topic, partition)])
                        if tp.offset > position:
                            position, stalled_since = tp.offset, time.monotonic()
                        elif time.monotonic() - stalled_since > EOF_PATIENCE_S:
                            log.warning("restoring %s-%d: end %d not reached, stopping at %d",
                                        topic, partition, end, position)  # fmt: skip
                            position = end
                        if position < end:
                            time.sleep(0.05)
                        continue
                    raise StreamsError(f"restoring {topic}-{partition} failed: {error.str()}")
                if msg.offset() >= end:
                    position = end  # records past the limit belong to uncommitted input
                    continue
                position = msg.offset() + 1
                stalled_since = time.monotonic()
                batch.append(ChangelogRecord(msg.key(), msg.value(), msg.timestamp()[1]))
            if batch:
                task.restore(store_name, batch)
                restored += len(batch)
                self.metrics.restored += len(batch)
        consumer.unassign()
        return restored

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
