"""Standby replicas: warm copies of other workers' task state, kept by tailing changelogs.

A standby never processes input. It applies its tasks' changelog records (read_committed under
exactly-once) into local stores and records how far it got, so when the active task moves to
this worker's machine, restoration replays only what the standby had not seen yet.

A standby keeps its copy apart from the task directories of active tasks
(``<state_dir>/<application_id>/standby/slot-<N>/<task>``): on the Spark engine a task's active
and its standby may run on one machine with one state directory. A task that starts there
takes over a standby copy that no process holds and that is further along than its own
directory (:meth:`~fluvial.runtime.state.TaskState.open`).

While the active task is not serving (restoring, moving), a standby answers stale queries from
its stores: everything it holds came from committed changelog records.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.kafka.consumed import ConsumedMessage, consume
from fluvial.metrics import StoreLag, WorkerMetrics
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.clients import restore_consumer_settings
from fluvial.runtime.collector import NoOutputCollector
from fluvial.runtime.restore import keyless_changelog_record
from fluvial.runtime.state import TaskState, copy_gain
from fluvial.state.base import ChangelogMessage
from fluvial.state.rocksdb import read_committed_offset
from fluvial.topology.nodes import ROCKSDB
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

STANDBY_DIR = "standby"
#: How long a lag query waits for the broker's end offsets before using the last ones seen.
END_OFFSETS_TIMEOUT_S = 2.0
#: A live standby hands its copy over to a task starting on its machine when the task's own
#: directory holds nothing, or when the copy spares restoring at least this many records. A
#: smaller gain is not worth the standby: it would have to start again from an empty copy.
HANDOFF_MIN_GAIN = 10_000


def standby_root(state_root: Path, slot: int) -> Path:
    """Where slot ``slot`` keeps its standby copies, under an application's state root."""
    return state_root / STANDBY_DIR / f"slot-{slot}"


def standby_copies(state_root: Path, task_id: TaskId) -> list[Path]:
    """Every standby copy of ``task_id`` on this machine (held by a process or not)."""
    return sorted((state_root / STANDBY_DIR).glob(f"slot-*/{task_id}"))


def copies_worth_taking(
    topology: Topology, config: StreamsConfig, state_root: Path, task_ids: list[TaskId]
) -> list[Path]:
    """Standby copies on this machine that tasks starting here should ask their holders for.

    Read without locks (RocksDB read-only), so asking costs a standby nothing unless its copy
    is much further along than the task's own directory (see :data:`HANDOFF_MIN_GAIN`).
    """
    subs = {s.id: s for s in topology.subtopologies(config.application_id)}
    wanted = []
    for task_id in task_ids:
        sub = subs[task_id.subtopology]
        changelogs = sub.changelog_topics()
        stores = [spec.name for spec in sub.stores if (spec.store_type or ROCKSDB) == ROCKSDB]
        if not stores or any(name not in changelogs for name in stores):
            continue
        task_dir = state_root / str(task_id)
        fresh = all(read_committed_offset(task_dir / name) is None for name in stores)
        gains = [(copy_gain(task_dir, copy, stores), copy) for copy in standby_copies(state_root,
                                                                                  task_id)]  # fmt: skip
        worth = [(g, c) for g, c in gains if g is not None and (fresh or g >= HANDOFF_MIN_GAIN)]
        if worth:
            wanted.append(max(worth)[1])
    return wanted


