"""Object-level views of bytes stores: the serdes sit here, and only here.

Processors work with these facades; the runtime works with the bytes stores underneath. The
``topic`` handed to the serdes is the store's changelog topic when the caller knows it, since
schema-aware serdes key their schemas on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from fluvial.records import Window, Windowed
from fluvial.serdes import Serde
from fluvial.state.base import KeyValueStore, ValueAndTimestamp, WindowStore
from fluvial.state.session import SessionEntry, SessionStore
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.versioned import VersionedKeyValueStore, VersionedRecord

K = TypeVar("K")
V = TypeVar("V")


class _Codec(Generic[K, V]):
    def __init__(self, key_serde: Serde[K], value_serde: Serde[V], topic: str | None) -> None:
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.topic = topic

    def key_bytes(self, key: K) -> bytes:
        data = self.key_serde.serialize(self.topic, key)
        if data is None:
            raise ValueError("state stores do not accept None keys")
        return data

    def value_bytes(self, value: V | None) -> bytes | None:
        return self.value_serde.serialize(self.topic, value)

    def key(self, data: bytes) -> K:
        return self.key_serde.deserialize(self.topic, data)  # type: ignore[return-value]

    def value(self, data: bytes | None) -> V | None:
        return self.value_serde.deserialize(self.topic, data)

    def opt_key_bytes(self, key: K | None) -> bytes | None:
        return None if key is None else self.key_bytes(key)


class TypedKeyValueStore(Generic[K, V]):
    """Objects in, objects out, over a bytes :class:`KeyValueStore`."""

    def __init__(
        self,
        inner: KeyValueStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        topic: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._codec = _Codec(key_serde, value_serde, topic)

    def get(self, key: K) -> V | None:
        return self._codec.value(self.inner.get(self._codec.key_bytes(key)))

    def put(self, key: K, value: V | None, timestamp_ms: int = 0) -> None:
        self.inner.put(self._codec.key_bytes(key), self._codec.value_bytes(value), timestamp_ms)

    def put_if_absent(self, key: K, value: V, timestamp_ms: int = 0) -> V | None:
        raw = self._codec.value_bytes(value)
        assert raw is not None
        return self._codec.value(
            self.inner.put_if_absent(self._codec.key_bytes(key), raw, timestamp_ms)
        )

    def delete(self, key: K, timestamp_ms: int = 0) -> V | None:
        return self._codec.value(self.inner.delete(self._codec.key_bytes(key), timestamp_ms))

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        """Entries between the keys' *serialized* forms, in serialized-byte order."""
        codec = self._codec
        for key, value in self.inner.range(
            codec.opt_key_bytes(from_key), codec.opt_key_bytes(to_key)
        ):
            yield codec.key(key), codec.value(value)  # type: ignore[misc]

    def all(self) -> Iterator[tuple[K, V]]:
        return self.range(None, None)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()


