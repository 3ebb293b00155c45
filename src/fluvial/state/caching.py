"""Record caches: coalesce consecutive updates of a key until the next commit.

A cache sits in front of a bytes store. Writes stay in the cache, marked dirty, and reach the inner
store (and so its changelog) only when the cache is flushed (at commit) or when the entry is
evicted because the cache is over its byte budget. At that moment the flush listener receives
``(new, old)``, where ``old`` is what the inner store held, i.e. what downstream last saw. That is
how caching turns N updates of one key into one revision without changing the final value.

Several caches may share one :class:`ThreadCache` budget, as Kafka Streams' caches share one
``cache_max_bytes`` per thread; eviction is then least-recently-used across all of them.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from mypy_extensions import trait

from fluvial.state.base import (
    NO_TIME,
    ChangeListener,
    ChangelogMessage,
    ChangelogRecord,
    KeyValueStore,
    StateStore,
    WindowStore,
    own_abc_bookkeeping,
)

CK = TypeVar("CK", bound=Hashable)

#: (key, new value, old value, timestamp_ms)
FlushListener = Callable[[bytes, bytes | None, bytes | None, int], None]
#: (key, window start, new value, old value, timestamp_ms)
WindowFlushListener = Callable[[bytes, int, bytes | None, bytes | None, int], None]

#: Bookkeeping bytes charged per entry on top of key and value, so empty values still cost.
ENTRY_OVERHEAD = 32


class ThreadCache:
    """A byte budget shared by caches, evicting least-recently-used entries across them."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache max_bytes must not be negative, got {max_bytes}")
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self._lru: OrderedDict[tuple[int, Hashable], int] = OrderedDict()
        self._owners: dict[int, _Cache[Any]] = {}

    def _register(self, owner: _Cache[Any]) -> int:
        owner_id = id(owner)
        self._owners[owner_id] = owner
        return owner_id

    def _touch(self, owner_id: int, key: Hashable, size: int | None = None) -> None:
        slot = (owner_id, key)
        if size is not None:
            self.size_bytes += size - self._lru.get(slot, 0)
            self._lru[slot] = size
        self._lru.move_to_end(slot)

    def _forget(self, owner_id: int, key: Hashable) -> None:
        self.size_bytes -= self._lru.pop((owner_id, key), 0)

    def _maybe_evict(self) -> None:
        while self.size_bytes > self.max_bytes and self._lru:
            (owner_id, key), _ = next(iter(self._lru.items()))
            # The owner flushes the entry if dirty and then forgets it, shrinking size_bytes.
            self._owners[owner_id]._evict(key)


@dataclass
class _Entry:
    value: bytes | None
    dirty: bool
    timestamp_ms: int


