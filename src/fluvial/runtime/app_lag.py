"""How far a whole application is behind: every source and repartition partition, from Kafka.

The lag of an application is what it has still to process and commit: for each partition of its
source topics *and* of its repartition topics, the records past the offset its group committed.
Records a downstream task holds back for a slower writer (catch-up completeness) are past that
offset too: a merged partition commits the lowest offset it still holds.

Offsets alone overcount: a transaction leaves a marker, which takes an offset and is never a
record, so a caught-up partition written by transactions sits one or more offsets short of its
end. Where the gap is small, the records in it are read (``read_committed`` under exactly-once)
and counted, skipping markers, aborted records and fluvial's own progress records; a larger gap
is reported as it is, an upper bound (``exact`` is then false). An application is caught up when
every partition's lag is exactly 0.

Everything comes from Kafka (committed offsets, end offsets, records), so ``fluvial status`` gives
the same answer from another terminal as the status line of ``fluvial run``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.kafka.consumed import consume
from fluvial.processor.completeness import PROGRESS_HEADER
from fluvial.runtime.clients import consumer_settings
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

#: Gaps up to this many offsets are read to tell records from markers.
READ_UP_TO = 2_000
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # the group's committed offset (None: never committed)
    end: int  # the partition's end offset (last stable offset under exactly-once)
    lag: int  # records past the committed offset
    exact: bool  # counted record by record (else an upper bound: markers included)
    internal: bool  # a repartition topic of the application


@dataclass(frozen=True)
class ApplicationLag:
    application_id: str
    partitions: tuple[PartitionLag, ...]
    missing: tuple[str, ...] = ()  # source topics Kafka does not have (yet)

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def caught_up(self) -> bool:
        """Every partition exactly at its end: nothing left to process or commit."""
        return not self.missing and all(p.lag == 0 and p.exact for p in self.partitions)

    def by_topic(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for p in self.partitions:
            totals[p.topic] = totals.get(p.topic, 0) + p.lag
        return totals


def application_topics(topology: Topology, config: StreamsConfig) -> dict[str, tuple[bool, bool]]:
    """Every topic the application's tasks read: name -> (internal, starts at the end)."""
    topics: dict[str, tuple[bool, bool]] = {}
    for sub in topology.subtopologies(config.application_id):
        internal = set(sub.repartition_source_topics)
        for topic, source in sub.source_node_for().items():
            topics[topic] = (topic in internal, source.auto_offset_reset == "latest")
    return topics


def lag_consumer(config: StreamsConfig) -> Consumer:
    """A consumer that reads the application group's commits without ever joining the group
    (it is assigned partitions by hand, never subscribed) or committing."""
    settings = consumer_settings(config, client_suffix=f"-lag-{uuid.uuid4().hex[:6]}")
    settings["enable.partition.eof"] = True
    return Consumer(settings)


def read_application_lag(
    topology: Topology,
    config: StreamsConfig,
    *,
    read_up_to: int = READ_UP_TO,
    consumer: Consumer | None = None,
) -> ApplicationLag:
    """The application's lag now, partition by partition (see the module's description).
    ``consumer``: a :func:`lag_consumer` to use (and leave open), else one of its own."""
    own = consumer is None
    consumer = consumer or lag_consumer(config)
    try:
        return _read(consumer, topology, config, read_up_to)
    except KafkaException as error:
        raise StreamsError(
            f"cannot read {config.application_id}'s offsets from Kafka at "
            f"{config.bootstrap_servers}: {error.args[0].str() if error.args else error}. "
            "Check that Kafka runs there (fluvial kafka status) or pass --bootstrap-servers"
        ) from error
    finally:
        if own:
            consumer.close()


