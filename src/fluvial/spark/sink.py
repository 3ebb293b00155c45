"""Exactly-once writes from Spark Structured Streaming to Kafka: a ``foreachBatch`` sink.

Spark's own Kafka sink is at-least-once: a micro-batch that is retried, or replayed after a
driver restart, is written again. :class:`KafkaSink` closes that gap::

    query = (
        events.writeStream
        .foreachBatch(KafkaSink("enriched", bootstrap_servers=servers, sink_id="enrich-v1"))
        .option("checkpointLocation", "/checkpoints/enrich-v1")
        .start()
    )

How it works, per micro-batch ``b`` split into ``n`` partitions:

- The Spark task of partition ``p`` writes in one Kafka transaction whose transactional id is
  ``<sink_id>-sink-<p>``. Opening it (``init_transactions``) fences every earlier holder of
  that id (a retried task's first attempt, or a writer left over from a dead driver) and
  aborts whatever that holder left open.
- The same transaction writes a *batch marker* to partition ``p`` of the compacted topic
  ``<sink_id>-sink-batches``: ``{"batch": b, "partitions": n, "records": count}``. The marker
  commits if and only if the records commit.
- Before writing, the task reads the last committed marker of ``p``. When it already names
  batch ``b``, this is a replay and the task writes nothing.

Why ``foreachBatch`` rather than a Python data source writer: Spark hands ``foreachBatch`` the
batch id as part of its public contract, which is exactly what the marker needs, and it works on
every Spark 3.x/4.x without Arrow. A data source stream writer sees the batch id only on the
driver, after the tasks have written, too late to put it in their transactions.

Limits (see the README's Structured Streaming section):

- A partition's write must finish within ``transaction_timeout_ms``; otherwise the broker
  aborts the transaction and the task fails. The batch is cached and counted before any
  transaction opens, so computing the rows does not count against it.
- A replayed batch must split into the same partitions as the attempt it replays. A batch that
  was only partly written and comes back with a different partition count is refused.
- A sink's markers belong to one checkpoint: a fresh checkpoint needs a fresh ``sink_id``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer

from fluvial.config import StreamsConfig, to_millis
from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka.admin import TopicSpec, admin_client, create_topics
from fluvial.runtime.clients import producer_settings
from fluvial.runtime.topics import missing_topics_message
from fluvial.spark.markers import BatchMarker, marker_partitions, read_markers, wait_for_partitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("fluvial.spark.sink")

_SINK_ID = re.compile(r"^[A-Za-z0-9._-]+$")
#: The broker's default ``transaction.max.timeout.ms``: a longer transaction is refused.
BROKER_MAX_TRANSACTION_TIMEOUT_MS = 900_000
_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


class SinkError(FluvialError):
    """The sink cannot write a batch without risking duplicates or loss; nothing was written."""


@dataclass(frozen=True)
class BatchResult:
    """What one ``foreachBatch`` call did."""

    batch_id: int
    partitions: int
    records_written: int
    #: Writer partitions whose records an earlier attempt of this batch had already committed.
    partitions_skipped: tuple[int, ...]


@dataclass(frozen=True)
class _WriteSpec:
    """Everything a Spark task needs to write its partition; small and picklable."""

    sink_id: str
    bootstrap_servers: str
    client_config: tuple[tuple[str, Any], ...] = field(repr=False)  # may hold secrets
    transaction_timeout_ms: int
    marker_topic: str

    def streams_config(self) -> StreamsConfig:
        return StreamsConfig(
            application_id=self.sink_id,
            bootstrap_servers=self.bootstrap_servers,
            processing_guarantee="exactly_once_v2",
            client_config=dict(self.client_config),
        )

    def transactional_id(self, partition: int) -> str:
        return f"{self.sink_id}-sink-{partition}"


class KafkaSink:
    """An exactly-once Kafka sink for ``DataFrame.writeStream.foreachBatch``.

    The batch DataFrame uses the columns of Spark's Kafka sink: ``value`` (string or binary,
    required), and optionally ``key`` (string or binary), ``topic`` (string, overrides
    ``topic``), ``partition`` (int), ``headers`` (array of struct<key: string, value: binary>)
    and ``timestamp`` (timestamp, or long epoch milliseconds; the producer's clock otherwise).
    Records without a partition are placed by Kafka's Java partitioner (murmur2 of the key).

    ``sink_id`` must stay the same for the life of the query's checkpoint: it names the
    transactional ids and the marker topic that make replays idempotent.
    """

    def __init__(
        self,
        topic: str | None = None,
        *,
        bootstrap_servers: str,
        sink_id: str,
        transaction_timeout_ms: int | timedelta = 60_000,
        client_config: dict[str, Any] | None = None,
        marker_replication_factor: int = -1,
    ) -> None:
        if not sink_id or not _SINK_ID.match(sink_id):
            raise ConfigError(
                f"sink_id {sink_id!r} is invalid: use letters, digits, '.', '_' and '-' (it names "
                "the sink's transactional ids and its marker topic)"
            )
        timeout_ms = to_millis(transaction_timeout_ms, "transaction_timeout_ms")
        if not 1000 <= timeout_ms <= BROKER_MAX_TRANSACTION_TIMEOUT_MS:
            raise ConfigError(
                f"transaction_timeout_ms={timeout_ms} is out of range: use 1000 to "
                f"{BROKER_MAX_TRANSACTION_TIMEOUT_MS} (the broker's default "
                "transaction.max.timeout.ms); it must exceed the time one partition of a batch "
                "takes to write"
            )
        if not bootstrap_servers:
            raise ConfigError("bootstrap_servers is empty: give host:port of at least one broker")
        self.topic = topic
        self.sink_id = sink_id
        self.marker_replication_factor = marker_replication_factor
        self._spec = _WriteSpec(
            sink_id=sink_id,
            bootstrap_servers=bootstrap_servers,
            client_config=tuple(sorted((client_config or {}).items())),
            transaction_timeout_ms=timeout_ms,
            marker_topic=f"{sink_id}-sink-batches",
        )
        self._spec.streams_config()  # validates the client settings before the query starts
        self._checked_topic = False
        # Before the query starts, not at its first batch.
        self._check_output_topic()
        #: The outcome of the last batch this sink handled, for logs and tests.
        self.last_result: BatchResult | None = None

    @property
    def marker_topic(self) -> str:
        """The topic where each writer commits its batch markers (``<sink_id>-sink-batches``), in
        the same transaction as the batch's records.
        """
        return self._spec.marker_topic

    # -- schema ------------------------------------------------------------------------------

    def validate(self, schema: StructType | DataFrame) -> None:
        """Check a (streaming) DataFrame's columns before the query starts; raise if unusable."""
        from pyspark.sql import DataFrame

        struct = schema.schema if isinstance(schema, DataFrame) else schema
        types = {f.name: f.dataType.simpleString() for f in struct.fields}
        allowed = {"key", "value", "topic", "partition", "headers", "timestamp"}
        unknown = sorted(set(types) - allowed)
        if unknown:
            raise ConfigError(
                f"the Kafka sink does not know column(s) {unknown}: it writes key, value, topic, "
                "partition, headers and timestamp; select or drop columns before writing"
            )
        if "value" not in types:
            raise ConfigError(
                "the Kafka sink needs a 'value' column (string or binary); for several columns "
                "use to_json(struct(...)).alias('value')"
            )
        expected = {
            "key": ("string", "binary"),
            "value": ("string", "binary"),
            "topic": ("string",),
            "partition": ("int",),
            "headers": (_HEADERS_TYPE,),
            "timestamp": ("timestamp", "timestamp_ntz", "bigint"),
        }
        for name, found in types.items():
            if found not in expected[name]:
                raise ConfigError(
                    f"column {name!r} has type {found}; the Kafka sink needs "
                    f"{' or '.join(expected[name])}: cast it first"
                )
        if "topic" not in types and self.topic is None:
            raise ConfigError(
                "no output topic: pass KafkaSink(topic, ...) or give the batch a 'topic' column"
            )

    def _normalized(self, df: DataFrame) -> DataFrame:
        """The batch as (key, value, topic, partition, headers, timestamp_ms) in that order."""
        from pyspark.sql import functions as F

        names = set(df.columns)

        def column(name: str, cast: str) -> Any:
            return F.col(name).cast(cast) if name in names else F.lit(None).cast(cast)

        if "timestamp" in names and dict(df.dtypes)["timestamp"] != "bigint":
            timestamp = F.expr("unix_millis(to_timestamp(`timestamp`))")
        else:
            timestamp = column("timestamp", "bigint")
        default = F.lit(self.topic).cast("string")
        # A row's own topic wins; rows without one go to the sink's topic.
        topic = F.coalesce(F.col("topic"), default) if "topic" in names else default
        return df.select(
            column("key", "binary").alias("key"),
            column("value", "binary").alias("value"),
            topic.alias("topic"),
            column("partition", "int").alias("partition"),
            column("headers", _HEADERS_TYPE).alias("headers"),
            timestamp.alias("timestamp_ms"),
        )

    # -- one micro-batch ---------------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> BatchResult:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        self.validate(batch_df.schema)
        self._check_output_topic()
        # Cached, because the batch is read twice: once by Spark to count each partition's
        # rows, once by the writers.
        rows = self._normalized(batch_df).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            partitions = rows.rdd.getNumPartitions()
            marker_count = self._ensure_marker_topic(partitions)
            markers = read_markers(
                self._spec.streams_config(), self.marker_topic, range(marker_count),
                stable_only=False,
            )  # fmt: skip
            if plan_batch(self.sink_id, markers, batch_id, partitions) == "skip":
                done = tuple(sorted(p for p, m in markers.items() if m.batch_id == batch_id))
                log.info("sink %s: batch %d was already committed; skipped", self.sink_id, batch_id)
                self.last_result = BatchResult(batch_id, partitions, 0, done)
                return self.last_result
            # A Python writer cannot tell the end of its input from input cut short by a failed
            # upstream task: both look like the end of the stream. Spark counts each partition
            # on the JVM side, and a writer commits only when it has seen exactly that many.
            expected = {
                row[0]: row[1] for row in rows.groupBy(F.spark_partition_id()).count().collect()
            }
            spec = self._spec

            def write(index: int, part: Iterable[Any]) -> Iterable[tuple[int, bool, int]]:
                count = expected.get(index, 0)
                return _write_partition(spec, batch_id, partitions, index, part, count)

            outcomes = rows.rdd.mapPartitionsWithIndex(write).collect()
        finally:
            rows.unpersist()
        written = sum(count for _, skipped, count in outcomes if not skipped)
        skipped = tuple(sorted(index for index, was_skipped, _ in outcomes if was_skipped))
        log.info(
            "sink %s: batch %d committed %d records from %d partitions (%d replayed, skipped)",
            self.sink_id, batch_id, written, partitions, len(skipped),
        )  # fmt: skip
        self.last_result = BatchResult(batch_id, partitions, written, skipped)
        return self.last_result

    def _check_output_topic(self) -> None:
        if self.topic is None or self._checked_topic:
            return
        admin = admin_client(self._spec.bootstrap_servers, **dict(self._spec.client_config))
        metadata = admin.list_topics(timeout=30)
        if self.topic not in metadata.topics:
            raise ConfigError(missing_topics_message([self.topic], self._spec.bootstrap_servers,
                                                     None, what="output topic"))  # fmt: skip
        self._checked_topic = True

    def _ensure_marker_topic(self, partitions: int) -> int:
        """One marker partition per writer partition: create the topic, or grow it. Returns
        the topic's partition count (at least ``partitions``)."""
        config = self._spec.streams_config()
        count = marker_partitions(config, self.marker_topic)
        if count == 0:
            spec = TopicSpec(
                self.marker_topic,
                partitions,
                self.marker_replication_factor,
                {"cleanup.policy": "compact"},
            )
            create_topics(
                self._spec.bootstrap_servers, [spec], admin_config=dict(self._spec.client_config)
            )
            count = marker_partitions(config, self.marker_topic)
        if count < partitions:
            from confluent_kafka.admin import NewPartitions

            admin = admin_client(self._spec.bootstrap_servers, **dict(self._spec.client_config))
            future = admin.create_partitions([NewPartitions(self.marker_topic, partitions)])
            try:
                future[self.marker_topic].result(30)
            except KafkaException as exc:  # another driver grew it first
                if exc.args[0].code() != KafkaError.INVALID_PARTITIONS:
                    raise
            wait_for_partitions(config, self.marker_topic, partitions)
            count = partitions
        return count

    def markers(self) -> dict[int, BatchMarker]:
        """The last committed marker of every writer partition (for operators and tests)."""
        spec = self._spec
        config, topic = spec.streams_config(), spec.marker_topic
        return read_markers(
            config, topic, range(marker_partitions(config, topic)), stable_only=False
        )


def plan_batch(
    sink_id: str, markers: dict[int, BatchMarker], batch_id: int, partitions: int
) -> str:
    """``"skip"`` when an earlier attempt committed the whole batch, else ``"write"``.

    Raises :class:`SinkError` when writing could duplicate or lose records.
    """
    ahead = {p: m.batch_id for p, m in markers.items() if m.batch_id > batch_id}
    if ahead:
        raise SinkError(
            f"sink {sink_id!r} has already committed batch {max(ahead.values())} but the query "
            f"is writing batch {batch_id}: this checkpoint is older than the sink's markers. A "
            "new checkpoint needs a new sink_id; an old checkpoint restored from backup would "
            "skip the batches in between"
        )
    replayed = {p: m for p, m in markers.items() if m.batch_id == batch_id}
    if not replayed:
        return "write"
    earlier = {m.partitions for m in replayed.values()}
    if len(earlier) != 1:
        raise SinkError(
            f"sink {sink_id!r}: the markers of batch {batch_id} disagree on its partition count "
            f"({sorted(earlier)}); were two queries writing with the same sink_id?"
        )
    (split,) = earlier
    if set(range(split)) <= set(replayed):
        return "skip"
    if split != partitions:
        raise SinkError(
            f"sink {sink_id!r}: batch {batch_id} was partly written (partitions "
            f"{sorted(replayed)} of {split}) before the query stopped, and the restarted query "
            f"splits it into {partitions} partitions, so fluvial cannot tell which records are "
            f"already in Kafka. Restart with the previous partitioning ({split} partitions, for "
            "example the same repartition() or spark.sql.shuffle.partitions) to finish the batch"
        )
    return "write"


# -- executor side -------------------------------------------------------------------------


def _write_partition(
    spec: _WriteSpec,
    batch_id: int,
    partitions: int,
    index: int,
    rows: Iterable[Any],
    expected: int,
) -> Iterator[tuple[int, bool, int]]:
    """Write one partition of a batch (``expected`` rows) in one transaction, or skip it if an
    earlier attempt committed it. Yields (partition, skipped, records)."""
    config = spec.streams_config()
    settings = producer_settings(config, spec.transactional_id(index))
    settings["client.id"] = f"{spec.sink_id}-sink-{index}-producer"
    settings["transaction.timeout.ms"] = spec.transaction_timeout_ms
    producer = Producer(settings)
    try:
        # Fences every earlier holder of this id and aborts what it left open, so the marker
        # read next is final: no other attempt can commit this partition behind our back.
        producer.init_transactions(30)
        marker = read_markers(config, spec.marker_topic, [index], stable_only=True).get(index)
        if marker is not None and marker.batch_id > batch_id:
            plan_batch(spec.sink_id, {index: marker}, batch_id, partitions)  # raises
        if marker is not None and marker.batch_id == batch_id:
            if (marker.partitions, marker.records) != (partitions, expected):
                raise SinkError(
                    f"sink {spec.sink_id!r}: partition {index} of batch {batch_id} was committed "
                    f"with {marker.records} records out of {marker.partitions} partitions, but the "
                    f"replay has {expected} out of {partitions}. The query is not deterministic "
                    "for a replayed batch, so skipping or rewriting would both be wrong"
                )
            yield index, True, expected
            return
        written = _write_transaction(producer, spec, batch_id, partitions, index, rows, expected)
        yield index, False, written
    finally:
        with contextlib.suppress(KafkaException):  # a fenced producer reports it again here
            producer.flush(0)


def _write_transaction(
    producer: Producer,
    spec: _WriteSpec,
    batch_id: int,
    partitions: int,
    index: int,
    rows: Iterable[Any],
    expected: int,
) -> int:
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    began = time.monotonic()
    producer.begin_transaction()
    count = 0
    try:
        for key, value, topic, partition, headers, timestamp_ms in rows:
            if topic is None:
                raise SinkError(
                    f"sink {spec.sink_id!r}: a row of batch {batch_id} has a null 'topic' and "
                    "the sink has no default topic; its transaction is aborted"
                )
            # Spark hands binary columns over as bytearray; librdkafka wants bytes.
            kwargs: dict[str, Any] = {
                "key": None if key is None else bytes(key),
                "value": None if value is None else bytes(value),
                "on_delivery": delivered,
            }
            if partition is not None and partition >= 0:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = [(h[0], None if h[1] is None else bytes(h[1])) for h in headers]
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            _produce(producer, topic, kwargs)
            count += 1
            if failures:
                break
        if count != expected and not failures:
            raise SinkError(
                f"sink {spec.sink_id!r}: batch {batch_id} partition {index} ended after {count} "
                f"of its {expected} records: its input was cut short (a failed or cancelled "
                "upstream task), so its transaction is aborted and the task will be retried"
            )
        # The marker rides in the same transaction: it commits exactly when the records do.
        marker = BatchMarker(batch_id, partitions, count)
        _produce(
            producer,
            spec.marker_topic,
            {"key": str(index).encode(), "value": marker.encode(), "partition": index,
             "on_delivery": delivered},
        )  # fmt: skip
        producer.flush(spec.transaction_timeout_ms / 1000)
        if failures:
            raise SinkError(
                f"sink {spec.sink_id!r}: batch {batch_id} partition {index} could not be "
                f"delivered ({failures[0]}); its transaction is aborted and nothing is visible"
            )
        producer.commit_transaction(spec.transaction_timeout_ms / 1000)
    except BaseException as exc:
        elapsed_ms = (time.monotonic() - began) * 1000
        # Abort now rather than leave the transaction to time out: the retry's fencing would
        # abort it anyway, but only after waiting for it.
        _abort_quietly(producer)
        overran = elapsed_ms >= spec.transaction_timeout_ms * 0.9
        # A fatal error (this producer fenced) can surface from flush as a SystemError caused
        # by the KafkaException, when confluent-kafka runs a log callback with it still set.
        from_kafka = isinstance(exc, KafkaException | SinkError) or isinstance(
            exc.__cause__, KafkaException
        )
        if from_kafka and overran:
            raise SinkError(
                f"sink {spec.sink_id!r}: batch {batch_id} partition {index} kept its transaction "
                f"open for {elapsed_ms:.0f} ms, past transaction_timeout_ms="
                f"{spec.transaction_timeout_ms}, so the broker aborted it and nothing is visible. "
                "Raise transaction_timeout_ms (up to the broker's transaction.max.timeout.ms) or "
                "make batches smaller (maxOffsetsPerTrigger, more partitions)"
            ) from exc
        raise
    return count


def _produce(producer: Producer, topic: str, kwargs: dict[str, Any]) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.1)


def _abort_quietly(producer: Producer) -> None:
    # A fenced or timed-out producer cannot abort; the broker already did.
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(10)