@trait
class _Cache(Generic[CK]):
    """Entries, dirty order and budget accounting, common to the caching stores.

    A trait (the compiled build's word for a mixin): each caching store is a store of its kind
    first, and this second. Each store keeps its own indexes of the entries up to date through
    :meth:`_before_put` and :meth:`_before_forget`.
    """

    inner: Any
    thread_cache: ThreadCache
    _owner_id: int
    _entries: dict[CK, _Entry]
    _dirty: dict[CK, None]
    _opened: bool

    def _setup(self, max_bytes: int, cache: ThreadCache | None) -> None:
        self.thread_cache = cache if cache is not None else ThreadCache(max_bytes)
        self._owner_id = self.thread_cache._register(self)
        self._entries = {}
        # Keys in order of their latest dirtying write: flushes go downstream in that order.
        self._dirty = {}
        # Opened and closed through this layer; a flag is cheaper than asking the inner store.
        self._opened = bool(self.inner.is_open)

    def _require_open(self) -> None:
        """A caching store's ``_check_open``: the flag its own lifecycle keeps."""
        if not self._opened:
            raise RuntimeError(
                f"state store {self.inner.name!r} is not open: call init(state_dir) before using it"
            )

    def _cache_put(self, key: CK, value: bytes | None, dirty: bool, timestamp_ms: int) -> None:
        entry = self._entries.get(key)
        self._before_put(key, entry, value)
        cache = self.thread_cache
        slot = (self._owner_id, key)
        if dirty:
            self._dirty.pop(key, None)
            self._dirty[key] = None
        if entry is None:
            self._entries[key] = _Entry(value, dirty, timestamp_ms)
        else:  # updated in place: one entry object per key while it is cached
            old = entry.value
            entry.value, entry.dirty, entry.timestamp_ms = value, dirty, timestamp_ms
            if old is not None and value is not None and len(old) == len(value):
                # The usual update (a count, a sum): same size, so only the recency changes.
                cache._lru.move_to_end(slot)
                return
        # ThreadCache._touch and _maybe_evict, written out: this runs for every write.
        size = self._size(key, value)
        cache.size_bytes += size - cache._lru.get(slot, 0)
        cache._lru[slot] = size
        cache._lru.move_to_end(slot)
        if cache.size_bytes > cache.max_bytes:
            cache._maybe_evict()

    def _cache_get(self, key: CK) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self.thread_cache._lru.move_to_end((self._owner_id, key))  # ThreadCache._touch
        return entry

    def _forget(self, key: CK) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            self._before_forget(key, entry)
            del self._entries[key]
        self._dirty.pop(key, None)
        self.thread_cache._forget(self._owner_id, key)

    def _evict(self, key: CK) -> None:
        if key in self._dirty:
            self._flush_entry(key)
        self._forget(key)

    def _flush_dirty(self) -> None:
        while self._dirty:
            key = next(iter(self._dirty))
            self._flush_entry(key)
            entry = self._entries.get(key)
            if entry is not None and entry.value is None:
                self._forget(key)  # a flushed tombstone is just absence; stop paying for it

    def discard(self) -> None:
        """Drop every cached entry, dirty ones included, without writing them anywhere.

        For an aborted exactly-once transaction: uncommitted updates must vanish.
        """
        for key in list(self._entries):
            self._forget(key)

    def dirty_count(self) -> int:
        return len(self._dirty)

    def _flush_entry(self, key: CK) -> None:
        raise NotImplementedError

    def _size(self, key: CK, value: bytes | None) -> int:
        raise NotImplementedError

    def _before_put(self, key: CK, entry: _Entry | None, value: bytes | None) -> None:
        """``key`` is about to hold ``value``; ``entry`` is its entry now (``None``: new)."""
        raise NotImplementedError

    def _before_forget(self, key: CK, entry: _Entry) -> None:
        """``key``'s entry is about to leave the cache."""
        raise NotImplementedError


def cache_committed_offset(cache: _Cache[Any]) -> int | None:
    """A caching store's ``committed_offset``: the inner store's, what its contents reflect."""
    # StateStore.__init__ sets the offset before the store has its inner store.
    return cache.inner.committed_offset if hasattr(cache, "inner") else None


def set_cache_committed_offset(cache: _Cache[Any], offset: int | None) -> None:
    """Set a caching store's ``committed_offset``: the inner store's (see above)."""
    if hasattr(cache, "inner"):
        cache.inner.committed_offset = offset


