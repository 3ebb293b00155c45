"""The values that flow through a topology: records, key-value pairs and windowed keys.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). Records, windows and windowed keys are native classes; user code builds
and reads them, and this module calls none.
"""

from __future__ import annotations

from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class KeyValue(NamedTuple, Generic[K, V]):
    """A key and a value. ``map`` may return one of these or a plain ``(key, value)`` tuple."""

    key: K
    value: V


class Window:
    """A time window ``[start_ms, end_ms)``; sliding and session windows treat ``end_ms`` as inclusive.

    Immutable (its bounds are read-only), equal and ordered by ``(start_ms, end_ms)``.
    """

    # A plain class with read-only properties rather than a frozen dataclass: one is made per
    # record of a windowed operator, and a frozen dataclass's __init__ stays interpreted and
    # sets each field through object.__setattr__.
    _start_ms: int
    _end_ms: int

    def __init__(self, start_ms: int, end_ms: int) -> None:
        if end_ms < start_ms:
            raise ValueError(f"window end {end_ms} is before its start {start_ms}")
        self._start_ms = start_ms
        self._end_ms = end_ms

    @property
    def start_ms(self) -> int:
        """Where the window starts, in milliseconds (inclusive)."""
        return self._start_ms

    @property
    def end_ms(self) -> int:
        """Where the window ends, in milliseconds."""
        return self._end_ms

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return self._start_ms == other._start_ms and self._end_ms == other._end_ms

    def __hash__(self) -> int:
        return hash((self._start_ms, self._end_ms))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return (self._start_ms, self._end_ms) < (other._start_ms, other._end_ms)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return (self._start_ms, self._end_ms) <= (other._start_ms, other._end_ms)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return (self._start_ms, self._end_ms) > (other._start_ms, other._end_ms)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return (self._start_ms, self._end_ms) >= (other._start_ms, other._end_ms)

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        # Pickled by its constructor's arguments: the compiled class has no other way back.
        return Window, (self._start_ms, self._end_ms)

    def __repr__(self) -> str:
        return f"Window(start_ms={self._start_ms!r}, end_ms={self._end_ms!r})"


# Windowed and Record are plain classes, not dataclasses: compiled (mypyc), a dataclass that is
# also Generic fails at import, and a plain class with typed attributes becomes a native one.
class Windowed(Generic[K]):
    """A key of a windowed aggregation: the record key plus the window it was counted in."""

    key: K
    window: Window

    def __init__(self, key: K, window: Window) -> None:
        self.key = key
        self.window = window

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Windowed) and self.key == other.key and self.window == other.window

    def __hash__(self) -> int:
        return hash((self.key, self.window))

    def __reduce__(self) -> tuple[Any, tuple[Any, Window]]:
        return Windowed, (self.key, self.window)

    def __repr__(self) -> str:
        return f"Windowed(key={self.key!r}, window={self.window!r})"

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start_ms}/{self.window.end_ms}]"


class Record(Generic[K, V]):
    """One record: key, value, timestamp (ms) and headers, plus where it was read from."""

    key: K
    value: V
    timestamp_ms: int
    headers: list[tuple[str, bytes | None]]
    topic: str | None
    partition: int | None
    offset: int | None

    def __init__(
        self,
        key: K,
        value: V,
        timestamp_ms: int,
        headers: list[tuple[str, bytes | None]] | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.key = key
        self.value = value
        self.timestamp_ms = timestamp_ms
        self.headers = [] if headers is None else headers
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and (
            self.key, self.value, self.timestamp_ms, self.headers, self.topic, self.partition,
            self.offset,
        ) == (
            other.key, other.value, other.timestamp_ms, other.headers, other.topic,
            other.partition, other.offset,
        )  # fmt: skip

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return Record, (self.key, self.value, self.timestamp_ms, self.headers, self.topic,
                        self.partition, self.offset)  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"Record(key={self.key!r}, value={self.value!r}, timestamp_ms={self.timestamp_ms!r}, "
            f"headers={self.headers!r}, topic={self.topic!r}, partition={self.partition!r}, "
            f"offset={self.offset!r})"
        )

    # These run once per record per operator: direct construction, because
    # dataclasses.replace() inspects the fields on every call. The same objects are shared.
    def with_key_value(self, key: Any, value: Any) -> Record[Any, Any]:
        """A copy with a new key and value, keeping the timestamp, headers and source position.

        :param key: the new key.
        :param value: the new value.
        :returns: the new record (the original is unchanged), e.g. to ``context.forward``.
        """
        return Record(key, value, self.timestamp_ms, self.headers, self.topic, self.partition,
                      self.offset)  # fmt: skip

    def with_value(self, value: Any) -> Record[Any, Any]:
        """A copy with a new value, keeping the key, timestamp, headers and source position.

        :param value: the new value.
        :returns: the new record (the original is unchanged).
        """
        return Record(self.key, value, self.timestamp_ms, self.headers, self.topic,
                      self.partition, self.offset)  # fmt: skip

    def with_timestamp(self, timestamp_ms: int) -> Record[Any, Any]:
        """A copy with a new timestamp, keeping everything else.

        :param timestamp_ms: the new event time, in milliseconds.
        :returns: the new record (the original is unchanged).
        """
        return Record(self.key, self.value, timestamp_ms, self.headers, self.topic,
                      self.partition, self.offset)  # fmt: skip