class StandbyTasks:
    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        task_ids: list[TaskId],
        standby_dir: Path,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.config = config
        self.tasks: dict[TaskId, StreamTask] = {}
        self.states: dict[TaskId, TaskState] = {}
        self._store_by_tp: dict[tuple[str, int], tuple[StreamTask, str]] = {}
        # Next offset to apply, per changelog partition: where the standby started, then past
        # every record applied (and past transaction markers at the end of what is readable).
        self._start: dict[tuple[str, int], int] = {}
        self._position: dict[tuple[str, int], int] = {}
        self._checkpointed: dict[tuple[str, int], int] = {}
        self._last_timestamp: dict[tuple[str, int], int] = {}
        # Tasks whose every changelogged store is kept: they answer stale queries.
        self._serving: set[TaskId] = set()
        self._lock = threading.Lock()  # the consumer's watermark queries come from query threads
        # Copies an active task starting on this machine asked for (see release()).
        self._release_requested: set[TaskId] = set()
        self.applied = 0
        self.metrics = metrics or WorkerMetrics(-1)
        subs = {s.id: s for s in topology.subtopologies(config.application_id)}
        for task_id in sorted(task_ids):
            sub = subs[task_id.subtopology]
            if not sub.changelog_topics():
                continue  # stateless: nothing to keep warm
            task = StreamTask(
                task_id, sub, config, standby_dir / str(task_id), NoOutputCollector("standby task")
            )
            self.tasks[task_id] = task
            self.states[task_id] = TaskState(task, standby_dir / str(task_id))
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
            kept = True
            for store_name, tp in task.changelog_partitions().items():
                start = task.stores[store_name].committed_offset
                low, _high = self._consumer.get_watermark_offsets(TopicPartition(*tp), timeout=60)
                # The first offset this standby must read: past its checkpoint, or what the
                # active's committed state needs when it starts empty.
                first = start if start is not None else (needed or {}).get(tp)
                if first is not None and low > first:
                    self._drop(task, store_name, tp, low)
                    kept = False
                    continue
                self._store_by_tp[tp] = (task, store_name)
                self._start[tp] = low if start is None else start
                assignment.append(TopicPartition(tp[0], tp[1], -2 if start is None else start))
            if kept:
                self._serving.add(task_id)
        self._consumer.assign(assignment)

    def _drop(self, task: StreamTask, store_name: str, tp: tuple[str, int], low: int) -> None:
        """Stop keeping a store whose changelog lost records it had not applied yet."""
        self.metrics.standby_gaps += 1
        log.warning("standby store %s of task %s: changelog %s-%d now starts at %d, past what "
                    "the standby had applied; dropping it (a promotion restores it afresh)",
                    store_name, task.task_id, tp[0], tp[1], low)  # fmt: skip
        self._serving.discard(task.task_id)
        store = task.stores[store_name]
        with task.query_lock:  # no stale query reads the store while it is wiped
            store.destroy()
            store.init(self.states[task.task_id].task_dir)
        self._store_by_tp.pop(tp, None)
        self._start.pop(tp, None)
        self._position.pop(tp, None)
        self._checkpointed.pop(tp, None)

    def request_release(self, task_id: TaskId) -> None:
        """Ask for :meth:`release` from another thread: the next :meth:`poll` does it."""
        with self._lock:
            self._release_requested.add(task_id)

    def release(self, task_id: TaskId) -> None:
        """Give up the standby copy of ``task_id``: an active task on this machine takes it
        over. Its position is recorded first, so the taker restores only what it had not seen.
        """
        task = self.tasks.pop(task_id, None)
        if task is None:
            return
        self._serving.discard(task_id)
        tps = [tp for tp, (t, _) in self._store_by_tp.items() if t.task_id == task_id]
        for tp in tps:
            position = self._position.get(tp)
            if position is not None and self._checkpointed.get(tp) != position:
                store = task.stores[self._store_by_tp[tp][1]]
                store.committed_offset = position
                store.flush()
        with self._lock:
            if self._consumer is not None and tps:
                self._consumer.incremental_unassign([TopicPartition(*tp) for tp in tps])
        for tp in tps:
            self._store_by_tp.pop(tp, None)
            self._start.pop(tp, None)
            self._position.pop(tp, None)
            self._checkpointed.pop(tp, None)
            self._last_timestamp.pop(tp, None)
        task.close()
        self.states.pop(task_id).close()
        log.info("standby of task %s handed over to its active task on this machine", task_id)

    def poll(self, max_records: int = 1000) -> int:
        """Apply whatever changelog records are available; never blocks for long."""
        if self._release_requested:
            with self._lock:
                requested, self._release_requested = self._release_requested, set()
            for task_id in requested:
                self.release(task_id)
        if self._consumer is None:
            return 0
        batches: dict[tuple[str, int], list[ConsumedMessage]] = {}
        reached: dict[tuple[str, int], int] = {}
        for msg in consume(self._consumer, max_records, 0.0):
            error = msg.error()
            if error is not None:
                tp = (msg.topic(), msg.partition())
                if error.code() == KafkaError._AUTO_OFFSET_RESET and msg.topic() is not None:
                    # The position was deleted under the standby (retention, DeleteRecords).
                    if tp in self._store_by_tp:
                        task, store_name = self._store_by_tp[tp]
                        self._consumer.incremental_unassign([TopicPartition(*tp)])
                        batches.pop(tp, None)
                        reached.pop(tp, None)
                        self._drop(task, store_name, tp, -1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    if tp in self._store_by_tp:
                        # Transaction markers take offsets but are never delivered: at the end
                        # of what is readable only the consumer's position says how far it got.
                        [at] = self._consumer.position([TopicPartition(*tp)])
                        if at.offset >= 0:
                            reached[tp] = max(reached.get(tp, 0), at.offset)
                else:
                    log.warning("standby: %s", error.str())
                continue
            tp = (msg.topic(), msg.partition())
            if tp not in self._store_by_tp:
                continue
            if msg.key() is None:
                raise keyless_changelog_record(*tp, msg.offset(), self.config.application_id)
            batch = batches.get(tp)
            if batch is None:
                batches[tp] = batch = []
            batch.append(msg)
        for tp, batch in batches.items():
            # Each partition's records as the consumer returned them, in one call per store
            # (restore_batch); their offsets ascend, so the last one says how far it got.
            task, store_name = self._store_by_tp[tp]
            task.stores[store_name].restore_batch(cast("list[ChangelogMessage]", batch))
            self.applied += len(batch)
            last = batch[-1]
            reached[tp] = max(reached.get(tp, 0), last.offset() + 1)
            self._last_timestamp[tp] = last.timestamp()[1]
        # Only once applied: a lag read by a query never runs ahead of the store.
        for tp, offset in reached.items():
            if tp in self._store_by_tp and offset > self._position.get(tp, -1):
                self._position[tp] = offset
        return sum(len(r) for r in batches.values())

    def checkpoint(self) -> None:
        """Record how far each standby store got, so a promotion resumes from there."""
        for tp, position in list(self._position.items()):
            if self._checkpointed.get(tp) == position:
                continue
            task, store_name = self._store_by_tp[tp]
            store = task.stores[store_name]
            store.committed_offset = position
            store.flush()
            self._checkpointed[tp] = position

    # -- stale queries and lag ----------------------------------------------------------------

    def serving(self, task_id: TaskId) -> StreamTask | None:
        """The standby task, while it keeps every changelogged store of its task."""
        task = self.tasks.get(task_id)
        if task is None or task_id not in self._serving or task.closed:
            return None
        return task

    def lags(self, task_id: TaskId | None = None, *, fresh: bool = True) -> list[StoreLag]:
        """How far each kept store (of ``task_id``, or of every task) is behind its changelog.

        ``fresh`` asks the broker for the end offsets (its last stable offsets under
        exactly-once); otherwise the ends the consumer last saw in fetches are used.
        """
        found = []
        for tp, (task, store_name) in list(self._store_by_tp.items()):
            if task_id is not None and task.task_id != task_id:
                continue
            position = self._position.get(tp, self._start.get(tp))
            found.append(StoreLag(task.task_id, store_name, tp[0], tp[1], position,
                                  self._end(tp, fresh), self._last_timestamp.get(tp)))  # fmt: skip
        return found

    def _end(self, tp: tuple[str, int], fresh: bool) -> int | None:
        with self._lock:
            consumer = self._consumer
            if consumer is None:
                return None
            try:
                if fresh:
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(*tp), timeout=END_OFFSETS_TIMEOUT_S
                    )
                else:
                    _low, high = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            except KafkaException:
                return None
        return int(high) if high is not None and high >= 0 else None

    def close(self) -> None:
        self.checkpoint()
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
        self._serving.clear()
        for task in self.tasks.values():
            task.close()
        for state in self.states.values():
            state.close()