def _read(
    consumer: Consumer, topology: Topology, config: StreamsConfig, read_up_to: int
) -> ApplicationLag:
    topics = application_topics(topology, config)
    metadata = consumer.list_topics(timeout=TIMEOUT_S).topics
    missing = sorted(t for t, (internal, _) in topics.items()
                     if not internal and (t not in metadata or metadata[t].error is not None))  # fmt: skip
    tps = [
        TopicPartition(topic, partition)
        for topic in sorted(topics)
        if topic in metadata and metadata[topic].error is None
        for partition in sorted(metadata[topic].partitions)
    ]
    committed = {
        (tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=TIMEOUT_S)
    } if tps else {}  # fmt: skip
    found: dict[tuple[str, int], PartitionLag] = {}
    to_read: dict[tuple[str, int], tuple[int, int]] = {}
    for tp in tps:
        key = (tp.topic, tp.partition)
        internal, latest = topics[tp.topic]
        low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S, cached=False)
        offset = committed.get(key, -1)
        start = offset if offset >= 0 else (high if latest else low)
        gap = max(0, high - start)
        done = offset if offset >= 0 else None
        if gap == 0 or gap > read_up_to:
            found[key] = PartitionLag(tp.topic, tp.partition, done, high, gap, gap == 0, internal)
        else:
            to_read[key] = (start, high)
    counted = _count_records(consumer, to_read)
    for key, (start, high) in to_read.items():
        internal = topics[key[0]][0]
        offset = committed.get(key, -1)
        records = counted.get(key)
        found[key] = PartitionLag(key[0], key[1], offset if offset >= 0 else None, high,
                                  high - start if records is None else records,
                                  records is not None, internal)  # fmt: skip
    return ApplicationLag(config.application_id, tuple(found[k] for k in sorted(found)),
                          tuple(missing))  # fmt: skip


def _count_records(
    consumer: Consumer, ranges: dict[tuple[str, int], tuple[int, int]]
) -> dict[tuple[str, int], int]:
    """Records (not markers, aborted or progress records) in each [start, end); a partition
    not read to its end in time is left out."""
    if not ranges:
        return {}
    consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in ranges.items()])
    counts = {key: 0 for key in ranges}
    open_ = set(ranges)
    deadline = time.monotonic() + TIMEOUT_S
    while open_ and time.monotonic() < deadline:
        for msg in consume(consumer, 500, 0.2):
            key = (msg.topic(), msg.partition())
            if key not in open_:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    open_.discard(key)
                continue
            if msg.offset() >= ranges[key][1]:
                open_.discard(key)
                continue
            if not _is_progress(msg.headers()):
                counts[key] += 1
        # A partition whose position reached its end holds nothing more to count.
        for tp in consumer.position([TopicPartition(t, p) for t, p in open_]):
            if tp.offset >= ranges[(tp.topic, tp.partition)][1]:
                open_.discard((tp.topic, tp.partition))
    consumer.unassign()
    return {key: n for key, n in counts.items() if key not in open_}


def _is_progress(headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
    return any(name == PROGRESS_HEADER for name, _ in headers or ())


class LagWatch:
    """Reads the application's lag in the background, every ``interval_s``, for a status line."""

    def __init__(self, topology: Topology, config: StreamsConfig, interval_s: float = 2.0) -> None:
        self.topology = topology
        self.config = config
        self.interval_s = interval_s
        self.latest: ApplicationLag | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fluvial-lag", daemon=True)

    def start(self) -> LagWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = None
        try:
            while not self._stop.is_set():
                try:
                    consumer = consumer or lag_consumer(self.config)
                    self.latest = read_application_lag(self.topology, self.config,
                                                       consumer=consumer)  # fmt: skip
                except Exception as error:  # the status line only: workers measure their own
                    log.debug("cannot read the application's lag: %s", error)
                self._stop.wait(self.interval_s)
        finally:
            if consumer is not None:
                consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S * 2)


#: ``fluvial status`` exits with this when the application is behind (0 when caught up).
BEHIND_EXIT_CODE = 3


def status_report(lag: ApplicationLag) -> list[str]:
    """What ``fluvial status`` prints: each topic's lag, then whether the application is
    caught up."""
    internal = {p.topic for p in lag.partitions if p.internal}
    inexact = {p.topic for p in lag.partitions if not p.exact}
    lines = []
    width = max((len(t) for t in lag.by_topic()), default=0)
    for topic, total in sorted(lag.by_topic().items(), key=lambda t: (t[0] in internal, t[0])):
        bound = "at most " if topic in inexact else ""
        kind = "  (repartition)" if topic in internal else ""
        lines.append(f"  {topic:<{width}}  lag {bound}{total:,}{kind}")
    for topic in lag.missing:
        lines.append(f"  {topic:<{width}}  missing: Kafka has no such topic")
    if lag.caught_up:
        lines.append(f"{lag.application_id}: caught up (every input and repartition partition "
                     "processed and committed)")  # fmt: skip
    else:
        lines.append(f"{lag.application_id}: behind, {lag.total:,} record(s) to process")
    return lines