class TypedTimestampedKeyValueStore(Generic[K, V]):
    """Objects with their timestamps, over a :class:`TimestampedKeyValueStore`."""

    def __init__(
        self,
        inner: TimestampedKeyValueStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        topic: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._codec = _Codec(key_serde, value_serde, topic)

    def get(self, key: K) -> ValueAndTimestamp[V] | None:
        found = self.inner.get(self._codec.key_bytes(key))
        return None if found is None else self._decode(found)

    def put(self, key: K, value: V | None, timestamp_ms: int) -> None:
        self.inner.put(self._codec.key_bytes(key), self._codec.value_bytes(value), timestamp_ms)

    def put_if_absent(self, key: K, value: V, timestamp_ms: int) -> ValueAndTimestamp[V] | None:
        raw = self._codec.value_bytes(value)
        assert raw is not None
        found = self.inner.put_if_absent(self._codec.key_bytes(key), raw, timestamp_ms)
        return None if found is None else self._decode(found)

    def delete(self, key: K, timestamp_ms: int = 0) -> ValueAndTimestamp[V] | None:
        found = self.inner.delete(self._codec.key_bytes(key), timestamp_ms)
        return None if found is None else self._decode(found)

    def range(
        self, from_key: K | None, to_key: K | None
    ) -> Iterator[tuple[K, ValueAndTimestamp[V]]]:
        codec = self._codec
        for key, found in self.inner.range(
            codec.opt_key_bytes(from_key), codec.opt_key_bytes(to_key)
        ):
            yield codec.key(key), self._decode(found)

    def all(self) -> Iterator[tuple[K, ValueAndTimestamp[V]]]:
        return self.range(None, None)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()

    def _decode(self, found: tuple[bytes, int]) -> ValueAndTimestamp[V]:
        return ValueAndTimestamp(self._codec.value(found[0]), found[1])  # type: ignore[arg-type]


class ReadOnlyKeyValueStore(Generic[K, V]):
    """A read-only object view of a key-value store, for tests and interactive queries.

    Over a timestamped store it shows plain values, as Kafka Streams' test driver does; use
    :meth:`get_with_timestamp` for the timestamp.
    """

    def __init__(
        self,
        inner: KeyValueStore | TimestampedKeyValueStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        topic: str | None = None,
    ) -> None:
        self._inner = inner
        self.name = inner.name
        self._codec = _Codec(key_serde, value_serde, topic)

    def get(self, key: K) -> V | None:
        found: Any = self._inner.get(self._codec.key_bytes(key))
        if isinstance(found, tuple):
            found = found[0]
        return self._codec.value(found)

    def get_with_timestamp(self, key: K) -> ValueAndTimestamp[V] | None:
        if not isinstance(self._inner, TimestampedKeyValueStore):
            raise TypeError(f"store {self.name!r} is not timestamped")
        found = self._inner.get(self._codec.key_bytes(key))
        if found is None:
            return None
        return ValueAndTimestamp(self._codec.value(found[0]), found[1])  # type: ignore[arg-type]

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        codec = self._codec
        entries: Iterator[tuple[bytes, Any]] = self._inner.range(
            codec.opt_key_bytes(from_key), codec.opt_key_bytes(to_key)
        )
        for key, found in entries:
            raw = found[0] if isinstance(found, tuple) else found
            yield codec.key(key), codec.value(raw)  # type: ignore[misc]

    def all(self) -> Iterator[tuple[K, V]]:
        return self.range(None, None)

    def approximate_num_entries(self) -> int:
        return self._inner.approximate_num_entries()

    def __getitem__(self, key: K) -> V:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.approximate_num_entries()

    def to_dict(self) -> dict[K, V]:
        """Every entry as a dict: the usual assertion shape in tests."""
        return dict(self.all())


class TypedWindowStore(Generic[K, V]):
    """Objects in, :class:`Windowed` keys out, over a bytes :class:`WindowStore`."""

    def __init__(
        self,
        inner: WindowStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        topic: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._codec = _Codec(key_serde, value_serde, topic)

    def put(self, key: K, value: V | None, window_start_ms: int, timestamp_ms: int = 0) -> None:
        self.inner.put(
            self._codec.key_bytes(key),
            self._codec.value_bytes(value),
            window_start_ms,
            timestamp_ms,
        )

    def fetch(self, key: K, window_start_ms: int) -> V | None:
        return self._codec.value(self.inner.fetch(self._codec.key_bytes(key), window_start_ms))

    def fetch_range(self, key: K, time_from: int, time_to: int) -> Iterator[tuple[int, V]]:
        """``(window start, value)`` pairs, ascending by start."""
        for start, raw in self.inner.fetch_range(self._codec.key_bytes(key), time_from, time_to):
            yield start, self._codec.value(raw)  # type: ignore[misc]

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[K], V]]:
        """``(Windowed(key, window), value)`` for window starts in ``[time_from, time_to]``."""
        size = self.inner.window_size_ms
        for key, start, raw in self.inner.fetch_all(time_from, time_to):
            windowed = Windowed(self._codec.key(key), Window(start, start + size))
            yield windowed, self._codec.value(raw)  # type: ignore[misc]

    def all(self) -> Iterator[tuple[Windowed[K], V]]:
        return self.fetch_all(-(2**63), 2**63 - 1)


