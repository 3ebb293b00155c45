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
from fluvial.runtime.metrics import WorkerMetrics
from fluvial.runtime.state import TaskState
from fluvial.state.base import ChangelogRecord
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)


class StandbyTasks:
    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        task_ids: list[TaskId],
        state_root: Path,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.config = config
        self.tasks: dict[TaskId, StreamTask] = {}
        self.states: dict[TaskId, TaskState] = {}
        self._store_by_tp: dict[tuple[str, int], tuple[StreamTask, str]] = {}
        self._position: dict[tuple[str, int], int] = {}
        self.applied = 0
        self.metrics = metrics or WorkerMetrics(-1)
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

    def start(self, needed: dict[tuple[str, int], int] | None = None) -> None:
        """Open the standby stores and tail their changelogs from where each got to.

        ``needed`` gives, per changelog partition, the lowest offset the active task's
        committed state needs. A standby whose next record was deleted from its changelog
        (or that would start above a needed offset) is dropped, not resumed past the gap: a
        promotion then restores the store afresh, with restoration's own check.
        """
        if not self.tasks:
            return
        settings = {**restore_consumer_settings(self.config), "auto.offset.reset": "error"}
        self._consumer = Consumer(settings)
        assignment = []
        for task_id, task in self.tasks.items():
            self.states[task_id].open()
            for store_name, tp in task.changelog_partitions().items():
                start = task.stores[store_name].committed_offset
                low, _high = self._consumer.get_watermark_offsets(TopicPartition(*tp), timeout=60)
                # The first offset this standby must read: past its checkpoint, or what the
                # active's committed state needs when it starts empty.
                first = start if start is not None else (needed or {}).get(tp)
                if first is not None and low > first:
                    self._drop(task, store_name, tp, low)
                    continue
                self._store_by_tp[tp] = (task, store_name)
                assignment.append(TopicPartition(tp[0], tp[1], -2 if start is None else start))
        self._consumer.assign(assignment)

    def _drop(self, task: StreamTask, store_name: str, tp: tuple[str, int], low: int) -> None:
        """Stop keeping a store whose changelog lost records it had not applied yet."""
        self.metrics.standby_gaps += 1
        log.warning("standby store %s of task %s: changelog %s-%d now starts at %d, past what "
                    "the standby had applied; dropping it (a promotion restores it afresh)",
                    store_name, task.task_id, tp[0], tp[1], low)  # fmt: skip
        store = task.stores[store_name]
        store.destroy()
        store.init(self.states[task.task_id].task_dir)
        self._store_by_tp.pop(tp, None)
        self._position.pop(tp, None)

    def poll(self, max_records: int = 1000) -> int:
        """Apply whatever changelog records are available; never blocks for long."""
        if self._consumer is None:
            return 0
        batches: dict[tuple[str, int], list[ChangelogRecord]] = {}
        for msg in self._consumer.consume(max_records, 0.0):
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._AUTO_OFFSET_RESET and msg.topic() is not None:
                    # The position was deleted under the standby (retention, DeleteRecords).
                    tp = (msg.topic(), msg.partition())
                    if tp in self._store_by_tp:
                        task, store_name = self._store_by_tp[tp]
                        self._consumer.incremental_unassign([TopicPartition(*tp)])
                        batches.pop(tp, None)
                        self._drop(task, store_name, tp, -1)
                elif error.code() != KafkaError._PARTITION_EOF:
                    log.warning("standby: %s", error.str())
                continue
            tp = (msg.topic(), msg.partition())
            if tp not in self._store_by_tp:
                continue
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
