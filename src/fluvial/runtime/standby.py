"""Standby replicas: warm copies of other workers' task state, kept by tailing changelogs.

A standby never processes input. It applies its tasks' changelog records (read_committed under
exactly-once) into local stores and records how far it got, so when the active task moves to
this worker's machine, restoration replays only what the standby had not seen yet.
"""

from __future__ import annotations

import logging
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.clients import restore_consumer_settings
from fluvial.runtime.collector import NoOutputCollector
from fluvial.runtime.state import TaskState
from fluvial.state.base import ChangelogRecord
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)


class StandbyTasks:
    def __init__(
        self, topology: Topology, config: StreamsConfig, task_ids: list[TaskId], state_root: Path
    ) -> None:
        self.config = config
        self.tasks: dict[TaskId, StreamTask] = {}
        self.states: dict[TaskId, TaskState] = {}
        self._store_by_tp: dict[tuple[str, int], tuple[StreamTask, str]] = {}
        self._position: dict[tuple[str, int], int] = {}
        self.applied = 0
        subs = {s.id: s for s in topology.subtopologies(config.application_id)}
        for task_id in sorted(task_ids):
            sub = subs[task_id.subtopology]
            if not sub.changelog_topics():
                continue  # stateless: nothing to keep warm
            task = StreamTask(
                task_id, sub, config, state_root / str(task_id), NoOutputCollector("standby task")
            )
            self.tasks[task_id] = task
            self.states[task_id] = TaskState(task, state_root / str(task_id))
        self._consumer: Consumer | None = None

    def start(self) -> None:
        if not self.tasks:
            return
        self._consumer = Consumer(restore_consumer_settings(self.config))
        assignment = []
        for task_id, task in self.tasks.items():
            self.states[task_id].open()
            for store_name, tp in task.changelog_partitions().items():
                self._store_by_tp[tp] = (task, store_name)
                start = task.stores[store_name].committed_offset
                assignment.append(TopicPartition(tp[0], tp[1], -2 if start is None else start))
        self._consumer.assign(assignment)

    def poll(self, max_records: int = 1000) -> int:
        """Apply whatever changelog records are available; never blocks for long."""
        if self._consumer is None:
            return 0
        batches: dict[tuple[str, int], list[ChangelogRecord]] = {}
        for msg in self._consumer.consume(max_records, 0.0):
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("standby: %s", error.str())
                continue
            tp = (msg.topic(), msg.partition())
            batches.setdefault(tp, []).append(
                ChangelogRecord(msg.key(), msg.value(), msg.timestamp()[1])
            )
            self._position[tp] = msg.offset() + 1
        for tp, records in batches.items():
            task, store_name = self._store_by_tp[tp]
            task.stores[store_name].restore(records)
            self.applied += len(records)
        return sum(len(r) for r in batches.values())

    def checkpoint(self) -> None:
        """Record how far each standby store got, so a promotion resumes from there."""
        for tp, position in self._position.items():
            task, store_name = self._store_by_tp[tp]
            store = task.stores[store_name]
            store.committed_offset = position
            store.flush()

    def close(self) -> None:
        self.checkpoint()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        for task in self.tasks.values():
            task.close()
        for state in self.states.values():
            state.close()
