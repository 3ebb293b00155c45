"""A record cache in front of a session store (see :mod:`fluvial.state.caching`).

Session aggregations rewrite the same session many times while it grows; the cache coalesces
those rewrites until the next commit or eviction, and a merge that removes a session it never
flushed costs nothing downstream. Flushes reach the inner store (and so its changelog) and the
flush listener as ``(key, start, end, new, old, timestamp)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from fluvial.state.base import ChangeListener, ChangelogRecord, own_abc_bookkeeping
from fluvial.state.caching import (
    ENTRY_OVERHEAD,
    ThreadCache,
    _Cache,
    _Entry,
    cache_committed_offset,
    set_cache_committed_offset,
)
from fluvial.state.session import SessionEntry, SessionStore

#: (key, session start, session end, new value, old value, timestamp_ms)
SessionFlushListener = Callable[[bytes, int, int, bytes | None, bytes | None, int], None]

#: A cached session: (key, end, start), the store's own order.
_Slot = tuple[bytes, int, int]


class CachingSessionStore(SessionStore, _Cache[_Slot]):
    """A record cache in front of a bytes session store."""

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
        inner: SessionStore,
        max_bytes: int = 10 * 1024 * 1024,
        flush_listener: SessionFlushListener | None = None,
        cache: ThreadCache | None = None,
    ) -> None:
        SessionStore.__init__(self, inner.name, inner.persistent, inner.retention_ms)
        self.inner = inner
        self._flush_listener = flush_listener
        # Each key's cached *live* sessions (not tombstones) as (end, start), ascending: a lookup
        # bisects to the sessions that end late enough. A growing session leaves a tombstone per
        # record until the next flush; lookups must not walk those (they only hide stored
        # sessions, which the lookup checks one by one).
        self._sessions_by_key: dict[bytes, list[tuple[int, int]]] = {}
        self._keys: list[bytes] = []
        self._setup(max_bytes, cache)

    def set_flush_listener(self, listener: SessionFlushListener | None) -> None:
        self._flush_listener = listener

    # -- lifecycle: the inner store owns files, changelog and offsets --------------------------

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
        self.observed_stream_time = self.inner.observed_stream_time

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        self.inner.set_change_listener(listener)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self.discard()
        self.inner.restore(records)
        self.observed_stream_time = max(self.observed_stream_time, self.inner.observed_stream_time)

    def approximate_num_entries(self) -> int:
        count: int = getattr(self.inner, "approximate_num_entries", lambda: 0)()
        return count + len(self._dirty)

    # -- reads and writes --------------------------------------------------------------------

    def put(
        self,
        key: bytes,
        session_start_ms: int,
        session_end_ms: int,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        self._check_open()
        if session_end_ms < session_start_ms:
            raise ValueError(
                f"session store {self.name!r}: session end {session_end_ms} is before its "
                f"start {session_start_ms}"
            )
        self._advance(session_end_ms)
        if session_end_ms <= self.expired_before():
            return
        timestamp = session_end_ms if timestamp_ms is None else timestamp_ms
        stored = None if value is None else bytes(value)
        self._cache_put((bytes(key), session_end_ms, session_start_ms), stored, True, timestamp)

    def fetch_session(self, key: bytes, session_start_ms: int, session_end_ms: int) -> bytes | None:
        self._check_open()
        if session_end_ms <= self.expired_before():
            return None
        slot = (key, session_end_ms, session_start_ms)
        entry = self._cache_get(slot)
        if entry is not None:
            return entry.value
        value = self.inner.fetch_session(key, session_start_ms, session_end_ms)
        if value is not None:
            self._cache_put((bytes(key), session_end_ms, session_start_ms), value, False, 0)
        return value

    def _find(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        one_key: bool,
    ) -> Iterator[SessionEntry]:
        earliest_end = self._live_from(earliest_end)
        if one_key:
            assert key_from is not None
            stored = self.inner.find_sessions(key_from, earliest_end, latest_start)
            keys = [key_from] if key_from in self._sessions_by_key else []
        else:
            stored = self.inner.find_sessions_range(key_from, key_to, earliest_end, latest_start)
            lo = 0 if key_from is None else bisect.bisect_left(self._keys, key_from)
            hi = len(self._keys) if key_to is None else bisect.bisect_right(self._keys, key_to)
            keys = self._keys[lo:hi]
        entries = self._entries
        merged: dict[tuple[int, bytes, int], bytes | None] = {}
        for e in stored:
            cached = entries.get((e.key, e.end_ms, e.start_ms))
            merged[(e.end_ms, e.key, e.start_ms)] = e.value if cached is None else cached.value
        for key in keys:
            sessions = self._sessions_by_key[key]
            # From the first session ending at or after earliest_end (the bisect's bound).
            for end, start in sessions[bisect.bisect_left(sessions, (earliest_end, -(2**63))) :]:
                if start <= latest_start:
                    merged[(end, key, start)] = entries[(key, end, start)].value
        # Materialised: a merge removes and puts sessions while it walks the result.
        return iter(
            [
                SessionEntry(key, start, end, value)
                for (end, key, start), value in sorted(merged.items())
                if value is not None
            ]
        )

    def _write(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        raise AssertionError("CachingSessionStore writes through its cache, never via _write")

    def _advance(self, session_end_ms: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, session_end_ms)

    # -- cache hooks -------------------------------------------------------------------------

    def _before_put(self, key: _Slot, entry: _Entry | None, value: bytes | None) -> None:
        was_live = entry is not None and entry.value is not None
        if value is not None and not was_live:
            self._index(key)
        elif value is None and was_live:
            self._unindex(key)

    def _before_forget(self, key: _Slot, entry: _Entry) -> None:
        if entry.value is not None:
            self._unindex(key)

    def _index(self, key: _Slot) -> None:
        record_key, end, start = key
        sessions = self._sessions_by_key.get(record_key)
        if sessions is None:
            sessions = self._sessions_by_key[record_key] = []
            bisect.insort(self._keys, record_key)
        bisect.insort(sessions, (end, start))

    def _unindex(self, key: _Slot) -> None:
        record_key, end, start = key
        sessions = self._sessions_by_key[record_key]
        del sessions[bisect.bisect_left(sessions, (end, start))]
        if not sessions:
            del self._sessions_by_key[record_key]
            del self._keys[bisect.bisect_left(self._keys, record_key)]

    def _size(self, key: _Slot, value: bytes | None) -> int:
        return len(key[0]) + 16 + (len(value) if value is not None else 0) + ENTRY_OVERHEAD

    def _flush_entry(self, key: _Slot) -> None:
        entry = self._entries[key]
        # Mark clean before calling out: the listener may read or write this store again.
        entry.dirty = False
        self._dirty.pop(key, None)
        record_key, end, start = key
        old = self.inner.fetch_session(record_key, start, end)
        # A session that expired while cached is not stored any more, but its last revision
        # still goes downstream, as for window caches.
        if end > self.expired_before():
            self.inner.put(record_key, start, end, entry.value, entry.timestamp_ms)
        if self._flush_listener is not None and (entry.value is not None or old is not None):
            self._flush_listener(record_key, start, end, entry.value, old, entry.timestamp_ms)


own_abc_bookkeeping(CachingSessionStore)
