"""The values that flow through a topology: records, key-value pairs and windowed keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MemberDescriptorType
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class KeyValue(NamedTuple, Generic[K, V]):
    """A key and a value. ``map`` may return one of these or a plain ``(key, value)`` tuple."""

    key: K
    value: V


def slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The store of slot ``name`` of ``cls``, bypassing a frozen class's ``__setattr__``.

    Frozen dataclasses set their fields through ``object.__setattr__``, which costs about half
    again a plain slot store. Values made once per emitted revision (windows, windowed keys,
    changes) write their slots with this instead, in an ``__init__`` of their own.
    """
    descriptor = vars(cls).get(name)
    if not isinstance(descriptor, MemberDescriptorType):
        raise TypeError(f"{cls.__name__}.{name} is not a slot; declare the class with slots=True")
    return descriptor.__set__


# Windows and windowed keys are made once per emitted revision, so their constructors set the
# slots directly (what the generated ones do, less the detour); see slot_setter.
@dataclass(frozen=True, slots=True, order=True, init=False)
class Window:
    """A time window ``[start_ms, end_ms)``; sliding and session windows treat ``end_ms`` as inclusive."""

    start_ms: int
    end_ms: int

    def __init__(self, start_ms: int, end_ms: int) -> None:
        _set_start(self, start_ms)
        _set_end(self, end_ms)
        if end_ms < start_ms:
            raise ValueError(f"window end {end_ms} is before its start {start_ms}")


@dataclass(frozen=True, slots=True, init=False)
class Windowed(Generic[K]):
    """A key of a windowed aggregation: the record key plus the window it was counted in."""

    key: K
    window: Window

    def __init__(self, key: K, window: Window) -> None:
        _set_key(self, key)
        _set_window(self, window)

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start_ms}/{self.window.end_ms}]"


_set_start, _set_end = slot_setter(Window, "start_ms"), slot_setter(Window, "end_ms")
_set_key, _set_window = slot_setter(Windowed, "key"), slot_setter(Windowed, "window")


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
