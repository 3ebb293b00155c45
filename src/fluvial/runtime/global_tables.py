"""GlobalKTables in the runtime: a full copy of every global topic on each worker.

The global topic itself is the table's log, so the copy is rebuilt from the topic's beginning
at start (bootstrapping, before any stream task processes a record) and then kept current by
polling the topic between processing rounds. Stream tasks read it through ``global_stores``.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from fluvial.config import StreamsConfig
from fluvial.errors import ConfigError, StreamsError
from fluvial.kafka.consumed import consume
from fluvial.processor.collector import ConsumedRecord
from fluvial.processor.task import StreamTask
from fluvial.runtime.clients import admin_settings, restore_consumer_settings
from fluvial.runtime.collector import NoOutputCollector
from fluvial.state.base import StateStore
from fluvial.topology.nodes import IN_MEMORY
from fluvial.topology.topology import Topology

BOOTSTRAP_TIMEOUT_S = 300.0


class GlobalTables:
    def __init__(self, topology: Topology, config: StreamsConfig) -> None:
        self.config = config
        sub = topology.global_subtopology(config.application_id)
        self.task: StreamTask | None = None
        self._consumer: Consumer | None = None
        if sub is None:
            return
        metadata = AdminClient(admin_settings(config)).list_topics(timeout=15)
        partitions = []
        for topic in topology.global_source_topics():
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                raise ConfigError(f"global table topic {topic!r} does not exist: create it first")
            partitions += [(topic, p) for p in sorted(info.partitions)]
        # In memory: the copy is rebuilt from the topic at every start anyway.
        self.task = StreamTask((-1, 0), sub, config, None, NoOutputCollector("global table processor"),
                               default_store_type=IN_MEMORY, input_partitions=partitions,
                               transactional=False)  # fmt: skip
        self._partitions = partitions

    @property
    def stores(self) -> dict[str, StateStore]:
        return self.task.stores if self.task is not None else {}

    def bootstrap(self) -> None:
        """Read every global topic to its current end before stream processing starts."""
        if self.task is None:
            return
        self.task.initialize()
        self._consumer = Consumer(restore_consumer_settings(self.config))
        ends = {}
        for topic, partition in self._partitions:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=30
            )
            if high > low:
                ends[(topic, partition)] = high
        self._consumer.assign([TopicPartition(t, p, -2) for t, p in self._partitions])
        deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_S
        while ends:
            if time.monotonic() > deadline:
                raise StreamsError(f"global tables did not load within {BOOTSTRAP_TIMEOUT_S:.0f} s")
            for tp, position in self.poll().items():
                if position >= ends.get(tp, 0):
                    ends.pop(tp, None)

    def poll(self, timeout_s: float = 0.2) -> dict[tuple[str, int], int]:
        """Apply available global records; returns the next offset per partition read."""
        if self._consumer is None or self.task is None:
            return {}
        positions: dict[tuple[str, int], int] = {}
        for msg in consume(self._consumer, 1000, timeout_s):
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise StreamsError(f"reading a global table failed: {error.str()}")
                positions[(msg.topic(), msg.partition())] = msg.offset()
                continue
            tp = (msg.topic(), msg.partition())
            self.task.add_records(tp[0], tp[1], [ConsumedRecord(
                msg.key(), msg.value(), msg.timestamp()[1], msg.offset(),
                list(msg.headers() or []))])  # fmt: skip
            positions[tp] = msg.offset() + 1
        while self.task.process_one():
            pass
        return positions

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self.task is not None:
            self.task.close()
