"""Read-only views of a task's stores for tests: objects out, no writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fluvial.records import Window, Windowed
from fluvial.serdes import Serde
from fluvial.state.base import WindowStore, from_timestamped_bytes


class ReadOnlyWindowStore:
    """Windows of one store as ``Windowed`` keys. DSL aggregation stores keep the record
    timestamp before each value; ``timestamped`` strips it."""

    def __init__(
        self,
        inner: WindowStore,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        timestamped: bool,
    ) -> None:
        self._inner = inner
        self.name = inner.name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._timestamped = timestamped

    def _value(self, raw: bytes | None) -> Any:
        if raw is None:
            return None
        if self._timestamped:
            raw = from_timestamped_bytes(raw)[0]
        return self._value_serde.deserialize(None, raw)

    def _key(self, key: Any) -> bytes:
        data = self._key_serde.serialize(None, key)
        assert data is not None
        return data

    def fetch(self, key: Any, window_start_ms: int) -> Any:
        """The value of one window of ``key``.

        :param key: the (inner) key, as the topology wrote it.
        :param window_start_ms: the window's start.
        :returns: the window's value, or None if the store has no such window.
        """
        return self._value(self._inner.fetch(self._key(key), window_start_ms))

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """The windows of ``key`` whose start is in ``[time_from, time_to]``, oldest first.

        :param key: the (inner) key.
        :param time_from: the earliest window start, inclusive.
        :param time_to: the latest window start, inclusive.
        :returns: an iterator of ``(window_start_ms, value)``.
        """
        for start, raw in self._inner.fetch_range(self._key(key), time_from, time_to):
            yield start, self._value(raw)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[Any], Any]]:
        """Every key's windows whose start is in ``[time_from, time_to]``, by start, then key.

        :param time_from: the earliest window start, inclusive.
        :param time_to: the latest window start, inclusive.
        :returns: an iterator of ``(Windowed(key, Window(start, end)), value)``.
        """
        size = self._inner.window_size_ms
        for key, start, raw in self._inner.fetch_all(time_from, time_to):
            windowed = Windowed(self._key_serde.deserialize(None, key), Window(start, start + size))
            yield windowed, self._value(raw)

    def all(self) -> Iterator[tuple[Windowed[Any], Any]]:
        """Every window of every key, as ``(Windowed(key, window), value)``, by start, then key."""
        return self.fetch_all(-(2**63), 2**63 - 1)

    def to_dict(self) -> dict[Windowed[Any], Any]:
        """Every window of every key as a dict ``{Windowed(key, window): value}``.

        ```python
        counts = driver.get_window_store("counts").to_dict()
        assert counts[Windowed("news", Window(0, 5000))] == 2
        ```
        """
        return dict(self.all())
