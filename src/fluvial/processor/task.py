"""``StreamTask``: one sub-topology over one partition number, driven by a runtime or the test driver.

The runtime feeds raw records in (:meth:`StreamTask.add_records`), calls
:meth:`process_batch` (or :meth:`process_one`) and the punctuation methods in a loop, and at
every commit calls :meth:`flush` and then reads :meth:`committable_offsets`. Everything the task produces (outputs, repartition records,
changelog records) goes to the :class:`~fluvial.processor.collector.RecordCollector` as bytes.
The task knows nothing of Kafka or of threads.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls user code in timestamp extractors, processors'
``init``/``process``/``close``, punctuators and the exception handlers, and checks what
extractors return.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from fluvial.config import StreamsConfig, to_millis
from fluvial.errors import FluvialError, SerializationError, StreamsError
from fluvial.processor.collector import (
    ORIGIN_HEADER,
    ConsumedRecord,
    RecordCollector,
    TaskId,
    decode_origin,
    encode_origin,
)
from fluvial.processor.completeness import InputEnds, WriterMergeQueue, WriterState
from fluvial.processor.context import LiveNode, NodeContext
from fluvial.processor.fusion import Step, link
from fluvial.processor.metrics import (
    CHANGELOG_RECORDS,
    DEAD_LETTERS,
    DESERIALIZATION_ERRORS,
    DROPPED_RECORDS,
    INVALID_TIMESTAMPS,
    PROCESSING_ERRORS,
    PUNCTUATIONS,
    RECORDS_PROCESSED,
    TaskMetrics,
)
from fluvial.processor.nodes import SinkProcessor, SourceProcessor
from fluvial.processor.punctuation import PunctuationQueue, PunctuationSchedule
from fluvial.processor.stores import StoreStack, create_store_stack, typed_view
from fluvial.processor_api import Cancellable, PunctuationType, Punctuator
from fluvial.records import Record
from fluvial.state.base import ChangelogMessage, ChangelogRecord, StateStore
from fluvial.state.caching import ThreadCache, discard_caches
from fluvial.topology.nodes import IN_MEMORY, ROCKSDB, ProcessorNode, SinkNode, SourceNode
from fluvial.topology.topology import Subtopology

log = logging.getLogger(__name__)

_SKIPPED = SerializationError("skipped")  # a record already dealt with: not processed


class _ExtractionError(SerializationError):
    """A record's timestamp extractor failed or gave no valid time."""


TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RecordContext:
    """Metadata of what is being processed now: an input record, or a punctuation (no topic)."""

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp_ms: int


class ExtractedRecord(NamedTuple):
    """A consumed record of a source with a timestamp extractor, read when it was added.

    Its first fields are a :class:`ConsumedRecord`'s (raw bytes, offset, headers), with
    ``timestamp_ms`` the extracted event time, so that record choice, stream time and dead
    letters treat it like any other. ``error`` is set when the record could not be
    deserialized or its extraction failed: it then goes the deserialization handler's way.
    """

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    offset: int
    headers: Sequence[tuple[str, bytes | None]]
    decoded_key: Any = None
    decoded_value: Any = None
    error: SerializationError | None = None


class _WatchedCollector:
    """A collector that remembers what its ``send`` raised, for the processing handler."""

    def __init__(self, inner: RecordCollector, task: StreamTask) -> None:
        self.inner = inner
        self.task = task

    def send(self, *args: Any) -> None:
        try:
            self.inner.send(*args)
        except BaseException as exc:
            self.task._collector_error = exc
            raise


#: Container allocations between young-generation collections in a process that runs tasks.
#: The per-record path allocates tuples, lists and records that die at once; Python's default
#: (700) ran the cyclic collector every few dozen records, about a tenth of the path's CPU
#: (``fluvial bench hotpath``). 20,000 young objects are a few MB at most.
GC_YOUNG_THRESHOLD = 20_000


def collect_young_garbage_less_often() -> None:
    """Raise the young generation's collection threshold to :data:`GC_YOUNG_THRESHOLD`, never
    lower it (a process that set a higher one keeps it). Older generations keep their ratios."""
    young, middle, old = gc.get_threshold()
    if 0 < young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


