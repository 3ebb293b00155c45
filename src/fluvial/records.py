"""The values that flow through a topology: records, key-value pairs and windowed keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class KeyValue(NamedTuple, Generic[K, V]):
    """A key and a value. ``map`` may return one of these or a plain ``(key, value)`` tuple."""

    key: K
    value: V


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """A time window ``[start_ms, end_ms)``; sliding and session windows treat ``end_ms`` as inclusive."""

    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.end_ms < self.start_ms:
            raise ValueError(f"window end {self.end_ms} is before its start {self.start_ms}")


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """A key of a windowed aggregation: the record key plus the window it was counted in."""

    key: K
    window: Window

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start_ms}/{self.window.end_ms}]"


# Frozen dataclasses set their fields through object.__setattr__, which costs about half again
# a plain slot store. Windows and windowed keys are made once per emitted revision, so their
# constructors set the slots directly (what the generated ones do, less the detour).
_set_start, _set_end = Window.start_ms.__set__, Window.end_ms.__set__  # type: ignore[attr-defined]
_set_key, _set_window = Windowed.key.__set__, Windowed.window.__set__  # type: ignore[attr-defined]


def _window_init(self: Window, start_ms: int, end_ms: int) -> None:
    _set_start(self, start_ms)
    _set_end(self, end_ms)
    self.__post_init__()


def _windowed_init(self: Windowed[Any], key: Any, window: Window) -> None:
    _set_key(self, key)
    _set_window(self, window)


Window.__init__ = _window_init  # type: ignore[method-assign]
Windowed.__init__ = _windowed_init  # type: ignore[method-assign]


@dataclass(slots=True)
class Record(Generic[K, V]):
    """One record: key, value, timestamp (ms) and headers, plus where it was read from."""

    key: K
    value: V
    timestamp_ms: int
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None

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