class CachingKeyValueStore(KeyValueStore, _Cache[bytes]):
    """A record cache in front of a bytes key-value store."""

    @property
    def committed_offset(self) -> int | None:  # type: ignore[override]
        return cache_committed_offset(self)

    @committed_offset.setter
    def committed_offset(self, offset: int | None) -> None:
        set_cache_committed_offset(self, offset)

    def _check_open(self) -> None:
        self._require_open()

    def __init__(
        self,
        inner: KeyValueStore,
        max_bytes: int = 10 * 1024 * 1024,
        flush_listener: FlushListener | None = None,
        cache: ThreadCache | None = None,
    ) -> None:
        KeyValueStore.__init__(self, inner.name, inner.persistent)
        self.inner = inner
        self._flush_listener = flush_listener
        self._setup(max_bytes, cache)
        # Cached keys in byte order as of the last range, and the keys cached since (sorted in
        # at the next range: an insort per new key moved the whole list each time).
        self._sorted: list[bytes] = []
        self._unsorted: set[bytes] = set()
        self._send_old_values = True

    def set_flush_listener(
        self, listener: FlushListener | None, send_old_values: bool = True
    ) -> None:
        """Call ``listener`` for each flushed entry.

        ``send_old_values=False``: nothing downstream reads old values, so an update's old
        value is neither read from the inner store nor passed on (``None``); a deletion still
        reads it, to forward only the removal of a row the store held.
        """
        self._flush_listener = listener
        self._send_old_values = send_old_values

    # -- lifecycle: the inner store owns files, changelog and offsets --------------------------

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    def init(self, state_dir: Path | None = None) -> None:
        self.inner.init(state_dir)
        self._opened = True

    def flush(self) -> None:
        # Cache first: the inner store's flush must cover the writes the cache just made.
        self._flush_dirty()
        self.inner.flush()

    def close(self) -> None:
        if self.inner.is_open:
            self._flush_dirty()
        self._opened = False
        self.discard()
        self.inner.close()

    def destroy(self) -> None:
        self._opened = False
        self.discard()
        self.inner.destroy()

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        self.inner.set_change_listener(listener)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self.discard()  # cached reads could be stale once the inner store changes under us
        self.inner.restore(records)

    def restore_batch(self, batch: Sequence[ChangelogMessage], timestamped: bool = False) -> None:
        self.discard()  # as restore
        self.inner.restore_batch(batch, timestamped)

    # -- reads and writes --------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        entry = self._cache_get(key)
        if entry is not None:
            return entry.value
        value = self.inner.get(key)
        if value is not None:
            self._cache_put(key, value, dirty=False, timestamp_ms=0)
        return value

    def put(self, key: bytes, value: bytes | None, timestamp_ms: int = 0) -> None:
        self._check_open()
        key = bytes(key)
        self._cache_put(key, None if value is None else bytes(value), True, timestamp_ms)

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        if self._unsorted:
            _sort_in(self._sorted, self._unsorted)
        lo = 0 if from_key is None else bisect.bisect_left(self._sorted, from_key)
        hi = len(self._sorted) if to_key is None else bisect.bisect_right(self._sorted, to_key)
        cached = [(k, self._entries[k].value) for k in self._sorted[lo:hi]]
        return _merge(self.inner.range(from_key, to_key), cached)

    def approximate_num_entries(self) -> int:
        count = self.inner.approximate_num_entries()
        for key in self._dirty:
            in_inner = self.inner.get(key) is not None
            in_cache = self._entries[key].value is not None
            count += int(in_cache) - int(in_inner)
        return count

    # -- cache hooks -------------------------------------------------------------------------

    def _before_put(self, key: bytes, entry: _Entry | None, value: bytes | None) -> None:
        if entry is None:
            self._unsorted.add(key)

    def _before_forget(self, key: bytes, entry: _Entry) -> None:
        if key in self._unsorted:
            self._unsorted.discard(key)
        else:
            del self._sorted[bisect.bisect_left(self._sorted, key)]

    def _size(self, key: bytes, value: bytes | None) -> int:
        return len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD

    def _flush_entry(self, key: bytes) -> None:
        entry = self._entries[key]
        # Mark clean before calling out: the listener may read or write this store again.
        entry.dirty = False
        self._dirty.pop(key, None)
        listener, new, send_old = self._flush_listener, entry.value, self._send_old_values
        # As for windows: the previous value only serves a listener (see CachingWindowStore).
        read_old = listener is not None and (new is None or send_old)
        old = self.inner.get(key) if read_old else None
        self.inner.put(key, new, entry.timestamp_ms)
        if listener is not None and (new is not None or old is not None):
            listener(key, new, old if send_old else None, entry.timestamp_ms)


def _sort_in(sorted_keys: list[bytes], new_keys: list[bytes] | set[bytes]) -> None:
    """Move ``new_keys`` into the byte-ordered ``sorted_keys`` (a sorted run and a new tail:
    about linear) and empty ``new_keys``."""
    sorted_keys += new_keys
    sorted_keys.sort()
    new_keys.clear()


