"""Restoring task state from changelog topics: only the suffix a store is missing."""

from __future__ import annotations

import logging
import time
from typing import cast

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fluvial.config import StreamsConfig, to_millis
from fluvial.errors import ChangelogGapError, StreamsError
from fluvial.kafka.consumed import ConsumedMessage, consume
from fluvial.metrics import WorkerMetrics
from fluvial.processor.task import StreamTask
from fluvial.runtime.clients import restore_consumer_settings
from fluvial.runtime.state import TaskState
from fluvial.state.base import ChangelogMessage, ChangelogRecord, new_tuple

log = logging.getLogger(__name__)

# Records per read. Small on purpose: CPython's cycle collector runs once a young-generation
# threshold of new container objects outlive their statement (gc.get_threshold(): 700 by
# default, 20,000 once a task exists, see fluvial.processor.task), and a batch's messages, plus
# the records each store layer makes of them, are such objects. Batches of 2000 at 700 made it
# run about six times per batch, a second per million records; at 500, with the messages
# dropped before the stores take the records, it next to never runs during a restore.
BATCH = 500
# How long one read waits for records. Short: at a partition's end it is waited out whole.
WAIT_S = 0.05
TIMEOUT_S = 60.0
# How long a restore may make no progress before it fails (and the worker restarts). A restore
# never declares a store complete that is not: it waits for the end, or fails loudly.
STALL_TIMEOUT_S = 120.0


def keyless_changelog_record(
    topic: str, partition: int, offset: int, application_id: str
) -> StreamsError:
    """A changelog record without a key: not fluvial's, and no store can take it."""
    return StreamsError(
        f"changelog {topic}-{partition} holds a record without a key at offset {offset}. "
        "fluvial writes every changelog record with its store key (and a compacted topic takes "
        "no other), so something else wrote to this topic, and restoring from it would "
        "corrupt the store. Stop that writer, set the topic's cleanup.policy back to compact, "
        f"then rebuild the state from the input with 'fluvial reset {application_id}'"
    )


def _records_only(messages: list[ConsumedMessage], end: int) -> bool:
    """Whether a batch holds records alone, each with a key and short of ``end``.

    One partition is assigned at a time, so offsets ascend and the last message's decides the
    limit. An event (an end of partition, an error) has no key, nor has a record that fluvial
    did not write: one look at each key finds both, and such a batch is sifted record by record.
    """
    if not messages:
        return False
    last = messages[-1]
    return last.error() is None and last.offset() < end and None not in [m.key() for m in messages]


