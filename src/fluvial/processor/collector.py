"""What a task consumes and where it produces: raw records in, a record collector out.

The task never talks to Kafka. The runtime feeds it :class:`ConsumedRecord` s and gives it a
:class:`RecordCollector` that turns sends into producer calls (or, in the test driver, into
lists). Everything crossing this boundary is bytes.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls no user code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

Headers = list[tuple[str, bytes | None]]


class TaskId(NamedTuple):
    """``(subtopology, partition)``; printed ``0_1`` as in Kafka Streams."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"


class ConsumedRecord(NamedTuple):
    """One record as read from a topic partition, still in bytes.

    A named tuple: one is built per consumed record, and a tuple is the cheapest object to
    build. ``headers`` is any sequence of (name, value) pairs; the task copies it into a list.
    """

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    offset: int
    headers: Sequence[tuple[str, bytes | None]] = ()


class RecordCollector(Protocol):
    """Receives every record a task produces: outputs, repartition and changelog records.

    ``partition`` is ``None`` when the producer's default partitioner should decide (hash of
    the key bytes), and set for changelog records, which go to the task's own partition.
    """

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """Produce one record (bytes already serialized); ``partition`` None lets the producer's
        partitioner choose."""


#: On a record written to a repartition topic: the user's record it comes from, as
#: ``TOPIC:PARTITION:OFFSET`` (a topic name has no ``:``). Carried on through later repartitions,
#: so that a dead letter downstream names the record a user wrote, never the internal topic
#: (which ``fluvial reset`` deletes). Operators never see it: the task takes it off.
ORIGIN_HEADER = "fluvial.origin"


def encode_origin(topic: str, partition: int, offset: int) -> bytes:
    return f"{topic}:{partition}:{offset}".encode()


def decode_origin(value: bytes | None) -> tuple[str, int, int] | None:
    """(topic, partition, offset) of an :data:`ORIGIN_HEADER`, or None if it is malformed."""
    try:
        topic, partition, offset = (value or b"").decode().rsplit(":", 2)
        return topic, int(partition), int(offset)
    except ValueError:
        return None