def _merge(
    stored: Iterator[tuple[bytes, bytes]], cached: list[tuple[bytes, bytes | None]]
) -> Iterator[tuple[bytes, bytes]]:
    """Merge two key-ordered streams; the cache wins on equal keys and its tombstones hide."""
    pending = iter(cached)
    next_cached = next(pending, None)
    for key, value in stored:
        while next_cached is not None and next_cached[0] < key:
            if next_cached[1] is not None:
                yield next_cached  # type: ignore[misc]
            next_cached = next(pending, None)
        if next_cached is not None and next_cached[0] == key:
            if next_cached[1] is not None:
                yield next_cached  # type: ignore[misc]
            next_cached = next(pending, None)
        else:
            yield key, value
    while next_cached is not None:
        if next_cached[1] is not None:
            yield next_cached  # type: ignore[misc]
        next_cached = next(pending, None)


class CachingWindowStore(WindowStore, _Cache[tuple[bytes, int]]):
    """A record cache in front of a bytes window store (not for duplicate-keeping stores)."""

    @property
    def committed_offset(self) -> int | None:  # type: ignore[override]
        return cache_committed_offset(self)

    @committed_offset.setter
    def committed_offset(self, offset: int | None) -> None:
        set_cache_committed_offset(self, offset)

    def _check_open(self) -> None:
        self._require_open()

    def __init__(
        self,
        inner: WindowStore,
        max_bytes: int = 10 * 1024 * 1024,
        flush_listener: WindowFlushListener | None = None,
        cache: ThreadCache | None = None,
    ) -> None:
        if inner.retain_duplicates:
            raise ValueError(
                f"window store {inner.name!r} retains duplicates, so updates never coalesce: "
                "do not put a cache in front of it"
            )
        WindowStore.__init__(
            self, inner.name, inner.persistent, inner.retention_ms, inner.window_size_ms
        )
        self.inner = inner
        self._flush_listener = flush_listener
        self._setup(max_bytes, cache)
        self._starts_by_key: dict[bytes, list[int]] = {}
        # The same entries by window start, for time-range scans (closing windows read one
        # start at a time, so a scan must not walk the whole cache).
        self._keys_by_start: dict[int, set[bytes]] = {}
        self._starts: list[int] = []  # the keys of _keys_by_start, ascending
        self._send_old_values = True

    def set_flush_listener(
        self, listener: WindowFlushListener | None, send_old_values: bool = True
    ) -> None:
        """Call ``listener`` for each flushed window; ``send_old_values`` as for
        :meth:`CachingKeyValueStore.set_flush_listener`."""
        self._flush_listener = listener
        self._send_old_values = send_old_values

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    def init(self, state_dir: Path | None = None) -> None:
        self.inner.init(state_dir)
        self._opened = True
        self.observed_stream_time = max(self.observed_stream_time, self.inner.observed_stream_time)

    def flush(self) -> None:
        self._flush_dirty()
        self.inner.flush()

    def close(self) -> None:
        if self.inner.is_open:
            self._flush_dirty()
        self._opened = False
        self.discard()
        self.inner.close()

    def destroy(self) -> None:
        self._opened = False
        self.discard()
        self.inner.destroy()
        self.observed_stream_time = -(2**63)

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        self.inner.set_change_listener(listener)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self.discard()
        self.inner.restore(records)
        self.observed_stream_time = max(self.observed_stream_time, self.inner.observed_stream_time)

    def put(
        self, key: bytes, value: bytes | None, window_start_ms: int, timestamp_ms: int = 0
    ) -> None:
        if not self._opened:
            self._check_open()
        stream_time = self.observed_stream_time
        if window_start_ms > stream_time:
            self.observed_stream_time = stream_time = window_start_ms
        if window_start_ms <= stream_time - self.retention_ms and stream_time != NO_TIME:
            return  # expired
        if type(key) is not bytes:
            key = bytes(key)
        self._cache_put((key, window_start_ms), value, True, timestamp_ms)

    def fetch(self, key: bytes, window_start_ms: int) -> bytes | None:
        if not self._opened:
            self._check_open()
        stream_time = self.observed_stream_time
        if window_start_ms <= stream_time - self.retention_ms and stream_time != NO_TIME:
            return None  # expired
        entry = self._cache_get((key, window_start_ms))
        if entry is not None:
            return entry.value
        value = self.inner.fetch(key, window_start_ms)
        if value is not None:
            self._cache_put((bytes(key), window_start_ms), value, dirty=False, timestamp_ms=0)
        return value

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> Iterator[tuple[int, bytes]]:
        self._check_open()
        time_from = max(time_from, self.expired_before() + 1)
        starts = self._starts_by_key.get(key, [])
        lo, hi = bisect.bisect_left(starts, time_from), bisect.bisect_right(starts, time_to)
        cached = {s: self._entries[(key, s)].value for s in starts[lo:hi]}
        merged: dict[int, bytes | None] = dict(self.inner.fetch_range(key, time_from, time_to))
        merged.update(cached)
        for start in sorted(merged):
            value = merged[start]
            if value is not None:
                yield start, value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[bytes, int, bytes]]:
        self._check_open()
        time_from = max(time_from, self.expired_before() + 1)
        # Materialised: merging needs both sides in (start, key) order, and the cache is bounded.
        merged: dict[tuple[int, bytes], bytes | None] = {
            (start, key): value for key, start, value in self.inner.fetch_all(time_from, time_to)
        }
        starts = self._starts
        entries = self._entries
        lo, hi = bisect.bisect_left(starts, time_from), bisect.bisect_right(starts, time_to)
        for start in starts[lo:hi]:
            for key in self._keys_by_start[start]:
                merged[(start, key)] = entries[(key, start)].value
        for start, key in sorted(merged):
            value = merged[(start, key)]
            if value is not None:
                yield key, start, value

    def approximate_num_entries(self) -> int:
        count: int = getattr(self.inner, "approximate_num_entries", lambda: 0)()
        return count + len(self._dirty)

    def _before_put(
        self, key: tuple[bytes, int], entry: _Entry | None, value: bytes | None
    ) -> None:
        if entry is None:
            record_key, start = key
            bisect.insort(self._starts_by_key.setdefault(record_key, []), start)
            keys = self._keys_by_start.get(start)
            if keys is None:
                keys = self._keys_by_start[start] = set()
                bisect.insort(self._starts, start)
            keys.add(record_key)

    def _before_forget(self, key: tuple[bytes, int], entry: _Entry) -> None:
        record_key, start = key
        starts = self._starts_by_key[record_key]
        del starts[bisect.bisect_left(starts, start)]
        if not starts:
            del self._starts_by_key[record_key]
        keys = self._keys_by_start[start]
        keys.discard(record_key)
        if not keys:
            del self._keys_by_start[start]
            del self._starts[bisect.bisect_left(self._starts, start)]

    def _size(self, key: tuple[bytes, int], value: bytes | None) -> int:
        return len(key[0]) + 8 + (len(value) if value is not None else 0) + ENTRY_OVERHEAD

    def _flush_entry(self, key: tuple[bytes, int]) -> None:
        entry = self._entries[key]
        entry.dirty = False
        self._dirty.pop(key, None)
        record_key, start = key
        listener, new, send_old = self._flush_listener, entry.value, self._send_old_values
        # The previous value is read only for a listener that sends it, or to tell a deletion
        # of a stored window from nothing (a store nobody forwards from, such as an
        # emit-on-close aggregate's, skips that read).
        read_old = listener is not None and (new is None or send_old)
        old = self.inner.fetch(record_key, start) if read_old else None
        # A window that expired while cached is not stored any more, but its last revision
        # still goes downstream: dropping it would lose the window's final result.
        if start > self.expired_before():
            self.inner.put(record_key, new, start, entry.timestamp_ms)
        if listener is not None and (new is not None or old is not None):
            listener(record_key, start, new, old if send_old else None, entry.timestamp_ms)


def discard_caches(store: StateStore) -> None:
    """Drop the entries of every record cache in a store's wrapper chain, unwritten.

    For a dirty close: cached results of an abandoned transaction must go nowhere.
    """
    from fluvial.state.caching_session import CachingSessionStore  # it imports this module

    node: Any = store
    while node is not None:
        if isinstance(node, CachingKeyValueStore | CachingWindowStore | CachingSessionStore):
            node.discard()
        node = getattr(node, "inner", None)


own_abc_bookkeeping(CachingKeyValueStore, CachingWindowStore)
