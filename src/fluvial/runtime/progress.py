"""The worker's side of catch-up completeness: writer ids, progress records, merged reads.

See :mod:`fluvial.processor.completeness` for the design. Here a worker

- works out, from the topology and the partition counts, which upstream tasks write each
  repartition topic (every task of each sub-topology that writes it), so a downstream task
  waits for writers that have not written yet;
- sets its downstream tasks' repartition partitions to be read merged by writer;
- sends each of its upstream tasks' progress (stream time, and whether it has read all of its
  input) to every partition of the repartition topics the task writes, when it changed, at most
  every :data:`PROGRESS_INTERVAL_MS`. An idle application writes nothing: a downstream task
  that restarts finds what it knew of each writer in its commit, and an upstream task that
  restarts (on Spark, a slot that moved to another Python worker) finds the progress it last
  sent in its own, and sends none until its input has told it where it stands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer

from fluvial.config import StreamsConfig
from fluvial.processor.collector import RecordCollector, TaskId
from fluvial.processor.completeness import (
    PROGRESS_HEADER,
    PROGRESS_INTERVAL_MS,
    WRITER_HEADER,
    WriterState,
    encode_progress,
)
from fluvial.processor.task import StreamTask
from fluvial.topology.topology import Subtopology, Topology

METADATA_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


def writer_id(task_id: TaskId) -> str:
    return str(task_id)


def repartition_writers(
    subs: Iterable[Subtopology], partitions: Mapping[str, int]
) -> dict[str, list[str]]:
    """Repartition topic -> ids of every task that writes it, given each topic's partitions."""
    writers: dict[str, list[str]] = {}
    for sub in subs:
        # Repartition topics only: a foreign-key join's subscription and response topics
        # ("-topic") feed table lookups, which have no event time to hold back, and the two
        # go opposite ways between the same sub-topologies: merged, each side would wait on
        # the other's progress for ever.
        written = {t for t in sub.repartition_topics_written() if t.endswith("-repartition")}
        if not written:
            continue
        tasks = max((partitions.get(t, 0) for t in sub.source_topics), default=0)
        ids = [writer_id(TaskId(sub.id, p)) for p in range(tasks)]
        for topic in written:
            writers.setdefault(topic, []).extend(ids)
    return writers


class RepartitionProgress:
    """Writer ids, merged reads and progress records for one worker's tasks."""

    def __init__(self, topology: Topology, config: StreamsConfig, consumer: Consumer) -> None:
        app_id = config.application_id
        subs = topology.subtopologies(app_id)
        metadata = consumer.list_topics(timeout=METADATA_TIMEOUT_S).topics
        self.partitions: dict[str, int] = {
            name: len(meta.partitions)
            for name, meta in metadata.items()
            if meta.error is None and meta.partitions
        }
        #: Repartition topic -> ids of every task that writes it.
        self.writers = repartition_writers(subs, self.partitions)
        #: Repartition topics with several writers: only those need merging. One writer's
        #: records are in its own order already, so they cost nothing extra.
        self.merged = frozenset(t for t, ids in self.writers.items() if len(ids) > 1)
        self._written = {
            sub.id: sorted(sub.repartition_topics_written() & self.merged) for sub in subs
        }
        log.debug("writers of repartition topics: %s; merged: %s; partitions: %s",
                  self.writers, sorted(self.merged),
                  {t: self.partitions.get(t) for t in self.writers})  # fmt: skip
        self._at_end: set[tuple[str, int]] = set()
        # Partitions that gave records or reached their end since the worker started: until
        # all of a task's have, whether it has read all of its input is not known yet.
        self._seen: set[tuple[str, int]] = set()
        self._sent: dict[TaskId, tuple[int, bool]] = {}
        self._last_round = 0.0

    def merge_inputs(
        self, task: StreamTask, restored: dict[tuple[str, int], dict[str, WriterState]]
    ) -> None:
        """Read the task's repartition partitions merged across their writers."""
        for topic in task.subtopology.source_topics:
            writers = self.writers.get(topic)
            if writers is not None and topic in self.merged:
                tp = (topic, task.task_id.partition)
                task.merge_by_writer(tp, writers, restored.get(tp))

    # -- what the consumer says -----------------------------------------------------------------
    def reached_end(self, tp: tuple[str, int]) -> None:
        self._at_end.add(tp)
        self._seen.add(tp)

    def got_records(self, tps: Iterable[tuple[str, int]]) -> None:
        self._at_end.difference_update(tps)
        self._seen.update(tps)

    def resume(self, task_id: TaskId, sent: tuple[int, bool] | None) -> None:
        """The progress ``task_id`` last sent and committed, from its commit metadata: the
        same progress is not sent again."""
        if sent is not None:
            self._sent[task_id] = sent

    def sent(self, task_id: TaskId) -> tuple[int, bool] | None:
        """The progress ``task_id`` last sent, for its commit metadata."""
        return self._sent.get(task_id)

    # -- progress records -------------------------------------------------------------------------
    def wrote_after_progress(self, task_id: TaskId) -> None:
        """``task_id`` wrote records outside a processing round (its cache flushed at a commit).

        A downstream task takes a writer's record after its progress as a sign that the writer
        is working again, and waits for its next progress. So the next round sends this task's
        progress even if unchanged: after those records, saying again how far it has read.
        """
        self._sent.pop(task_id, None)

    def send(self, tasks: Iterable[StreamTask], collector: RecordCollector) -> bool:
        """Send the progress of tasks that write repartition topics; whether anything was sent."""
        now = time.monotonic() * 1000
        if now - self._last_round < PROGRESS_INTERVAL_MS:
            return False
        self._last_round = now
        sent = False
        for task in tasks:
            topics = self._written.get(task.task_id.subtopology)
            if not topics:
                continue
            inputs = [(t, task.task_id.partition) for t in task.subtopology.source_topics]
            if not all(tp in self._seen for tp in inputs):
                continue  # where it stands is not known yet: saying "behind" would be a write
            caught_up = task.buffered_records() == 0 and all(tp in self._at_end for tp in inputs)
            state = (task.stream_time, caught_up)
            if state == self._sent.get(task.task_id):
                continue
            if caught_up:
                log.debug("task %s has read all of its input (stream time %d)",
                          task.task_id, task.stream_time)  # fmt: skip
            payload = encode_progress(*state)
            headers = [
                (PROGRESS_HEADER, payload),
                (WRITER_HEADER, writer_id(task.task_id).encode()),
            ]
            for topic in topics:
                for partition in range(self.partitions.get(topic, 0)):
                    collector.send(topic, None, None, max(task.stream_time, 0), list(headers),
                                   partition)  # fmt: skip
            self._sent[task.task_id] = state
            sent = True
        return sent