class TypedSessionStore(Generic[K, V]):
    """Objects over a bytes :class:`SessionStore`; sessions come out as :class:`Windowed` keys.

    A session window's bounds are both inclusive: ``Window(start, end)`` with ``end`` the
    timestamp of the session's last record, as in Kafka Streams' ``SessionWindow``.
    """

    def __init__(
        self,
        inner: SessionStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        topic: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._codec = _Codec(key_serde, value_serde, topic)

    def put(self, session: Windowed[K], value: V | None, timestamp_ms: int | None = None) -> None:
        window = session.window
        self.inner.put(
            self._codec.key_bytes(session.key),
            window.start_ms,
            window.end_ms,
            self._codec.value_bytes(value),
            timestamp_ms,
        )

    def remove(self, session: Windowed[K], timestamp_ms: int | None = None) -> None:
        window = session.window
        self.inner.remove(
            self._codec.key_bytes(session.key), window.start_ms, window.end_ms, timestamp_ms
        )

    def fetch_session(self, key: K, session_start_ms: int, session_end_ms: int) -> V | None:
        raw = self.inner.fetch_session(self._codec.key_bytes(key), session_start_ms, session_end_ms)
        return self._codec.value(raw)

    def find_sessions(
        self, key: K, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """Sessions with ``end >= earliest_end`` and ``start <= latest_start``, by (end, start)."""
        return self._decode(
            self.inner.find_sessions(
                self._codec.key_bytes(key), earliest_session_end_ms, latest_session_start_ms
            )
        )

    def find_sessions_range(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_session_end_ms: int,
        latest_session_start_ms: int,
    ) -> Iterator[tuple[Windowed[K], V]]:
        codec = self._codec
        return self._decode(
            self.inner.find_sessions_range(
                codec.opt_key_bytes(key_from),
                codec.opt_key_bytes(key_to),
                earliest_session_end_ms,
                latest_session_start_ms,
            )
        )

    def fetch(self, key: K) -> Iterator[tuple[Windowed[K], V]]:
        return self._decode(self.inner.fetch(self._codec.key_bytes(key)))

    def fetch_range(self, key_from: K | None, key_to: K | None) -> Iterator[tuple[Windowed[K], V]]:
        codec = self._codec
        return self._decode(
            self.inner.fetch_range(codec.opt_key_bytes(key_from), codec.opt_key_bytes(key_to))
        )

    def all(self) -> Iterator[tuple[Windowed[K], V]]:
        return self._decode(self.inner.all())

    def _decode(self, entries: Iterator[SessionEntry]) -> Iterator[tuple[Windowed[K], V]]:
        codec = self._codec
        for entry in entries:
            windowed = Windowed(codec.key(entry.key), Window(entry.start_ms, entry.end_ms))
            yield windowed, codec.value(entry.value)  # type: ignore[misc]


class TypedVersionedKeyValueStore(Generic[K, V]):
    """Objects over a bytes :class:`VersionedKeyValueStore`."""

    def __init__(
        self,
        inner: VersionedKeyValueStore,
        key_serde: Serde[K],
        value_serde: Serde[V],
        topic: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._codec = _Codec(key_serde, value_serde, topic)

    def put(self, key: K, value: V | None, timestamp_ms: int) -> int:
        """Add a version; returns its ``valid_to`` or a ``PUT_RETURN_CODE_*`` (see the store)."""
        raw = self._codec.value_bytes(value)
        return self.inner.put(self._codec.key_bytes(key), raw, timestamp_ms)

    def get(self, key: K, as_of_timestamp_ms: int | None = None) -> VersionedRecord[V] | None:
        return self._decode(self.inner.get(self._codec.key_bytes(key), as_of_timestamp_ms))

    def delete(self, key: K, timestamp_ms: int) -> VersionedRecord[V] | None:
        return self._decode(self.inner.delete(self._codec.key_bytes(key), timestamp_ms))

    def _decode(self, found: VersionedRecord[bytes] | None) -> VersionedRecord[V] | None:
        if found is None:
            return None
        value = self._codec.value(found.value)
        return VersionedRecord(value, found.timestamp_ms, found.valid_to_ms)  # type: ignore[arg-type]
