"""Input and output topics of the test driver: objects in, objects out, serdes in between.

Going through the serdes on both sides means a test exercises exactly the bytes a Kafka
deployment would see.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fluvial.config import to_millis
from fluvial.processor.collector import Headers
from fluvial.records import KeyValue, Record
from fluvial.serdes import Serde

if TYPE_CHECKING:
    from fluvial.testing.driver import TopologyTestDriver


class TestInputTopic:
    """Pipes records into one topic. Without a timestamp, a record gets the topic's clock,
    which then moves on by ``auto_advance_ms``."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        driver: TopologyTestDriver,
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        start_timestamp_ms: int = 0,
        auto_advance_ms: int = 0,
    ) -> None:
        self._driver = driver
        self.name = name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._time_ms = start_timestamp_ms
        self._advance_ms = auto_advance_ms

    def advance_time(self, duration: int | timedelta) -> None:
        """Move this topic's clock (used for records piped without a timestamp)."""
        self._time_ms += to_millis(duration, "advance")

    def pipe_input(
        self,
        key: Any,
        value: Any,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Send one record and process it (and everything it causes) to completion."""
        if timestamp_ms is None:
            timestamp_ms = self._time_ms
            self._time_ms += self._advance_ms
        self._driver._pipe(
            self.name,
            self._key_serde.serialize(self.name, key),
            self._value_serde.serialize(self.name, value),
            timestamp_ms,
            list(headers or []),
        )

    def pipe_value(self, value: Any, timestamp_ms: int | None = None) -> None:
        """Send one record with a None key and process it to completion.

        :param value: the value, serialized with the topic's value serde.
        :param timestamp_ms: the record's timestamp; by default the topic's clock, which then moves
            on by ``auto_advance_ms``.
        """
        self.pipe_input(None, value, timestamp_ms)

    def pipe_key_value_list(
        self, pairs: Iterable[KeyValue[Any, Any] | tuple[Any, Any]], timestamp_ms: int | None = None,
        advance_ms: int = 0,
    ) -> None:  # fmt: skip
        """Send pairs in order; with ``timestamp_ms``, the n-th gets ``timestamp_ms + n * advance_ms``."""
        for i, (key, value) in enumerate(pairs):
            ts = None if timestamp_ms is None else timestamp_ms + i * advance_ms
            self.pipe_input(key, value, ts)

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        """Send records with None keys, in order, each with the topic's clock as its timestamp.

        :param values: the values.
        """
        for value in values:
            self.pipe_input(None, value)

    def pipe_records(self, records: Iterable[tuple[Any, Any, int]]) -> None:
        """Send ``(key, value, timestamp_ms)`` rows: the usual shape of a data-driven test."""
        for key, value, ts in records:
            self.pipe_input(key, value, ts)


class TestOutputTopic:
    """Reads what the topology wrote to one topic, in write order. Reading consumes."""

    __test__ = False

    def __init__(
        self,
        queue: deque[Record[bytes | None, bytes | None]],
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
    ) -> None:
        self._queue = queue
        self.name = name
        self._key_serde = key_serde
        self._value_serde = value_serde

    def _decode(self, raw: Record[bytes | None, bytes | None]) -> Record[Any, Any]:
        return Record(
            self._key_serde.deserialize(self.name, raw.key),
            self._value_serde.deserialize(self.name, raw.value),
            raw.timestamp_ms,
            list(raw.headers),
            self.name,
            raw.partition,
            raw.offset,
        )

    def read_record(self) -> Record[Any, Any]:
        """Read the next record, with key, value, ``timestamp_ms`` and headers.

        :returns: the oldest unread record (reading consumes it).
        :raises LookupError: if no record is left.
        """
        if not self._queue:
            raise LookupError(f"no record left in output topic {self.name!r}")
        return self._decode(self._queue.popleft())

    def read_records(self) -> list[Record[Any, Any]]:
        """Read every unread record, in emission order.

        :returns: the records (empty if none is left).
        """
        out = []
        while self._queue:
            out.append(self.read_record())
        return out

    def read_key_value(self) -> tuple[Any, Any]:
        """Read the next record as ``(key, value)``.

        :raises LookupError: if no record is left.
        """
        record = self.read_record()
        return record.key, record.value

    def read_value(self) -> Any:
        """Read the next record's value.

        :raises LookupError: if no record is left.
        """
        return self.read_record().value

    def read_key_values(self) -> list[tuple[Any, Any]]:
        """Every unread record as ``(key, value)``, in emission order."""
        return [(r.key, r.value) for r in self.read_records()]

    def read_values(self) -> list[Any]:
        """Read every unread record's value, in emission order."""
        return [r.value for r in self.read_records()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """The latest value per key; a ``None`` value removes the key, as in a table."""
        table: dict[Any, Any] = {}
        for key, value in self.read_key_values():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        return table

    def queue_size(self) -> int:
        """How many records are written and not yet read."""
        return len(self._queue)

    def is_empty(self) -> bool:
        """Whether every record written has been read."""
        return not self._queue
