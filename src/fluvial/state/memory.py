"""In-memory stores: the same contracts as RocksDB, with the changelog as their only durability.

Sorted order comes from a dict plus a ``bisect``-maintained list of keys. Iterators work on a
snapshot of the keys in range, so a processor may write to a store while it iterates over it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path

from fluvial.state.base import (
    ChangelogRecord,
    KeyValueStore,
    WindowStore,
    parse_window_store_key,
    window_store_key,
)


class InMemoryKeyValueStore(KeyValueStore):
    """A sorted in-memory key-value store."""

    def __init__(self, name: str) -> None:
        super().__init__(name, persistent=False)
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def init(self, state_dir: Path | None = None) -> None:
        self._open = True

    def flush(self) -> None:
        """Nothing to do: the changelog is an in-memory store's only durability."""

    def close(self) -> None:
        self._open = False

    def destroy(self) -> None:
        self.close()
        self._data.clear()
        self._keys.clear()
        self.committed_offset = None

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None, timestamp_ms: int = 0) -> None:
        self._check_open()
        self._apply(key, value)
        self._log(key, value, timestamp_ms)

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        lo = 0 if from_key is None else bisect.bisect_left(self._keys, from_key)
        hi = len(self._keys) if to_key is None else bisect.bisect_right(self._keys, to_key)
        return self._iterate(self._keys[lo:hi])

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._check_open()
        for record in records:
            self._apply(record.key, record.value)

    def _iterate(self, keys: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
        for key in keys:
            value = self._data.get(key)
            if value is not None:  # deleted since the snapshot was taken
                yield key, value

    def _apply(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            if self._data.pop(key, None) is not None:
                del self._keys[bisect.bisect_left(self._keys, key)]
        else:
            if key not in self._data:
                bisect.insort(self._keys, key)
            self._data[key] = bytes(value)


class InMemoryWindowStore(WindowStore):
    """Windows grouped by start time: expiry drops whole start times at once."""

    def __init__(
        self,
        name: str,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(name, False, retention_ms, window_size_ms, retain_duplicates)
        # window start -> key -> seqnum -> value; seqnum dicts keep insertion (= seqnum) order.
        self._windows: dict[int, dict[bytes, dict[int, bytes]]] = {}
        self._starts: list[int] = []
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def init(self, state_dir: Path | None = None) -> None:
        self._open = True

    def flush(self) -> None:
        """Nothing to do: the changelog is an in-memory store's only durability."""

    def close(self) -> None:
        self._open = False

    def destroy(self) -> None:
        self.close()
        self._windows.clear()
        self._starts.clear()
        self.committed_offset = None
        self.observed_stream_time = -(2**63)

    def put(
        self, key: bytes, value: bytes | None, window_start_ms: int, timestamp_ms: int = 0
    ) -> None:
        self._check_open()
        self._advance(window_start_ms)
        if window_start_ms <= self.expired_before():
            return  # too late: the window is gone, and so must be its changelog record
        if value is None and self.retain_duplicates:
            return  # a duplicate-keeping store has no single entry a tombstone could name
        seqnum = self._next_seqnum()
        self._apply(key, window_start_ms, seqnum, value)
        self._log(window_store_key(key, window_start_ms, seqnum), value, timestamp_ms)

    def fetch(self, key: bytes, window_start_ms: int) -> bytes | None:
        self._check_open()
        if window_start_ms <= self.expired_before():
            return None
        versions = self._windows.get(window_start_ms, {}).get(key)
        if not versions:
            return None
        return next(iter(versions.values()))

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> Iterator[tuple[int, bytes]]:
        self._check_open()
        for start in self._starts_between(time_from, time_to):
            versions = self._windows.get(start, {}).get(key)
            if versions:
                for value in list(versions.values()):
                    yield start, value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[bytes, int, bytes]]:
        self._check_open()
        for start in self._starts_between(time_from, time_to):
            by_key = self._windows.get(start, {})
            for key in sorted(by_key):
                for value in list(by_key.get(key, {}).values()):
                    yield key, start, value

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._check_open()
        for record in records:
            key, start, seqnum = parse_window_store_key(record.key)
            self._advance(start)
            if start <= self.expired_before():
                continue
            if self.retain_duplicates:
                self._seqnum = max(self._seqnum, seqnum)
            self._apply(key, start, seqnum, record.value)

    def _starts_between(self, time_from: int, time_to: int) -> list[int]:
        time_from = max(time_from, self.expired_before() + 1)
        lo = bisect.bisect_left(self._starts, time_from)
        hi = bisect.bisect_right(self._starts, time_to)
        return self._starts[lo:hi]

    def _advance(self, window_start_ms: int) -> None:
        if window_start_ms <= self.observed_stream_time:
            return
        self.observed_stream_time = window_start_ms
        cut = bisect.bisect_right(self._starts, self.expired_before())
        for start in self._starts[:cut]:
            del self._windows[start]
        del self._starts[:cut]

    def _apply(self, key: bytes, start: int, seqnum: int, value: bytes | None) -> None:
        by_key = self._windows.get(start)
        if value is None:
            versions = by_key.get(key) if by_key is not None else None
            if by_key is None or versions is None or versions.pop(seqnum, None) is None:
                return
            if not versions:
                del by_key[key]
            if not by_key:
                del self._windows[start]
                del self._starts[bisect.bisect_left(self._starts, start)]
            return
        if by_key is None:
            by_key = self._windows[start] = {}
            bisect.insort(self._starts, start)
        by_key.setdefault(key, {})[seqnum] = bytes(value)