class Restorer:
    """Replays changelog partitions into a task's stores before it processes anything."""

    def __init__(self, config: StreamsConfig, metrics: WorkerMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self._consumer: Consumer | None = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(restore_consumer_settings(self.config))
        return self._consumer

    def restore(
        self,
        task: StreamTask,
        state: TaskState,
        limits: dict[tuple[str, int], int] | None = None,
        needed: dict[tuple[str, int], int] | None = None,
    ) -> dict[tuple[str, int], int]:
        """Bring every store of ``task`` up to its changelog's end, or to ``limits`` if given.

        ``needed`` maps changelog partitions to the lowest offset the committed state needs;
        a changelog whose log start has passed it (and the store's own checkpoint) has lost
        records the store still needs, and the restore refuses to go on. Returns the end each
        changelog partition was restored to.
        """
        ends: dict[tuple[str, int], int] = {}
        for store_name, (topic, partition) in task.changelog_partitions().items():
            store = task.stores[store_name]
            consumer = self._client()
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=TIMEOUT_S
            )
            ends[(topic, partition)] = high
            start = store.committed_offset
            if start is not None and start > high:
                # The store is ahead of its changelog (the topic was recreated): start over.
                log.warning("store %s is ahead of %s-%d; restoring it afresh",
                            store_name, topic, partition)  # fmt: skip
                store.destroy()
                store.init(state.task_dir)
                start = None
            need = (needed or {}).get((topic, partition))
            if need is not None and low > max(start or 0, need):
                self._refuse(task, store_name, topic, partition, low, start, need)
            start = low if start is None else max(start, low)
            limit = (limits or {}).get((topic, partition))
            if limit is not None:
                high = min(high, limit)
            if start >= high:
                self.metrics.stores_restored += 1
                continue
            self.metrics.restore_total += high - start
            restored = self._replay(task, store_name, topic, partition, start, high)
            log.info("restored %d records of %s into %s (task %s)",
                     restored, topic, store_name, task.task_id)  # fmt: skip
            store.committed_offset = high  # nothing is uncommitted while restoring
            store.flush()
            self.metrics.stores_restored += 1
        return ends

    def _refuse(
        self,
        task: StreamTask,
        store_name: str,
        topic: str,
        partition: int,
        low: int,
        local: int | None,
        need: int,
    ) -> None:
        self.metrics.restore_gaps += 1
        had = "nothing locally" if local is None else f"a local copy up to offset {local}"
        retention = to_millis(self.config.windowstore_changelog_additional_retention_ms)
        message = (
            f"state store {store_name!r} of task {task.task_id} cannot be restored: its "
            f"changelog {topic}-{partition} now starts at offset {low}, but the committed state "
            f"needs its records from offset {need} and this worker has {had}. The records "
            f"in between were deleted (by the topic's retention.ms, or by DeleteRecords), so "
            "the store would come back short. Nothing was processed. If the application was "
            "down longer than windowstore_changelog_additional_retention_ms "
            f"({retention} ms), raise it; then rebuild the state from the input with "
            f"'fluvial reset {self.config.application_id}' (the input topics must still hold "
            "the records), or restore the changelog."
        )
        log.error("%s", message)
        raise ChangelogGapError(message)

    def _replay(
        self, task: StreamTask, store_name: str, topic: str, partition: int, start: int, end: int
    ) -> int:
        consumer = self._client()
        consumer.assign([TopicPartition(topic, partition, start)])
        restored = 0
        position = start
        counted = start  # offsets already counted in metrics.restored
        stalled_since = time.monotonic()
        while position < end:
            if time.monotonic() - stalled_since > STALL_TIMEOUT_S:
                raise StreamsError(
                    f"restoring {topic}-{partition} made no progress for {STALL_TIMEOUT_S:g} s "
                    f"at offset {position} of {end}: is a broker down, or a transaction of "
                    "another producer still open on the changelog?"
                )
            # Never ask for more records than offsets are left: a call that gets them all
            # returns at once, where one waiting for more would wait out its timeout.
            # (Transaction markers take offsets too, so the last call may still wait.)
            messages = consume(consumer, min(BATCH, end - position), WAIT_S)
            if _records_only(messages, end):
                # Almost every batch: the store takes it as it came, in one loop.
                reached = messages[-1].offset() + 1
                task.restore_batch(store_name, cast("list[ChangelogMessage]", messages))
                restored += len(messages)
                events_only = False
                del messages  # see BATCH
            else:
                batch, reached = self._sift(consumer, messages, topic, partition, position, end)
                events_only = bool(messages) and not batch
                del messages  # see BATCH
                if batch:
                    task.restore(store_name, batch)
                    restored += len(batch)
            if reached > position:
                position, stalled_since = min(reached, end), time.monotonic()
            elif events_only and position < end:
                time.sleep(0.05)  # only an end short of ``end`` came: see _event
            # Progress in offsets, as restore_total counts them: transaction markers take
            # offsets too, and "restoring k of n" must reach n.
            self.metrics.restored += position - counted
            counted = position
        consumer.unassign()
        return restored

    def _sift(
        self,
        consumer: Consumer,
        messages: list[ConsumedMessage],
        topic: str,
        partition: int,
        position: int,
        end: int,
    ) -> tuple[list[ChangelogRecord], int]:
        """The records of a batch with events, records past ``end`` or a keyless record in it,
        and the position the batch reached."""
        reached = position
        batch: list[ChangelogRecord] = []
        for msg in messages:
            if msg.error() is not None:
                reached = self._event(consumer, msg, topic, partition, reached)
                continue
            offset = msg.offset()
            if offset >= end:
                reached = end  # records past the limit belong to uncommitted input
                continue
            key = msg.key()
            if key is None:
                raise keyless_changelog_record(topic, partition, offset, self.config.application_id)
            batch.append(new_tuple(ChangelogRecord, (key, msg.value(), msg.timestamp()[1])))
            reached = offset + 1
        return batch, reached

    @staticmethod
    def _event(
        consumer: Consumer, msg: ConsumedMessage, topic: str, partition: int, reached: int
    ) -> int:
        """The position a restore reached, given an event instead of a record."""
        error = msg.error()
        assert error is not None
        if error.code() != KafkaError._PARTITION_EOF:
            raise StreamsError(f"restoring {topic}-{partition} failed: {error.str()}")
        # The end of what is readable now. Transaction markers take offsets but are never
        # delivered, so only the consumer's position says whether the end was reached; an
        # end short of it means an abort's markers are still being written: keep reading.
        [tp] = consumer.position([TopicPartition(topic, partition)])
        return max(reached, tp.offset)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
