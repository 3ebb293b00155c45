"""The record collector of a worker: task output to the Kafka producer.

Outputs, repartition records and changelog records all leave through here, so under
exactly-once they all land in the worker's open transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from fluvial.errors import StreamsError
from fluvial.processor.collector import Headers

log = logging.getLogger(__name__)


class KafkaRecordCollector:
    """Sends records with a producer and keeps what a commit needs to know.

    It remembers the highest acknowledged offset per changelog partition (a store's checkpoint
    after commit) and the first delivery error, which fails the next commit.

    In a transaction only the last changelog record of each partition needs a delivery report:
    its offset is the partition's end, and a failed delivery of any other record fails the
    commit anyway. So each changelog record is held until the next one for its partition comes
    (then the held one goes without a report) or until :meth:`release` before the commit's
    flush. Records of one partition still go in the order they were sent.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        changelog_topics: set[str],
        time_retained_topics: frozenset[str] = frozenset(),
        production_handler: str = "fail",
        transactional: bool = False,
    ) -> None:
        self.producer = producer
        self.changelog_topics = changelog_topics
        self.production_handler = production_handler
        self.changelog_end: dict[tuple[str, int], int] = {}
        # Window and session changelogs: the newest record timestamp sent to each partition,
        # which bounds how far their stores' stream time has got (see runtime/horizon.py).
        self.time_retained_topics = time_retained_topics
        self.newest_timestamp: dict[tuple[str, int], int] = {}
        self.sent = 0
        self.changelog_sent = 0
        # Which sends get a delivery report. Changelog records always do: their offsets are
        # the stores' checkpoints. In a transaction, a record that fails delivery makes the
        # transaction abortable and its commit fail, so under "fail" an output record's report
        # would tell nothing more; only "continue" (skip failed records) and at-least-once (no
        # transaction to fail) need one per output record. Reports run in Python, per record.
        self._changelog_report = self._delivered
        self._output_report = (
            None if transactional and production_handler == "fail" else self._delivered
        )
        # Per changelog partition, the record sent last and not produced yet (transactions).
        self._hold = transactional
        self._held: dict[tuple[str, int], tuple[bytes | None, bytes | None, int, Headers]] = {}
        self.skipped_errors = 0
        self._error: KafkaError | None = None
        self._partition_counts: dict[str, int] = {}

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has (asked once, then remembered), or None if unknown."""
        count = self._partition_counts.get(topic)
        if count is None:
            try:
                meta = self.producer.list_topics(topic, timeout=30).topics.get(topic)
            except KafkaException:
                return None
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            count = self._partition_counts[topic] = len(meta.partitions)
        return count

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        if timestamp_ms < 0:
            timestamp_ms = 0
        self.sent += 1
        report = self._output_report
        if partition is None:
            partition = -1  # the producer's partitioner decides (murmur2 of the key bytes)
        elif topic in self.changelog_topics:
            report = self._changelog_report
            self.changelog_sent += 1
            tp = (topic, partition)
            if topic in self.time_retained_topics and timestamp_ms > self.newest_timestamp.get(
                tp, timestamp_ms - 1
            ):
                self.newest_timestamp[tp] = timestamp_ms
            if self._hold:
                held = self._held.get(tp)
                self._held[tp] = (key, value, timestamp_ms, headers)
                if held is None:
                    return
                # The record before it goes now: not the partition's last, so no report.
                key, value, timestamp_ms, headers = held
                report = None
        self._produce(topic, key, value, partition, timestamp_ms, headers, report)

    def release(self) -> None:
        """Send the held changelog records, each its partition's last, with a report.

        Call it before the producer's flush that precedes a commit."""
        held, self._held = self._held, {}
        for (topic, partition), (key, value, timestamp_ms, headers) in held.items():
            self._produce(topic, key, value, partition, timestamp_ms, headers,
                          self._changelog_report)  # fmt: skip

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        timestamp_ms: int,
        headers: Headers,
        report: Any,
    ) -> None:
        produce = self.producer.produce
        while True:
            try:
                if headers:
                    # confluent-kafka's stubs take headers as a list of str, bytes or None
                    # values; a list is invariant, so they refuse our list of bytes or None,
                    # which produce reads the same.
                    produce(topic, value, key, partition, on_delivery=report,
                            timestamp=timestamp_ms, headers=headers)  # type: ignore[arg-type]  # fmt: skip
                else:
                    produce(topic, value, key, partition, on_delivery=report,
                            timestamp=timestamp_ms)  # fmt: skip
                break
            except BufferError:
                # The local queue is full: let the producer drain it, then try again.
                self.producer.poll(0.05)

    @property
    def records_out(self) -> int:
        """Records sent to output and repartition topics (everything but changelogs)."""
        return self.sent - self.changelog_sent

    def _delivered(self, error: KafkaError | None, msg: Any) -> None:
        if error is not None:
            # Changelog records are state: losing one would corrupt a restore, never skip them.
            skippable = msg.topic() not in self.changelog_topics and not error.fatal()
            if self.production_handler == "continue" and skippable:
                self.skipped_errors += 1
                log.warning("dropping a record for %s that failed: %s", msg.topic(), error.str())
                return
            if self._error is None:
                self._error = error
            return
        topic = msg.topic()
        if topic in self.changelog_topics:
            tp = (topic, msg.partition())
            offset = msg.offset()
            if offset > self.changelog_end.get(tp, -1):
                self.changelog_end[tp] = offset

    def check(self) -> None:
        """Raise the first delivery error, so nothing after it is committed."""
        if self._error is not None:
            error, self._error = self._error, None
            raise StreamsError(f"a record could not be produced: {error.str()}")

    def reset(self) -> None:
        self._error = None
        self._held.clear()
        self.changelog_end.clear()


class NoOutputCollector:
    """For tasks that must never produce (standby replicas, global tables): a send is a bug."""

    def __init__(self, role: str) -> None:
        self.role = role

    def send(self, topic: str, *args: object) -> None:
        raise StreamsError(f"a {self.role} tried to produce to {topic}")
