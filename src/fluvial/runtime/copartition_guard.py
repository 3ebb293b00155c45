"""The co-partitioning guard: are a joined or table topic's records where Java's partitioner puts them?

A join (and a table's interactive queries) finds a key's records in the task of the partition
that Kafka's Java partitioner (murmur2 of the key bytes) gives that key: fluvial's own producers,
Kafka Streams and every Java producer place records that way. A producer with another
partitioner (librdkafka's default is CRC32: confluent-kafka, kcat, most non-Java clients) puts
some keys elsewhere, and every join with that topic then silently misses their matches. Kafka
Streams cannot tell; fluvial checks the keys it reads.

The check costs a murmur2 hash per record, so it looks at every record of a partition's first
:data:`CHECK_EVERY_FIRST` and then at one in :data:`SAMPLE_EVERY`: a wrong partitioner misplaces
most keys, so a sample finds it within a few records.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from fluvial.errors import CoPartitioningError
from fluvial.partitioner import default_partition
from fluvial.processor.collector import ConsumedRecord

log = logging.getLogger(__name__)
_reported: set[str] = set()
_reported_lock = threading.Lock()

CHECK_MODES = ("warn", "fail", "off")
CHECK_EVERY_FIRST = 1000
SAMPLE_EVERY = 64


def mismatch_message(topic: str, partition: int, key: bytes, expected: int, count: int) -> str:
    return (
        f"topic {topic!r} holds key {key[:40]!r} on partition {partition}, but Kafka's Java "
        f"partitioner (murmur2) puts that key on partition {expected} of {count}: the topic is "
        "joined or read as a table, so records of such keys miss their matches. Write it with "
        "Java's partitioner: with confluent-kafka, librdkafka or kcat set the producer setting "
        "partitioner=murmur2_random (their default, consistent_random, hashes with CRC32). "
        "co_partitioning_check='off' silences this check for topics partitioned on purpose"
    )


class PartitionGuard:
    """Checks the keys of the records a worker reads from its guarded topics."""

    def __init__(
        self,
        mode: str,
        partition_counts: dict[str, int],
        on_mismatch: Callable[[int], None] | None = None,
    ) -> None:
        """``partition_counts``: the guarded topics and their partition counts.
        ``on_mismatch(n)`` counts misplaced records (a metric)."""
        self.mode = mode
        self.counts = partition_counts if mode != "off" else {}
        self.on_mismatch = on_mismatch
        self._seen: dict[tuple[str, int], int] = {}

    def check(self, topic: str, partition: int, records: Sequence[ConsumedRecord]) -> None:
        count = self.counts.get(topic)
        if count is None or count < 2:
            return
        tp = (topic, partition)
        seen = self._seen.get(tp, 0)
        self._seen[tp] = seen + len(records)
        # Indices to look at: all while under the first few, then every SAMPLE_EVERY-th
        # record counted across batches.
        full = max(0, min(len(records), CHECK_EVERY_FIRST - seen))
        start = full + (-(seen + full)) % SAMPLE_EVERY
        indices = list(range(full)) + list(range(start, len(records), SAMPLE_EVERY))
        misplaced = 0
        first: tuple[bytes, int] | None = None
        for i in indices:
            key = records[i].key
            if key is None:
                continue  # placed by the producer at will: no partition belongs to it
            expected = default_partition(key, count)
            if expected != partition:
                misplaced += 1
                first = first or (key, expected)
        if not misplaced:
            return
        if self.on_mismatch is not None:
            self.on_mismatch(misplaced)
        assert first is not None
        message = mismatch_message(topic, partition, first[0], first[1], count)
        if self.mode == "fail":
            raise CoPartitioningError(message)
        # Once per topic and process, whichever worker finds it: the fix is the same for all.
        with _reported_lock:
            if topic in _reported:
                return
            _reported.add(topic)
        log.warning("%s", message)