class StreamTask:
    """Runs one sub-topology for one partition: record choice, stream time, stores, punctuation."""

    def __init__(
        self,
        task_id: TaskId | tuple[int, int],
        subtopology: Subtopology,
        config: StreamsConfig,
        state_dir: Path | str | None,
        collector: RecordCollector,
        *,
        default_store_type: str | None = None,
        input_partitions: Iterable[TopicPartition] | None = None,
        global_stores: dict[str, StateStore] | None = None,
        wall_clock_ms: int | None = None,
        transactional: bool = True,
        writer_id: str | None = None,
        merged_topics: frozenset[str] = frozenset(),
    ) -> None:
        """``transactional=False`` leaves persistent stores without their transactional layer:
        for GlobalKTable stores, which are rebuilt from their topics and never committed.
        ``writer_id``: set when repartition topics carry their writers' progress
        (:mod:`fluvial.processor.completeness`); records this task writes to the
        ``merged_topics`` (those with several writers) say so."""
        collect_young_garbage_less_often()
        self.task_id = TaskId(*task_id)
        self.subtopology = subtopology
        self.config = config
        self.application_id = subtopology.application_id
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._guarded = config.processing_exception_handler == "log_and_continue"
        # The producer's own failure, told apart from a user's by identity, never skipped.
        self._collector_error: BaseException | None = None
        self.collector = _WatchedCollector(collector, self) if self._guarded else collector
        # Persistent by default when there is somewhere to persist to, as in Kafka Streams.
        self.default_store_type = default_store_type or (
            ROCKSDB if self.state_dir is not None else IN_MEMORY
        )
        self.metrics = TaskMetrics()
        # Counted as plain ints on the hot path; the metrics read them when asked.
        self.processed = 0
        self.metrics.register(RECORDS_PROCESSED, lambda: self.processed)
        self._entries: dict[str, tuple[Any, Any, Step, bool, list[int] | None, bool]] = {}
        self.stream_time = -1  # unknown until the first record
        # Wall-clock punctuators first fire one interval after the wall-clock time they were
        # scheduled at. Until a runtime reports the time, schedules count from 0 and are moved
        # to the first reported time (see _observe_wall_clock).
        self._wall_clock_known = wall_clock_ms is not None
        self.wall_clock_ms = 0 if wall_clock_ms is None else wall_clock_ms
        self.commit_requested = False
        # What is being processed now (see :attr:`current`): plain fields, set per record
        # without building an object.
        self.current_topic: str | None = None
        self.current_partition: int | None = None
        self.current_offset: int | None = None
        self.current_timestamp_ms = -1

        if input_partitions is None:
            input_partitions = [(t, self.task_id.partition) for t in subtopology.source_topics]
        # Queues in a fixed order: ties on head timestamp go to the first, deterministically.
        self._queues: dict[TopicPartition, deque[ConsumedRecord | ExtractedRecord]] = {
            tp: deque() for tp in input_partitions
        }
        self._consumed: dict[TopicPartition, int] = {}
        # Repartition partitions read merged across their writers (see merge_by_writer).
        self._merged: dict[TopicPartition, WriterMergeQueue] = {}
        self.writer_id = writer_id
        self.merged_topics = merged_topics
        self._sources = subtopology.source_node_for()
        # Event time from the payload: a source's own extractor, else the config's default for
        # user topics. Internal topics keep the timestamps written into them (already extracted).
        self._extractors: dict[str, Callable[[Any, int], int]] = {}
        for name in subtopology.node_names:
            node = subtopology.nodes[name]
            if isinstance(node, SourceNode):
                for topic in node.topics:
                    resolved = subtopology.resolve(topic)
                    internal = resolved != topic
                    extractor = node.timestamp_extractor or (
                        None if internal else config.default_timestamp_extractor
                    )
                    if extractor is not None:
                        self._extractors[resolved] = extractor
        self._partition_time: dict[TopicPartition, int] = {}
        # Per source topic, [newest, earliest] timestamp processed (-1: none yet), updated in
        # the task loop only when a bound moves. Catch-up progress on a repartition topic
        # reads the newest of the topics that can reach it (input_time); a stream-table join
        # reads the earliest of its table's (earliest_time).
        self._topic_times: dict[str, list[int]] = {topic: [-1, -1] for topic in self._sources}
        self._reaching: dict[str, frozenset[str]] = {}
        # Resumed from a commit that gave no per-topic times: operators start from stream time.
        self._input_times_unknown = False
        # What is processed now, as consumed: the dead letter of a processing error.
        self._current_raw: ConsumedRecord | ExtractedRecord | None = None
        self._flushing = False
        self._idle_since: int | None = None
        self._max_idle_ms = to_millis(config.max_task_idle_ms, "max_task_idle_ms")
        #: Set by a worker whose consumer reports each partition's end: with max_task_idle_ms
        #: 0, the task then waits for an empty partition until it is known to be at its end,
        #: as Kafka Streams does (KIP-695); otherwise another partition's records could move
        #: stream time past the records still to be fetched, which become late.
        self.wait_for_unfetched = False
        self._at_end: set[TopicPartition] = set()

        # One byte budget for all of the task's record caches, evicting LRU across them.
        self.cache = ThreadCache(int(config.cache_max_bytes))
        self._specs = {spec.name: spec for spec in subtopology.stores}
        self._changelogs = subtopology.changelog_topics()
        # Each store built once, bottom up, with its layers named (processor/stores.py).
        self.store_stacks: dict[str, StoreStack] = {
            spec.name: create_store_stack(
                spec, self.default_store_type, self.cache, transactional=transactional
            )
            for spec in subtopology.stores
        }
        self.stores: dict[str, StateStore] = {
            name: stack.store for name, stack in self.store_stacks.items()
        }
        # GlobalKTable stores: owned and updated by the global task, read here.
        self.global_stores: dict[str, StateStore] = dict(global_stores or {})
        self._typed: dict[str, Any] = {}
        self._nodes: dict[str, LiveNode] = {}
        self._stream_punctuations = PunctuationQueue()
        self._wall_punctuations = PunctuationQueue()
        self._stores_open = False
        self._initialized = False
        self._closed = False
        # Interactive queries read the stores from other threads; closing waits for a read in
        # progress, and a read never starts on a closed store.
        self.query_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------
    def open_stores(self) -> None:
        """Open every store. The runtime restores changelogs after this and before initialize()."""
        if self._stores_open:
            return
        for name, stack in self.store_stacks.items():
            stack.store.init(self._store_dir())
            topic = self._changelogs.get(name)
            if topic is not None:
                stack.set_changelog_listener(self._changelog_sender(topic))
        self._stores_open = True

    def restore(self, store_name: str, records: Iterable[ChangelogRecord]) -> None:
        """Apply changelog records to a store; must happen before :meth:`initialize`."""
        self._store_to_restore(store_name).restore(records)

    def restore_batch(self, store_name: str, batch: Sequence[ChangelogMessage]) -> None:
        """As :meth:`restore`, for changelog records as the consumer returned them."""
        self._store_to_restore(store_name).restore_batch(batch)

    def _store_to_restore(self, store_name: str) -> StateStore:
        if self._initialized:
            raise StreamsError("restore stores before initialize(): processors read them in init")
        self.open_stores()
        return self.stores[store_name]

    def resume_stream_time(self, stream_time_ms: int, input_times: Sequence[int] = ()) -> None:
        """Set the stream time a previous run committed (e.g. kept in offset metadata), and
        the newest time of each source topic (:meth:`input_times`), if it said.

        Call before :meth:`initialize`, so that operators which act on closed windows know
        what was already final before the restart.
        """
        if self._initialized:
            raise StreamsError("resume_stream_time() must come before initialize()")
        self.stream_time = max(self.stream_time, stream_time_ms)
        topics = self.subtopology.source_topics
        if len(input_times) == len(topics) > 1:
            for topic, newest in zip(topics, input_times, strict=True):
                times = self._topic_times.get(topic)
                if times is not None and newest > times[0]:
                    times[0] = newest
        elif len(topics) > 1 and stream_time_ms >= 0:
            self._input_times_unknown = True

    def input_times(self) -> tuple[int, ...]:
        """The newest timestamp processed from each source topic, in the sub-topology's order,
        when there are several (with one, it is the stream time)."""
        topics = self.subtopology.source_topics
        if len(topics) < 2:
            return ()
        return tuple(self._topic_times[t][0] if t in self._topic_times else -1 for t in topics)

    def stream_time_into(self, node_name: str) -> int:
        """The stream time of the inputs whose records reach ``node_name``: where an operator
        that closes windows starts after a restart. A joined table's input, which reaches the
        join only through its store, never moves it."""
        reaching = self.sources_reaching(node_name)
        if self._input_times_unknown or reaching >= self._topic_times.keys():
            return self.stream_time
        return self.input_time(reaching)

    def changelog_partitions(self) -> dict[str, TopicPartition]:
        """Store name -> (changelog topic, partition) for stores with a changelog."""
        return {name: (topic, self.task_id.partition) for name, topic in self._changelogs.items()}

    def initialize(self) -> None:
        """Build the live processor graph and call every processor's ``init``."""
        if self._initialized:
            return
        self.open_stores()
        sub = self.subtopology
        for name in sub.node_names:
            spec = sub.nodes[name]
            # What a user's supplier returns need only have init, process and close: not
            # typed as a Processor, so the compiled task takes it as any object.
            processor: Any
            stores: list[str] = []
            if isinstance(spec, SourceNode):
                processor = SourceProcessor()
            elif isinstance(spec, SinkNode):
                topic = sub.resolve(spec.topic)
                repartition = topic in sub.repartition_topics_written()
                processor = SinkProcessor(
                    topic,
                    spec.key_serde,
                    spec.value_serde,
                    self.collector,
                    spec.partitioner,
                    count_metric=not repartition,
                    writer_id=self.writer_id if topic in self.merged_topics else None,
                    # Read by the dead-letter path only: without a dead-letter topic no
                    # record carries it (a header less to write, read and strip per record).
                    origin=(
                        self.origin_header
                        if repartition and self.config.dead_letter_topic
                        else None
                    ),
                )
            else:
                assert isinstance(spec, ProcessorNode) and spec.supplier is not None
                supplier: Callable[[], object] = spec.supplier  # its result is not checked
                processor = supplier()
                stores = list(spec.stores)
            self._nodes[name] = LiveNode(name, processor, stores)
        for name in sub.node_names:
            self._nodes[name].children = [self._nodes[c] for c in sub.nodes[name].children]
        # Runs of stateless operators become one step each; every node gets its entry. Before
        # the contexts: a context forwards to its children's entries.
        steps = link(self._nodes.values(), self._guard if self._guarded else None)
        for name in sub.node_names:  # sources first, so parents are ready before children
            live = self._nodes[name]
            live.processor.init(NodeContext(self, live))
        # Per source topic: its serdes and the step its records enter the graph with.
        # With one source topic its times are the stream time's: nothing to track per record.
        tracked = len(self._sources) > 1
        internal = set(sub.repartition_source_topics)
        self._entries = {
            topic: (source.key_serde, self._value_serde(topic, source), steps[source.name],
                    topic in self._extractors, self._topic_times[topic] if tracked else None,
                    topic in internal)
            for topic, source in self._sources.items()
        }  # fmt: skip
        self._initialized = True

    def _value_serde(self, topic: str, source: SourceNode) -> Any:
        """The serde the task decodes ``topic``'s values with; None leaves them as bytes.

        A repartition topic read only by processors that never look at values (a windowed
        count) skips decoding them. fluvial wrote those bytes with the same serde, so no
        record can fail to decode, and no handler is passed over."""
        children = self._nodes[source.name].children
        if (
            topic in self.subtopology.repartition_source_topics
            and topic not in self._extractors
            and children
            and all(getattr(c.processor, "reads_values", True) is False for c in children)
        ):
            return None
        return source.value_serde

    @property
    def queryable(self) -> bool:
        """Restored and running: its stores may be read (hold :attr:`query_lock` while reading)."""
        return self._initialized and not self._closed

    @property
    def closed(self) -> bool:
        """Closed for good: its stores must not be read any more."""
        return self._closed

    def close(self, *, clean: bool = True) -> None:
        """Close processors then stores. Flush and commit first if the results should count.

        A dirty close (``clean=False``: a crash, fencing, an aborted transaction) first drops
        every record cache's entries, so closing neither forwards cached results to processors
        nor writes them into a store or a transaction that is being abandoned.
        """
        with self.query_lock:
            if self._closed:
                return
            self._closed = True
            if not clean:
                for store in self.stores.values():
                    discard_caches(store)
        for live in self._nodes.values():
            live.processor.close()
        with self.query_lock:  # no query reads a store while it closes
            for store in self.stores.values():
                if store.is_open:
                    store.close()

    # -- input ------------------------------------------------------------------------------
    def add_records(self, topic: str, partition: int, records: Iterable[ConsumedRecord]) -> None:
        """Buffer raw records of one input partition, in offset order."""
        queue = self._queues.get((topic, partition))
        if queue is None:
            raise StreamsError(
                f"task {self.task_id} does not own {topic}-{partition}; it reads "
                f"{sorted(self._queues)}"
            )
        self._at_end.discard((topic, partition))
        extractor = self._extractors.get(topic)
        if extractor is None:
            queue.extend(records)
        else:
            queue.extend(self._extract(topic, partition, extractor, records))
        merged = self._merged.get((topic, partition))
        if merged is not None:  # progress records move the offset without a record to process
            offset = merged.next_offset()
            if offset is not None:
                self._consumed[(topic, partition)] = offset

    def merge_by_writer(
        self,
        tp: TopicPartition,
        writers: list[str],
        restored: dict[str, WriterState] | None = None,
        ends: InputEnds | None = None,
    ) -> None:
        """Read the repartition partition ``tp`` merged across its ``writers`` (upstream task
        ids); ``restored``: what the last commit knew of each writer; ``ends``: where the
        writers' input partitions end (see :class:`~fluvial.processor.completeness.InputEnds`)."""
        if self._queues.get(tp):
            raise StreamsError(f"merge_by_writer({tp}) after records were added")
        queue = WriterMergeQueue(writers, restored=restored, ends=ends)
        self._queues[tp] = queue  # type: ignore[assignment]
        self._merged[tp] = queue

    def writer_states(self) -> dict[TopicPartition, dict[str, WriterState]]:
        """Per merged partition, what to commit of its writers beside its offset."""
        return {tp: queue.commit_state() for tp, queue in self._merged.items()}

    def _extract(
        self,
        topic: str,
        partition: int,
        extractor: Callable[[Any, int], object],
        records: Iterable[ConsumedRecord],
    ) -> list[ExtractedRecord]:
        """Deserialize and take each record's event time now, as Kafka Streams does when it
        buffers a record: the choice between partitions goes by the extracted times."""
        source = self._sources[topic]
        key_serde, value_serde = source.key_serde, source.value_serde
        tp = (topic, partition)
        partition_time = self._partition_time.get(tp, -1)
        out: list[ExtractedRecord] = []
        for raw in records:
            headers = list(raw.headers) if raw.headers else []
            try:
                key = raw.key if key_serde is None else key_serde.deserialize(topic, raw.key)
                value = raw.value if value_serde is None else value_serde.deserialize(topic,
                                                                                      raw.value)  # fmt: skip
            except SerializationError as exc:
                out.append(ExtractedRecord(raw.key, raw.value, raw.timestamp_ms, raw.offset,
                                           headers, error=exc))  # fmt: skip
                continue
            record = Record(key, value, raw.timestamp_ms, headers, topic, partition, raw.offset)
            try:
                # A user's function: its result is checked before it is taken as a time.
                timestamp: object = extractor(record, partition_time)
            except Exception as exc:  # a user's function: any failure is the record's
                error = _ExtractionError(
                    f"the timestamp extractor raised {type(exc).__name__}: {exc}"
                )
                error.__cause__ = exc
                out.append(ExtractedRecord(raw.key, raw.value, raw.timestamp_ms, raw.offset,
                                           headers, error=error))  # fmt: skip
                continue
            if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
                error = _ExtractionError(
                    f"the timestamp extractor returned {timestamp!r}; it must return "
                    "milliseconds as an int >= 0"
                )
                out.append(ExtractedRecord(raw.key, raw.value, raw.timestamp_ms, raw.offset,
                                           headers, error=error))  # fmt: skip
                continue
            partition_time = max(partition_time, timestamp)
            out.append(ExtractedRecord(raw.key, raw.value, timestamp, raw.offset, headers,
                                       key, value))  # fmt: skip
        self._partition_time[tp] = partition_time
        return out

    # -- time per input ---------------------------------------------------------------------
    def sources_reaching(self, node_name: str) -> frozenset[str]:
        """Source topics whose records can flow to node ``node_name`` (see
        :meth:`~fluvial.topology.topology.Subtopology.sources_reaching`)."""
        found = self._reaching.get(node_name)
        if found is None:
            found = self._reaching[node_name] = self.subtopology.sources_reaching(node_name)
        return found

    def input_time(self, topics: Iterable[str]) -> int:
        """The newest timestamp processed from ``topics`` (-1: none): unlike :attr:`stream_time`,
        it leaves out inputs that cannot produce what the caller asks about, such as a
        stream-table join's table side."""
        if len(self._sources) == 1:  # not tracked: the stream time is the one input's
            return self.stream_time if any(t in self._sources for t in topics) else -1
        times = self._topic_times
        return max((times[t][0] for t in topics if t in times), default=-1)

    def earliest_time(self, topics: Iterable[str]) -> int | None:
        """The earliest timestamp processed from ``topics``; while none was, the earliest head
        of their partitions' records waiting here (a backlog processes older stream records
        before newer table rows). ``None``: nothing known yet."""
        topics = [t for t in topics if t in self._topic_times]
        processed = [self._topic_times[t][1] for t in topics if self._topic_times[t][1] >= 0]
        if processed:
            return min(processed)
        heads = [q[0].timestamp_ms for (t, _p), q in self._queues.items() if t in topics and q]
        return min(heads, default=None)

    def reached_end(self, topic: str, partition: int) -> None:
        """The consumer has fetched everything the partition holds (until records come)."""
        if (topic, partition) in self._queues:
            self._at_end.add((topic, partition))

    def buffered_records(self) -> int:
        """How many fetched records wait in the task's partition queues, not yet processed."""
        return sum(len(q) for q in self._queues.values())

    def has_ready_records(self) -> bool:
        """Whether some record may be processed now (merged partitions may hold records back)."""
        return self._choose_partition() is not None

    def backpressure_depth(self, tp: TopicPartition) -> int:
        """Records of one input partition that count towards pausing it. Each partition is
        paused for its own backlog only: pausing a task's empty partition for another one's
        backlog would keep out the records the task waits for (an empty partition is waited
        for until its end). Records a merged partition holds for a slower writer never count:
        pausing would keep that writer's records out."""
        if tp in self._merged:
            return 0
        queue = self._queues.get(tp)
        return len(queue) if queue is not None else 0

    def buffered_in(self, tp: TopicPartition) -> int:
        """Records of one input partition fetched and not processed yet."""
        queue = self._queues.get(tp)
        return len(queue) if queue is not None else 0

    def process_one(self, wall_clock_ms: int | None = None) -> bool:
        """Process the next record, if one may go now; return whether one did.

        Stream-time punctuation is left to the caller (:meth:`punctuate_stream_time`).
        """
        return self._run(1, wall_clock_ms, punctuate=False) == 1

    def process_batch(self, max_records: int, wall_clock_ms: int | None = None) -> int:
        """Process up to ``max_records`` records; return how many were taken.

        The same as that many calls of :meth:`process_one`, each followed by
        :meth:`punctuate_stream_time`: the record choice by head timestamp, stream time and
        its punctuations run per record, and every record goes through the whole
        sub-topology before the next one starts, so each result is emitted as it is made.
        What a batch saves is the per-call work: the wall clock is read once, the single-queue
        case skips the choice, and metrics are counted once.
        """
        return self._run(max_records, wall_clock_ms, punctuate=True)

    def _run(self, max_records: int, wall_clock_ms: int | None, *, punctuate: bool) -> int:
        if not self._initialized:
            self.initialize()
        if wall_clock_ms is not None:
            self._observe_wall_clock(wall_clock_ms)
        queues = self._queues
        single = len(queues) == 1
        if single:
            [(tp, queue)] = queues.items()
            if not queue:
                return 0
            self._idle_since = None
            topic, partition = tp
            self.current_topic, self.current_partition = topic, partition
        due = self._stream_punctuations._heap  # ordered by due time; looked at per record
        consumed = self._consumed
        entries = self._entries
        taken = processed = 0
        raw: ConsumedRecord | ExtractedRecord | None = None
        last: ConsumedRecord | ExtractedRecord | None = None
        try:
            while taken < max_records:
                if single:
                    if not queue:
                        break
                else:
                    chosen = self._choose_partition()
                    if chosen is None:
                        break
                    tp, queue = chosen, queues[chosen]
                    topic, partition = tp
                    self.current_topic, self.current_partition = topic, partition
                raw = queue.popleft()
                taken += 1
                timestamp = raw.timestamp_ms
                key_serde, value_serde, entry, extracted, times, internal = entries[topic]
                if extracted:
                    # Deserialized and timed when added (see _extract).
                    failure = raw.error  # type: ignore[union-attr]
                    if failure is not None:
                        self._deserialization_failed(topic, partition, raw, failure)
                    else:
                        key, value = raw.decoded_key, raw.decoded_value  # type: ignore[union-attr]
                elif timestamp < 0:
                    self._negative_timestamp(topic, partition, raw)
                    failure = _SKIPPED
                else:
                    failure = None
                    try:
                        key = (
                            raw.key if key_serde is None else key_serde.deserialize(topic, raw.key)
                        )
                        value = (
                            raw.value if value_serde is None
                            else value_serde.deserialize(topic, raw.value)
                        )  # fmt: skip
                    except SerializationError as exc:
                        self._deserialization_failed(topic, partition, raw, exc)
                        failure = exc
                if failure is None:
                    # Stream time moves before processing, so the record's own windows see it.
                    if timestamp > self.stream_time:
                        self.stream_time = timestamp
                    if times is None:
                        pass
                    elif timestamp > times[0]:
                        if times[0] < 0:
                            times[1] = timestamp  # the topic's first record
                        times[0] = timestamp
                    elif timestamp < times[1]:
                        times[1] = timestamp
                    offset = raw.offset
                    self.current_offset = offset
                    self._current_raw = raw
                    self.current_timestamp_ms = timestamp
                    headers = raw.headers
                    if not headers:
                        headers = []
                    elif internal:  # fluvial's origin header is no operator's business
                        headers = (
                            [] if len(headers) == 1 and headers[0][0] == ORIGIN_HEADER
                            else [h for h in headers if h[0] != ORIGIN_HEADER]
                        )  # fmt: skip
                    else:
                        headers = list(headers)
                    entry(key, value, Record(key, value, timestamp, headers, topic, partition,
                                             offset))  # fmt: skip
                    processed += 1
                if not single:  # one queue: its offset is recorded once, below
                    consumed[tp] = raw.offset + 1
                last, raw = raw, None
                if punctuate and due and due[0].next_time_ms <= self.stream_time:
                    self.punctuate_stream_time()
                    self.current_topic, self.current_partition = topic, partition
        finally:
            # A record whose processing failed counts as consumed all the same.
            if raw is not None:
                consumed[tp] = raw.offset + 1
            elif single and last is not None:
                consumed[tp] = last.offset + 1
            for merged_tp, merged in self._merged.items():
                # Out of offset order across writers: commit the lowest offset still held.
                held_from = merged.next_offset()
                if held_from is not None:
                    consumed[merged_tp] = held_from
            self.processed += processed
        return taken

    @property
    def guarded(self) -> bool:
        """Whether a processing exception handler catches each node's errors apart."""
        return self._guarded

    @property
    def current(self) -> RecordContext:
        """Metadata of what is being processed now."""
        return RecordContext(
            self.current_topic, self.current_partition, self.current_offset,
            self.current_timestamp_ms,
        )  # fmt: skip

    def _choose_partition(self) -> TopicPartition | None:
        """The partition whose head record has the smallest timestamp.

        While some partition is empty the task may wait up to ``max_task_idle_ms`` of wall-clock
        time for it, since its next record could be older than every buffered one.
        """
        if len(self._queues) == 1:
            # One input partition, the common case: nothing to choose and nothing to wait for.
            [(tp, queue)] = self._queues.items()
            if not queue:
                return None
            self._idle_since = None
            return tp
        ready = [tp for tp, queue in self._queues.items() if queue]
        if not ready:
            return None
        max_idle = self._max_idle_ms
        if len(ready) < len(self._queues) and max_idle == 0 and self.wait_for_unfetched:
            for tp, queue in self._queues.items():
                if not queue and tp not in self._at_end:
                    return None  # its records are on their way: they may be older
        elif len(ready) < len(self._queues) and max_idle > 0:
            if self._idle_since is None:
                self._idle_since = self.wall_clock_ms
            if self.wall_clock_ms - self._idle_since < max_idle:
                return None
        else:
            self._idle_since = None
        chosen = min(ready, key=lambda tp: self._queues[tp][0].timestamp_ms)
        if self._merged:
            # A merged partition holding records for a slower writer may still release older
            # records than the chosen one: wait for it (fluvial.processor.completeness).
            head = self._queues[chosen][0].timestamp_ms
            for tp, merged in self._merged.items():
                if tp != chosen and not merged:
                    bound = merged.bound()
                    if bound is not None and bound < head:
                        return None
        return chosen

    def _negative_timestamp(
        self, topic: str, partition: int, raw: ConsumedRecord | ExtractedRecord
    ) -> None:
        log.warning("dropping record %s-%d@%d: negative timestamp", topic, partition, raw.offset)
        self.metrics.increment(INVALID_TIMESTAMPS)
        self.metrics.increment(DROPPED_RECORDS)

    def _deserialization_failed(
        self,
        topic: str,
        partition: int,
        raw: ConsumedRecord | ExtractedRecord,
        exc: SerializationError,
    ) -> None:
        where = f"{topic}-{partition}@{raw.offset}"
        if self.config.default_deserialization_exception_handler == "fail":
            if isinstance(exc, _ExtractionError):
                problem, fix = f"has no event time for {where}", "Fix the timestamp extractor"
            else:
                problem, fix = f"cannot deserialize {where}", "Fix the serde"
            raise SerializationError(
                f"task {self.task_id} {problem}: {exc}. {fix}, or set "
                "default_deserialization_exception_handler='log_and_continue' to skip such records"
            ) from exc
        log.warning("skipping record %s that cannot be deserialized: %s", where, exc)
        self.metrics.increment(DESERIALIZATION_ERRORS)
        self.metrics.increment(DROPPED_RECORDS)
        self._dead_letter(raw, topic, partition, exc)

    def _dead_letter(
        self,
        raw: ConsumedRecord | ExtractedRecord | None,
        topic: str | None,
        partition: int | None,
        exc: BaseException,
        node: str | None = None,
    ) -> None:
        """Send the record as it was consumed to the dead-letter topic, if there is one, with
        what went wrong and where it came from in headers. It goes through the collector, so
        under exactly-once it commits (or aborts) with the offsets that pass the record."""
        dead_letter_topic = self.config.dead_letter_topic
        if not dead_letter_topic:
            return
        headers = []
        origin = None
        for name, header in raw.headers if raw is not None else ():
            if name == ORIGIN_HEADER:
                origin = decode_origin(header)
            else:
                headers.append((name, header))
        headers.append(("fluvial.error", f"{type(exc).__name__}: {exc}".encode()
                        if node is not None else str(exc).encode()))  # fmt: skip
        if node is not None:
            headers.append(("fluvial.node", node.encode()))
        if raw is not None and topic is not None:
            if origin is not None:
                # Read from a repartition topic: name the user's record it came from, and the
                # internal record apart.
                headers.append(
                    ("fluvial.repartition", f"{topic}-{partition}@{raw.offset}".encode())
                )
                topic, partition, offset = origin
            else:
                offset = raw.offset
            headers += [
                ("fluvial.source", f"{topic}-{partition}@{offset}".encode()),
                ("fluvial.topic", topic.encode()),
                ("fluvial.partition", str(partition).encode()),
                ("fluvial.offset", str(offset).encode()),
            ]
        key, value = (raw.key, raw.value) if raw is not None else (None, None)
        timestamp = raw.timestamp_ms if raw is not None else self.current_timestamp_ms
        self.collector.send(dead_letter_topic, key, value, timestamp, headers, None)
        self.metrics.increment(DEAD_LETTERS)

    def origin_header(self) -> tuple[str, bytes] | None:
        """The :data:`ORIGIN_HEADER` of a record written to a repartition topic now: the
        user's record in process, or the one it came from through an earlier repartition.
        None while a punctuator or a commit's cache flush runs (no consumed record's doing)."""
        topic, raw = self.current_topic, self._current_raw
        if topic is None or raw is None or self._flushing:
            return None
        for name, value in raw.headers or ():
            if name == ORIGIN_HEADER:
                return name, value  # type: ignore[return-value]
        return ORIGIN_HEADER, encode_origin(topic, self.current_partition or 0, raw.offset)

    # -- processing errors ------------------------------------------------------------------
    def _guard(self, node: str, work: Callable[..., None]) -> Callable[..., None]:
        """``work`` of node ``node`` (its process, or its fused step) under the
        log-and-continue processing handler: an exception a user's code raises there skips
        the record at that node only (its siblings still get it, as in Kafka Streams), is
        counted per node and becomes a dead letter. fluvial's own errors pass through."""

        def guarded(*args: Any) -> None:
            try:
                work(*args)
            except FluvialError:
                raise
            except Exception as exc:
                self._processing_failed(node, exc)

        return guarded

    def _processing_failed(self, node: str, exc: Exception) -> None:
        if exc is self._collector_error:
            raise exc  # the producer failed, not the user's code: never skipped
        topic, partition = self.current_topic, self.current_partition
        # The consumed record in process, unless a punctuator or a commit's flush is running.
        raw = self._current_raw if topic is not None and not self._flushing else None
        if raw is None:
            topic = partition = None
        if raw is not None:
            where = f"{topic}-{partition}@{raw.offset}"
        else:
            where = "a record of a cache flush" if self._flushing else "a punctuation"
        log.warning("skipping %s at %s: %s: %s", where, node, type(exc).__name__, exc)
        self.metrics.increment(PROCESSING_ERRORS)
        self.metrics.increment(f"{PROCESSING_ERRORS}:{node}")
        self.metrics.increment(DROPPED_RECORDS)
        self._dead_letter(raw, topic, partition, exc, node)

    # -- punctuation ------------------------------------------------------------------------
    def schedule(
        self, node_name: str, interval_ms: int, type_: PunctuationType, callback: Punctuator
    ) -> Cancellable:
        """Register a punctuator of the processor ``node_name`` (what
        ``ProcessorContext.schedule`` calls).

        :param node_name: the processor the punctuator runs as (its forwards go to its children).
        :param interval_ms: the interval, in milliseconds.
        :param type_: stream-time punctuators fire on the grid of multiples of the interval as
            stream time reaches it; wall-clock ones first one interval from now.
        :param callback: ``callback(time_ms)``.
        :returns: a handle whose ``cancel()`` stops it.
        """
        if type_ is PunctuationType.STREAM_TIME:
            # Aligned to 0: fires as soon as there is stream time, then on the interval grid.
            return self._stream_punctuations.add(0, interval_ms, type_, callback, node_name)
        return self._wall_punctuations.add(
            self.wall_clock_ms + interval_ms, interval_ms, type_, callback, node_name
        )

    def punctuate_stream_time(self) -> bool:
        """Fire due stream-time punctuators; call after processing records."""
        if self.stream_time < 0:
            return False
        return self._stream_punctuations.fire_due(self.stream_time, self._punctuate)

    def punctuate_wall_clock(self, now_ms: int) -> bool:
        """Fire due wall-clock punctuators at wall-clock time ``now_ms``."""
        self._observe_wall_clock(now_ms)
        return self._wall_punctuations.fire_due(self.wall_clock_ms, self._punctuate)

    def _observe_wall_clock(self, now_ms: int) -> None:
        if not self._wall_clock_known:
            self._wall_clock_known = True
            self._wall_punctuations.shift(now_ms - self.wall_clock_ms)
            self.wall_clock_ms = now_ms
        self.wall_clock_ms = max(self.wall_clock_ms, now_ms)

    def _punctuate(self, schedule: PunctuationSchedule, now_ms: int) -> None:
        self.current_topic = self.current_partition = self.current_offset = None
        self.current_timestamp_ms = now_ms
        if self._guarded:
            # A punctuator's own exception is its node's processing error too.
            self._guard(schedule.node_name, schedule.callback)(now_ms)
        else:
            schedule.callback(now_ms)
        self.metrics.increment(PUNCTUATIONS)

    # -- commit -----------------------------------------------------------------------------
    def flush(self) -> None:
        """Flush caches and stores, in topology order, so every result has reached the collector.

        Upstream stores flush first: a cache flush forwards records that may write into
        downstream stores, which must then be flushed in turn.
        """
        self._flushing = True  # what a cache forwards now is no consumed record's doing
        try:
            for store in self.stores.values():
                store.flush()
        finally:
            self._flushing = False
        # A store flushed early in the loop may have been written since by a later cache's
        # flush: the last changelog records go out now, when nothing writes any more.
        for stack in self.store_stacks.values():
            if stack.transactional is not None:
                stack.transactional.log_changes()
        self.commit_requested = False

    def committable_offsets(self) -> dict[TopicPartition, int]:
        """(topic, partition) -> offset of the next record to read, for processed partitions."""
        return dict(self._consumed)

    # -- stores -----------------------------------------------------------------------------
    def store_for_processor(self, name: str) -> Any:
        """DSL processors get the bytes store; user processors a typed view."""
        if name not in self._specs:
            if name in self.global_stores:
                return self.global_stores[name]
            raise StreamsError(
                f"task {self.task_id} has no store {name!r}: a GlobalKTable's store must be "
                "passed to every stream task as global_stores (run the global sub-topology first)"
            )
        spec = self._specs[name]
        store = self.stores[name]
        if spec.internal_format:
            return store
        if name not in self._typed:
            self._typed[name] = typed_view(spec, store, self._changelogs.get(name))
        return self._typed[name]

    def _store_dir(self) -> Path | None:
        return self.state_dir

    def _changelog_sender(self, topic: str) -> Any:
        partition = self.task_id.partition
        send = self.collector.send
        sent = 0

        def send_change(change: ChangelogRecord) -> None:
            nonlocal sent
            # The record timestamp travels with the change, so a restored table keeps it.
            send(topic, change.key, change.value, change.timestamp_ms, [], partition)
            sent += 1

        self.metrics.register(CHANGELOG_RECORDS, lambda: sent)
        return send_change

    def __repr__(self) -> str:
        return f"StreamTask({self.task_id}, stream_time={self.stream_time})"
