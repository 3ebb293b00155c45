"""A worker: one slot's tasks, its consumer and producer, and the commit cycle.

The whole read-process-write loop and the commit sequence live here, so a reader can follow
them start to finish. A worker knows nothing of threads, processes or Spark: an engine decides
where and when :meth:`Worker.run_for` is called.

What changes for other reasons lives beside it: where tasks resume from their last commit
(:mod:`~fluvial.runtime.resume`), what a commit carries (:mod:`~fluvial.runtime.commit_metadata`),
how Kafka client calls are retried and bounded (:mod:`~fluvial.runtime.client_calls`),
backpressure (:mod:`~fluvial.runtime.backpressure`), the repartition purge
(:mod:`~fluvial.runtime.purge`) and what the worker reports (:mod:`~fluvial.runtime.reporting`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from fluvial.acls import authorization_error
from fluvial.config import StreamsConfig
from fluvial.iq.board import COMMITTED, RESTORING, RUNNING, STARTING
from fluvial.kafka.security import AuthorizationError
from fluvial.metrics import WorkerMetrics
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.backpressure import Backpressure
from fluvial.runtime.client_calls import (
    ClientCalls,
    FencedError,
    is_fenced,
    kafka_error_of,
    transactional_id,
)
from fluvial.runtime.clients import consumer_settings, producer_settings
from fluvial.runtime.collector import KafkaRecordCollector
from fluvial.runtime.commit_metadata import CommitMetadata
from fluvial.runtime.copartition_guard import PartitionGuard
from fluvial.runtime.global_tables import GlobalTables
from fluvial.runtime.horizon import ChangelogHorizon
from fluvial.runtime.intake import group_by_partition
from fluvial.runtime.progress import RepartitionProgress, writer_id
from fluvial.runtime.purge import RepartitionPurge
from fluvial.runtime.reporting import (
    input_lag,
    record_standby_lag,
    record_task_counters,
)
from fluvial.runtime.restore import Restorer
from fluvial.runtime.resume import Committed, read_committed, restore_to_commit, standby_needed
from fluvial.runtime.standby import StandbyTasks, standby_copies, standby_root
from fluvial.runtime.state import TaskState
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0
PROCESS_BATCH = 500
# How long an idle at-least-once worker waits for what lingered to be acknowledged.
IDLE_SEND_S = 0.01
# A loop's processing should take at most half the commit interval, within these bounds (ms).
LOOP_BUDGET_MS = (50, 500)


class Worker:
    """Runs a fixed set of tasks for one slot until stopped, committing every commit interval."""

    def __init__(
        self,
        slot: int,
        topology: Topology,
        config: StreamsConfig,
        task_ids: list[TaskId],
        *,
        stop: threading.Event | None = None,
        on_progress: Callable[[WorkerMetrics], None] | None = None,
        standby_task_ids: list[TaskId] | None = None,
        confirm_owner: Callable[[], None] | None = None,
        task_listener: Callable[[int, TaskId, int], None] | None = None,
    ) -> None:
        """``task_listener(slot, task, event)`` hears each task start restoring, run and stop,
        before its stores change, and each commit, after it reached them
        (:mod:`fluvial.iq.board`)."""
        self.slot = slot
        # Raises if this worker's driver is no longer the application's current one; called
        # right after the slot's transactional id is fenced (see fluvial.runtime.epoch).
        self.confirm_owner = confirm_owner
        self.task_listener = task_listener
        self.standby_task_ids = sorted(standby_task_ids or [])
        self.standbys: StandbyTasks | None = None
        self.global_tables: GlobalTables | None = None
        self.topology = topology
        self.config = config
        self.task_ids = sorted(task_ids)
        self.stop_event = stop or threading.Event()
        self.on_progress = on_progress
        self.metrics = WorkerMetrics(slot)
        #: Whether :meth:`run` commits when stopped; not when its driver was fenced.
        self.commit_on_stop = True
        self.state_root = Path(config.state_dir) / config.application_id
        self.eos = config.exactly_once
        self.tasks: dict[TaskId, StreamTask] = {}
        self.task_states: dict[TaskId, TaskState] = {}
        self._task_by_tp: dict[tuple[str, int], StreamTask] = {}
        self._backpressure = Backpressure()
        #: Records each task may process per loop (see _process).
        self._per_loop = PROCESS_BATCH
        self._producer: Producer | None = None
        self._calls = ClientCalls(slot, config, self.unauthorized)
        self._consumer: Consumer | None = None
        self._guard: PartitionGuard | None = None
        self._progress: RepartitionProgress | None = None
        self._collector: KafkaRecordCollector | None = None
        self._sent_when_idle = 0
        self._dirty = False
        self._last_commit = time.monotonic()
        self._purge = RepartitionPurge(config)
        self._records_out_base = 0
        self._unproduced_base = 0
        # What tasks counted before they were closed: a restart counts on from there.
        self._closed_task_counts: dict[str, dict[str, int]] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._paused = False  # between two Spark leases (pause, then run_for again)
        self._repartition_topics: set[str] = set()
        self._changelog_committed: dict[tuple[str, int], int] = {}
        # Each task's last committed (or restored) metadata: see _offsets_to_commit.
        self._metadata_committed: dict[TaskId, CommitMetadata] = {}
        # Window and session changelogs: the lowest offset each store may still need.
        self._horizons: dict[tuple[str, int], ChangelogHorizon] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Fence earlier holders of this slot, restore state, seek to the committed offsets."""
        txn_id = transactional_id(self.config.application_id, self.slot) if self.eos else None
        self._producer = Producer(producer_settings(self.config, txn_id))
        if self.eos:
            # Fence first: this aborts any transaction a previous holder of the slot left open,
            # so the changelogs and committed offsets read below are final.
            self._calls.call(
                lambda: self._calls.bounded(
                    lambda: self._producer.init_transactions(TIMEOUT_S), "init transactions"
                ),
                "init transactions",
            )
            if self.confirm_owner is not None:
                # After the fence, not before: a newer driver records itself before it fences
                # the slots, so either its fence comes after ours (and this worker can commit
                # nothing) or this check sees it.
                self.confirm_owner()
        changelogs: set[str] = set()
        time_retained: set[str] = set()
        for sub in self.topology.subtopologies(self.config.application_id):
            changelogs |= set(sub.changelog_topics().values())
            time_retained |= {
                topic
                for spec in sub.stores
                if spec.time_retained and (topic := spec.changelog_topic(sub.application_id))
            }
            self._repartition_topics |= set(sub.repartition_source_topics)
        self._collector = KafkaRecordCollector(
            self._producer,
            changelog_topics=changelogs,
            time_retained_topics=frozenset(time_retained),
            production_handler=self.config.default_production_exception_handler,
            transactional=self.eos,
        )
        # The collector counts its own sends; a restarted worker's count goes on from here.
        self._records_out_base = self.metrics.records_out
        self._unproduced_base = self.metrics.unproduced_records
        settings = consumer_settings(self.config, client_suffix=f"-{self.slot}")
        # A partition's end tells a task it may go on without it (StreamTask.reached_end), and
        # "read all of its input" is part of a task's progress (fluvial.runtime.progress).
        settings["enable.partition.eof"] = True
        self._consumer = Consumer(settings)
        consumer = self._consumer
        self._progress = (
            self._calls.call(
                lambda: RepartitionProgress(self.topology, self.config, consumer),
                "read topic metadata",
            )  # fmt: skip
            if self.config.catch_up_completeness
            else None
        )
        self._guard = self._partition_guard()
        committed = read_committed(consumer, self._calls, self._all_tps())
        self._committed.update({tp: offset for tp, (offset, _) in committed.items()})
        # Global tables are complete before any stream task looks anything up in them.
        self.global_tables = GlobalTables(self.topology, self.config)
        self.global_tables.bootstrap()
        self._open_tasks(committed)
        # A partition that never had a commit starts where its source says: the earliest
        # offset (-2) or the latest (-1).
        resets = {
            topic: OFFSET_END if source.auto_offset_reset == "latest" else OFFSET_BEGINNING
            for sub in self.topology.subtopologies(self.config.application_id)
            for topic, source in sub.source_node_for().items()
        }
        self._consumer.assign(
            [
                TopicPartition(
                    t, p, committed.get((t, p), (resets.get(t, OFFSET_BEGINNING), -1))[0]
                )
                for t, p in self._all_tps()
            ]
        )
        self._backpressure.paused.clear()
        if self.standby_task_ids:
            self.standbys = StandbyTasks(
                self.topology,
                self.config,
                self.standby_task_ids,
                standby_root(self.state_root, self.slot),
                self.metrics,
            )
            self.standbys.start(
                standby_needed(consumer, self._calls, self.topology, self.config, self.standbys)
            )
            self.refresh_standby_lag()
        if self.eos:
            self._producer.begin_transaction()
        self._last_commit = time.monotonic()

    def _partition_guard(self) -> PartitionGuard | None:
        """The co-partitioning guard over this worker's joined and table topics, if any."""
        if self.config.co_partitioning_check == "off":
            return None
        mine = {t for t, _ in self._all_tps()}
        keyed = sorted(self.topology.keyed_source_topics() & mine)
        if not keyed:
            return None
        consumer = self._consumer
        assert consumer is not None
        counts: dict[str, int] = {}
        for topic in keyed:
            meta = self._calls.call(lambda t=topic: consumer.list_topics(t, timeout=TIMEOUT_S),
                                    "read topic metadata").topics.get(topic)  # fmt: skip
            if meta is not None and meta.error is None and meta.partitions:
                counts[topic] = len(meta.partitions)

        def count(n: int) -> None:
            self.metrics.copartition_mismatches += n

        return PartitionGuard(self.config.co_partitioning_check, counts, count)

    def _all_tps(self) -> list[tuple[str, int]]:
        subs = {s.id: s for s in self.topology.subtopologies(self.config.application_id)}
        return sorted(
            (topic, task_id.partition)
            for task_id in self.task_ids
            for topic in subs[task_id.subtopology].source_topics
        )

    def _open_tasks(self, committed: Committed) -> None:
        subs = {s.id: s for s in self.topology.subtopologies(self.config.application_id)}
        # Known before the first restore, so progress reads "k of n" with a fixed n.
        self.metrics.stores_to_restore = sum(
            len(subs[t.subtopology].changelog_topics()) for t in self.task_ids
        )
        self.metrics.stores_restored = 0
        restorer = Restorer(self.config, self.metrics)
        try:
            for task_id in self.task_ids:
                task_dir = self.state_root / str(task_id)
                progress = self._progress
                task = StreamTask(task_id, subs[task_id.subtopology], self.config, task_dir,
                                  self._collector, global_stores=self.global_tables.stores,
                                  writer_id=writer_id(task_id) if progress else None,
                                  merged_topics=progress.merged if progress else frozenset())  # fmt: skip
                task.wait_for_unfetched = True  # this consumer reports partition ends
                state = TaskState(task, task_dir)
                self.task_states[task_id] = state
                self._announce(task_id, RESTORING)  # before the restore changes its stores
                # A standby copy on this machine that is further along saves restoring. Only
                # under exactly-once: an at-least-once standby may hold changelog writes past
                # the committed offsets, which the restore below deliberately leaves out.
                state.open(adopt=standby_copies(self.state_root, task_id) if self.eos else ())
                metadata, horizons = restore_to_commit(
                    task, state, committed, restorer, progress, exactly_once=self.eos
                )
                self._changelog_committed.update(metadata.changelog_ends)
                self._metadata_committed[task_id] = metadata
                if progress is not None:
                    progress.resume(task_id, metadata.progress)
                self._horizons.update(horizons)
                task.initialize()
                self.tasks[task_id] = task
                for topic in task.subtopology.source_topics:
                    self._task_by_tp[(topic, task_id.partition)] = task
                self._announce(task_id, RUNNING)
        finally:
            restorer.close()

    def _announce(self, task_id: TaskId, event: int) -> None:
        if self.task_listener is not None:
            self.task_listener(self.slot, task_id, event)

    def close(self, *, clean: bool = True) -> None:
        """Commit (if ``clean``) and release everything. A dirty close commits nothing."""
        try:
            if clean and self._producer is not None:
                self.commit(force=True)
                self._purge.purge(self._committed, self._repartition_topics)
        finally:
            for task_id in self.task_states:
                self._announce(task_id, STARTING)
            # Standby copies first: whoever waits for this worker's task directories may take
            # one over once it has them.
            if self.standbys is not None:
                self.standbys.close()
                self.standbys = None
            # A dirty close discards cached writes: flushing them would hand uncommitted
            # results to processors and to a transaction that is being abandoned.
            for task in self.tasks.values():
                task.close(clean=clean)
            self._fold_task_counts()
            for state in self.task_states.values():
                state.close(clean=clean)
            self.tasks.clear()
            self.task_states.clear()
            if self.global_tables is not None:
                self.global_tables.close()
                self.global_tables = None
            self._task_by_tp.clear()
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            if self._progress is not None:
                self._progress.close()
            if self._producer is not None and self._calls.hung:
                # A call is still blocked inside it: any other call could block as well.
                self._calls.hung = False
                self._producer = None
                self._collector = None
            if self._producer is not None:
                if self.eos and not clean:
                    # Fenced or already aborted is fine: nothing of it becomes visible.
                    with contextlib.suppress(Exception):
                        self._producer.abort_transaction(5)
                if clean:
                    self._producer.flush(5)
                else:
                    # A fenced producer raises here, as a KafkaException or, when the fatal
                    # error lands while a delivery callback runs, as the client's SystemError;
                    # the failure that led here is the one to report, not this.
                    with contextlib.suppress(Exception):
                        self._producer.flush(5)
                self._producer = None
                self._collector = None  # it holds the producer too

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Run until the stop event is set, then commit and close."""
        try:
            # Inside the try: a start that fails half-way (a broker down during restore) must
            # still release the stores it opened, or the next attempt finds them locked.
            self.start()
            while not self.stop_event.is_set():
                self.run_once()
        except BaseException as exc:
            failure = self.fatal_cause(exc)
            self.close(clean=False)
            error = kafka_error_of(failure)
            if error is not None and is_fenced(error):
                raise FencedError(
                    f"slot {self.slot} was fenced: a newer instance runs its tasks now, so this "
                    "one stops and its open transaction is discarded"
                ) from exc
            denied = self.unauthorized(failure)
            if denied is not None and denied is not exc:
                raise denied from exc
            raise
        self.close(clean=self.commit_on_stop)

    def fatal_cause(self, failure: BaseException) -> BaseException:
        """``failure``, or the producer's own fatal error when ``failure`` only says there is one.

        Once the transactional producer has hit a fatal error in the background (its
        transactional id refused by the authorizer, or fenced), the next ``produce`` fails with
        "Local: Fatal error", which names neither. The producer still holds the real error and
        answers any transactional call with it; call this before the producer is closed.
        """
        error = kafka_error_of(failure)
        if error is None or error.code() != KafkaError._FATAL or self._producer is None:
            return failure
        try:
            self._producer.begin_transaction()
        except KafkaException as probe:
            real = kafka_error_of(probe)
            if real is not None and real.fatal() and real.code() != KafkaError._FATAL:
                probe.__cause__ = failure
                return probe
        except Exception:  # noqa: BLE001 - the probe is best effort: the failure stands
            pass
        return failure

    def unauthorized(self, failure: BaseException) -> AuthorizationError | None:
        """The clear, fatal error if a missing ACL caused ``failure`` (see fluvial.acls)."""
        if not isinstance(failure, Exception):
            return None
        return authorization_error(self.topology, self.config, failure)

    def run_for(self, seconds: float, *, until: threading.Event | None = None) -> None:
        """Run the loop for a while (a lease), leaving the worker open for the next one;
        ``until`` ends it early (the driver stops)."""
        deadline = time.monotonic() + seconds
        if self._paused:
            self._paused = False
            if self._progress is not None:
                self._progress.ends.forget()  # the writers' input may have grown meanwhile
        while time.monotonic() < deadline and not self.stop_event.is_set():
            if until is not None and until.is_set():
                return
            self.run_once()

    def run_once(self) -> None:
        """Poll, process what may be processed, punctuate, and commit when the interval is up."""
        assert self._consumer is not None
        buffered = any(t.has_ready_records() for t in self.tasks.values())
        messages = self._consumer.consume(PROCESS_BATCH, 0.0 if buffered else 0.05)
        # Grouped by partition, so each task gets its records in one call, in offset order.
        batches, at_end = group_by_partition(messages, self._task_by_tp)
        for (topic, partition), batch in batches.items():
            if self._guard is not None:
                self._guard.check(topic, partition, batch)
            self._task_by_tp[(topic, partition)].add_records(topic, partition, batch)
            self.metrics.records_in += len(batch)
        for topic, partition, _end in at_end:
            task = self._task_by_tp.get((topic, partition))
            if task is not None:
                task.reached_end(topic, partition)
        progress = self._progress
        if progress is not None:
            # A partition's end comes after its records in one batch: records first.
            progress.got_records(batches)
            for topic, partition, end in at_end:
                progress.reached_end((topic, partition), end)
            if any(tp[0] in self._repartition_topics for tp in batches):
                self._dirty = True  # progress records alone move the offsets to commit
            progress.read_ends()  # after the records: see InputEnds
        if self.global_tables is not None:
            self.global_tables.poll(0.0)
        self._process()
        if (
            progress is not None
            and self._collector is not None
            and progress.send(self.tasks.values(), self._collector)
        ):
            self._dirty = True
        if self.standbys is not None:
            self.metrics.standby_applied += self.standbys.poll()
        self._backpressure.apply(self._consumer, self._task_by_tp)
        if self._commit_due():
            self.commit()
        elif not self.eos and len(messages) < PROCESS_BATCH:
            self._send_lingering()

    def _send_lingering(self) -> None:
        """With nothing left to process, send what the producer holds for its linger.

        The producer lingers (100 ms by default) so that a busy worker sends full batches.
        At-least-once output is visible once it is sent, so a quiet input must not wait out
        the linger; under exactly-once nothing is visible before the commit, whose flush
        sends everything anyway.
        """
        collector = self._collector
        assert collector is not None and self._producer is not None
        if collector.sent == self._sent_when_idle:
            return
        if any(t.has_ready_records() for t in self.tasks.values()):
            return
        self._sent_when_idle = collector.sent
        self._producer.flush(IDLE_SEND_S)

    def _process(self) -> None:
        started = time.monotonic()
        now_ms = int(time.time() * 1000)
        for task in self.tasks.values():
            # Each record with the stream-time punctuations it makes due (see process_batch).
            processed = task.process_batch(self._per_loop, now_ms)
            if processed:
                self._dirty = True
                self.metrics.records_processed += processed
            if task.punctuate_wall_clock(now_ms):
                self._dirty = True
        assert self._collector is not None
        self.metrics.records_out = self._records_out_base + self._collector.records_out
        self.metrics.unproduced_records = self._unproduced_base + self._collector.skipped_errors
        self._adapt_per_loop((time.monotonic() - started) * 1000)

    def _adapt_per_loop(self, elapsed_ms: float) -> None:
        """Fewer records per task and loop while a loop's processing overruns its budget (half
        the commit interval), more again once it takes under a quarter of it, as Kafka Streams'
        thread adapts its iterations. With slow user functions a loop of 500 records per task
        could take seconds: commits and wall-clock punctuations would come that late, and the
        consumer would be polled that seldom. Fetched records wait in librdkafka's queue in
        fetch order, one queue for all partitions, so a repartition topic's records behind an
        input backlog are reached only as fast as the loop polls."""
        low, high = LOOP_BUDGET_MS
        budget_ms = min(max(int(self.config.commit_interval_ms) / 2, low), high)
        if elapsed_ms > budget_ms:
            self._per_loop = max(1, self._per_loop // 2)
        elif elapsed_ms < budget_ms / 4 and self._per_loop < PROCESS_BATCH:
            self._per_loop = min(PROCESS_BATCH, self._per_loop * 2)

    def _commit_due(self) -> bool:
        elapsed_ms = (time.monotonic() - self._last_commit) * 1000
        requested = any(t.commit_requested for t in self.tasks.values()) or any(
            s.uncommitted_full() for s in self.task_states.values()
        )
        return requested or elapsed_ms >= int(self.config.commit_interval_ms)

    # -- the commit cycle -------------------------------------------------------------------

    def pause(self) -> None:
        """Commit before a pause in which this worker reads nothing (it waits for its next
        Spark lease). Nothing more is written: an idle application writes nothing. When the
        next lease starts, its downstream tasks read the ends of idle writers' input afresh
        (:meth:`run_for`): a writer whose input grew during the pause holds time back until
        it has read it."""
        self.commit()
        self._paused = True

    def commit(self, *, force: bool = False) -> None:
        """Commit outputs, state changes and input offsets together.

        Exactly-once: flush the stores (their changelog records are already in the open
        transaction), add the input offsets to the transaction, commit it, then make the
        buffered store writes durable locally. At-least-once: flush, wait for every send to be
        acknowledged, then commit the offsets.
        """
        assert self._producer is not None and self._consumer is not None
        assert self._collector is not None
        if not self._dirty and not force:
            if self.standbys is not None:
                self.standbys.checkpoint()  # they move on while the active tasks are idle
            self._last_commit = time.monotonic()
            return
        started = time.monotonic()
        # Flush caches and stores first: their records must be in the transaction (or acked)
        # before the offsets that produced them are committed. The offsets never run ahead.
        progress = self._progress
        for task in self.tasks.values():
            written = self._collector.records_out
            task.flush()
            if progress is not None and self._collector.records_out != written:
                # A cache flushed records after the task's last progress record: the next
                # progress must follow them, or a downstream task waits for this writer forever.
                progress.wrote_after_progress(task.task_id)
        self._collector.release()
        self._calls.call(lambda: self._producer.flush(TIMEOUT_S), "flush")
        self._collector.check()
        # The task's stream time and changelog offsets ride along in the offset metadata, so
        # the next start knows the state that belongs with these offsets. Only after the flush
        # are the changelog's ends known: every record of this interval has been acknowledged.
        # Ends read earlier would leave out this interval's last state changes, and an
        # at-least-once restore that stops there would lose them.
        self._changelog_committed.update(
            {tp: last + 1 for tp, last in self._collector.changelog_end.items()}
        )
        for task in self.tasks.values():
            for tp in task.changelog_partitions().values():
                horizon = self._horizons.get(tp)
                if horizon is not None:
                    last = self._collector.changelog_end.get(tp)
                    end = last + 1 if last is not None else 0
                    newest = self._collector.newest_timestamp.get(tp, horizon.newest_written)
                    horizon.committed(end, task.stream_time, newest)
        changed, metadata = self._offsets_to_commit()
        encoded = {task_id: m.encode() for task_id, m in metadata.items()}
        tps = [
            TopicPartition(t, p, off, metadata=encoded[self._task_by_tp[(t, p)].task_id])
            for (t, p), off in sorted(changed.items())
        ]
        if self.eos:
            if tps:
                group = self._consumer.consumer_group_metadata()
                self._calls.call(
                    lambda: self._calls.bounded(
                        lambda: self._producer.send_offsets_to_transaction(tps, group, TIMEOUT_S),
                        "send offsets",
                    ),
                    "send offsets",
                )
            self._calls.call(
                lambda: self._calls.bounded(
                    lambda: self._producer.commit_transaction(TIMEOUT_S), "commit"
                ),
                "commit",
            )
        elif tps:
            self._calls.call(
                lambda: self._consumer.commit(offsets=tps, asynchronous=False), "commit"
            )
        # Only now is the changelog durable in Kafka: the local stores may record it.
        for task_id, state in self.task_states.items():
            state.committed(self._collector.changelog_end)
            self._announce(task_id, COMMITTED)
        self._collector.changelog_end.clear()
        self._committed.update(changed)
        self._metadata_committed.update(metadata)
        if self.standbys is not None:
            self.standbys.checkpoint()
        if self.eos:
            self._producer.begin_transaction()
        self._dirty = False
        self._last_commit = time.monotonic()
        self.metrics.record_commit(time.monotonic() - started)
        self._refresh_metrics()
        if self._purge.due():
            self._purge.purge(self._committed, self._repartition_topics)

    def _offsets_to_commit(self) -> tuple[dict[tuple[str, int], int], dict[TaskId, CommitMetadata]]:
        """Each task's input offsets to commit, and the metadata that goes with them.

        A task commits every partition it has an offset for, each with the same metadata, once
        an offset or the metadata changed since its last commit. The metadata can change alone:
        a merged repartition partition keeps its offset at a held record of a slow writer while
        the task takes other writers' records above it, and what it took must be committed, or
        a restart processes those records again. Every partition carries the newest metadata,
        so a restart cannot read an older one from a partition that was left out.
        """
        offsets: dict[tuple[str, int], int] = {}
        metadata: dict[TaskId, CommitMetadata] = {}
        for task_id, task in self.tasks.items():
            task_offsets = task.committable_offsets()
            if not task_offsets:
                # Nothing read since the task was opened, yet its metadata may have changed
                # (the progress it sent as a writer): it goes with the offsets last committed.
                # Left out, a task opened anew in every Spark lease would send that progress
                # again in each one.
                inputs = [(t, task_id.partition) for t in task.subtopology.source_topics]
                task_offsets = {tp: self._committed[tp] for tp in inputs if tp in self._committed}
                if not task_offsets:
                    continue
            last = self._metadata_committed.get(task_id, CommitMetadata())
            current = self._metadata(task, last.sequence)
            if current == last and all(
                self._committed.get(tp) == off for tp, off in task_offsets.items()
            ):
                continue
            offsets.update(task_offsets)
            metadata[task_id] = dataclasses.replace(current, sequence=last.sequence + 1)
        return offsets, metadata

    def _metadata(self, task: StreamTask, sequence: int) -> CommitMetadata:
        ends = {
            tp: self._changelog_committed[tp]
            for tp in task.changelog_partitions().values()
            if tp in self._changelog_committed
        }
        needed = {
            tp: self._horizons[tp].needed()
            for tp in task.changelog_partitions().values()
            if tp in self._horizons
        }
        writers = task.writer_states()
        sent = self._progress.sent(task.task_id) if self._progress is not None else None
        return CommitMetadata(task.stream_time, ends, needed, True, writers, sequence,
                              task.input_times(), sent)  # fmt: skip

    # -- metrics ----------------------------------------------------------------------------

    def _fold_task_counts(self) -> None:
        """Keep what the tasks counted: they are opened anew (from zero) on a restart."""
        if not self.tasks:
            return
        record_task_counters(self.metrics, self.tasks, self._closed_task_counts)
        self._closed_task_counts = self.metrics.task_metrics

    def _refresh_metrics(self) -> None:
        assert self._consumer is not None
        record_task_counters(self.metrics, self.tasks, self._closed_task_counts)
        if self._collector is not None:
            self.metrics.unproduced_records = self._unproduced_base + self._collector.skipped_errors
        self.metrics.lag = input_lag(self._consumer, self._task_by_tp, self.metrics.lag)
        self.refresh_standby_lag()
        if self.on_progress is not None:
            self.on_progress(self.metrics)

    def refresh_standby_lag(self, *, fresh: bool = False) -> None:
        """Record how many changelog records the standby stores have not applied yet.

        By default against the changelogs' ends seen in the standby consumer's last fetches
        (which count the records of transactions still open too, and cost no round trip);
        ``fresh`` asks the broker for their last stable offsets instead.
        """
        if self.standbys is None:
            return
        record_standby_lag(self.metrics, self.standbys, fresh=fresh)
