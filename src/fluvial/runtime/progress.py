"""The worker's side of catch-up completeness: writer ids, progress records, merged reads.

See :mod:`fluvial.processor.completeness` for the design. Here a worker

- works out, from the topology and the partition counts, which upstream tasks write each
  repartition topic (every task of each sub-topology that writes it), so a downstream task
  waits for writers that have not written yet;
- sets its downstream tasks' repartition partitions to be read merged by writer;
- sends each of its upstream tasks' progress to every partition of the repartition topics the
  task writes, when it changed, at most every :data:`PROGRESS_INTERVAL_MS`: with "read all of
  its input", the offset each input partition ended at when it was read to its end. A
  downstream task that restarts finds what it knew of each writer in its commit, and an
  upstream task that restarts (on Spark, a slot that moved to another Python worker) finds the
  progress it last sent in its own, and sends none until its input has told it where it stands;
- reads, for its downstream tasks, where the input partitions of writers that said they read
  all of it end now (:class:`~fluvial.processor.completeness.InputEnds`), at most every
  :data:`ENDS_INTERVAL_S` while a task waits on such a writer.

The progress a task sends on a repartition topic covers only the inputs whose records can
reach that topic (:meth:`~fluvial.topology.topology.Subtopology.repartition_feeds`): the newest
timestamp it processed from them, and whether it has read all of them. A stream-table join's
table side, stamped with the wall clock while the stream carries older event times, would
otherwise claim a time the task's next records to the topic are far behind, and the
downstream windows would close before them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.processor.collector import RecordCollector, TaskId
from fluvial.processor.completeness import (
    PROGRESS_HEADER,
    PROGRESS_INTERVAL_MS,
    WRITER_HEADER,
    InputEnds,
    Positions,
    WriterState,
    encode_progress,
)
from fluvial.processor.task import StreamTask
from fluvial.runtime.clients import consumer_settings
from fluvial.topology.topology import Subtopology, Topology

METADATA_TIMEOUT_S = 30.0
#: How often the ends of idle writers' input partitions are read while a task waits on them.
ENDS_INTERVAL_S = 0.05
ENDS_TIMEOUT_S = 5.0

#: What a writer says on a repartition topic: (stream time, read all of its input, positions).
Progress = tuple[int, bool, Positions]

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


def writer_progress(
    task: StreamTask, feeds: frozenset[str], at_end: Mapping[tuple[str, int], int]
) -> Progress:
    """What ``task`` says on a repartition topic fed by the source topics ``feeds``: the
    newest timestamp it processed from them, whether it has read all of them (each partition
    fetched to its end, ``at_end`` with the end offset, and nothing left waiting), and if so
    where each ended."""
    partition = task.task_id.partition
    tps = [(t, partition) for t in sorted(feeds)]
    caught_up = all(tp in at_end and task.buffered_in(tp) == 0 for tp in tps)
    positions = tuple((t, p, at_end[(t, p)]) for t, p in tps) if caught_up else ()
    return task.input_time(feeds), caught_up, positions


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
        # Per sub-topology: each merged topic it writes, with the source topics that feed it.
        self._written: dict[int, list[tuple[str, frozenset[str]]]] = {
            sub.id: sorted((t, f) for t, f in sub.repartition_feeds().items() if t in self.merged)
            for sub in subs
        }
        log.debug("writers of repartition topics: %s; merged: %s; partitions: %s",
                  self.writers, sorted(self.merged),
                  {t: self.partitions.get(t) for t in self.writers})  # fmt: skip
        # Partitions read to their end, with the end offset, and no record since.
        self._at_end: dict[tuple[str, int], int] = {}
        # Partitions that gave records or reached their end since the worker started: until
        # all that feed a topic have, whether the task has read all of them is not known yet.
        self._seen: set[tuple[str, int]] = set()
        self._sent: dict[tuple[TaskId, str], Progress] = {}
        self._last_round = 0.0
        #: Where idle writers' input partitions end, for this worker's downstream tasks.
        self.ends = InputEnds()
        self._ends_read = 0.0
        self._ends_client: Consumer | None = None
        self._config = config

    def merge_inputs(
        self, task: StreamTask, restored: dict[tuple[str, int], dict[str, WriterState]]
    ) -> None:
        """Read the task's repartition partitions merged across their writers."""
        for topic in task.subtopology.source_topics:
            writers = self.writers.get(topic)
            if writers is not None and topic in self.merged:
                tp = (topic, task.task_id.partition)
                task.merge_by_writer(tp, writers, restored.get(tp), self.ends)

    # -- what the consumer says -----------------------------------------------------------------
    def reached_end(self, tp: tuple[str, int], offset: int) -> None:
        """``tp`` was read to its end, ``offset`` (the end for this worker's isolation level)."""
        self._at_end[tp] = offset
        self._seen.add(tp)

    def got_records(self, tps: Iterable[tuple[str, int]]) -> None:
        for tp in tps:
            self._at_end.pop(tp, None)
            self._seen.add(tp)

    def read_ends(self) -> None:
        """Read where the input partitions that downstream tasks wait on end now, at most every
        :data:`ENDS_INTERVAL_S`, in one request (the waiting tasks look again on their own). A
        client of its own asks: the worker's consumer keeps a fetch waiting on each broker
        connection, and a request behind it would wait too."""
        wanted = self.ends.wanted()
        now = time.monotonic()
        if not wanted or now - self._ends_read < ENDS_INTERVAL_S:
            return
        self._ends_read = now
        if self._ends_client is None:
            self._ends_client = Consumer(consumer_settings(self._config, client_suffix="-ends"))
        asked = [TopicPartition(t, p, OFFSET_END) for t, p in sorted(wanted)]
        try:
            answers = self._ends_client.offsets_for_times(asked, timeout=ENDS_TIMEOUT_S)
        except KafkaException as error:
            log.debug("cannot read where %d partition(s) end: %s", len(asked), error)
            return
        ends = {
            (a.topic, a.partition): a.offset for a in answers if a.error is None and a.offset >= 0
        }
        self.ends.update(ends, now)

    def close(self) -> None:
        if self._ends_client is not None:
            self._ends_client.close()
            self._ends_client = None

    def resume(self, task_id: TaskId, sent: tuple[Progress, ...] | None) -> None:
        """The progress ``task_id`` last sent and committed on each topic it writes (in
        :meth:`sent`'s order), from its commit metadata: the same progress is not sent again."""
        topics = [t for t, _feeds in self._written.get(task_id.subtopology, ())]
        if sent is None or len(sent) != len(topics):
            return  # none, or another layout's: sent afresh
        for topic, state in zip(topics, sent, strict=True):
            self._sent[(task_id, topic)] = state

    def sent(self, task_id: TaskId) -> tuple[Progress, ...] | None:
        """The progress ``task_id`` last sent on each merged topic it writes, in the order of
        those topics, for its commit metadata; None before it sent on each of them."""
        topics = [t for t, _feeds in self._written.get(task_id.subtopology, ())]
        states = [self._sent.get((task_id, t)) for t in topics]
        if not topics or any(s is None for s in states):
            return None
        return tuple(s for s in states if s is not None)

    # -- progress records -------------------------------------------------------------------------
    def wrote_after_progress(self, task_id: TaskId) -> None:
        """``task_id`` wrote records outside a processing round (its cache flushed at a commit).

        A downstream task takes a writer's record after its progress as a sign that the writer
        is working again, and waits for its next progress. So the next round sends this task's
        progress even if unchanged: after those records, saying again how far it has read.
        """
        for key in [k for k in self._sent if k[0] == task_id]:
            del self._sent[key]

    def send(self, tasks: Iterable[StreamTask], collector: RecordCollector) -> bool:
        """Send the progress of tasks that write repartition topics; whether anything was sent."""
        now = time.monotonic() * 1000
        if now - self._last_round < PROGRESS_INTERVAL_MS:
            return False
        self._last_round = now
        sent = False
        for task in tasks:
            inputs = [(t, task.task_id.partition) for t in task.subtopology.source_topics]
            if not all(tp in self._seen for tp in inputs):
                continue  # where it stands is not known yet: saying "behind" would be a write
            for topic, feeds in self._written.get(task.task_id.subtopology, ()):
                state = writer_progress(task, feeds, self._at_end)
                if state == self._sent.get((task.task_id, topic)):
                    continue
                if state[1]:
                    log.debug("task %s has read all of its input to %s (at %d)",
                              task.task_id, topic, state[0])  # fmt: skip
                self._send(task, topic, state, collector)
                sent = True
        return sent

    def _send(
        self, task: StreamTask, topic: str, state: Progress, collector: RecordCollector
    ) -> None:
        headers = [
            (PROGRESS_HEADER, encode_progress(*state)),
            (WRITER_HEADER, writer_id(task.task_id).encode()),
        ]
        for p in range(self.partitions.get(topic, 0)):
            collector.send(topic, None, None, max(state[0], 0), list(headers), p)
        self._sent[(task.task_id, topic)] = state
