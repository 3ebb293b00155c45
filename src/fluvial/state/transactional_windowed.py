"""Transactional layers over window and session stores (see :mod:`fluvial.state.transactional`).

Both wrappers keep their own stream time, since uncommitted writes move it: expiry decisions
(drop a late put, hide an expired window) must match what the store itself would decide had it
seen the writes. The window wrapper also assigns the sequence numbers of duplicate-keeping
stores, because they are part of the changelog key that is logged at write time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from fluvial.state.base import (
    NO_TIME,
    WINDOW_KEY_TAIL,
    ChangelogRecord,
    WindowStore,
    new_tuple,
    own_abc_bookkeeping,
)
from fluvial.state.session import SessionEntry, SessionStore, session_store_key
from fluvial.state.transactional import DEFAULT_MAX_UNCOMMITTED_BYTES, TransactionalStore


class TransactionalWindowStore(TransactionalStore, WindowStore):
    """A transactional layer over any bytes :class:`WindowStore`."""

    def __init__(
        self, inner: WindowStore, max_uncommitted_bytes: int = DEFAULT_MAX_UNCOMMITTED_BYTES
    ) -> None:
        WindowStore.__init__(
            self,
            inner.name,
            inner.persistent,
            inner.retention_ms,
            inner.window_size_ms,
            inner.retain_duplicates,
        )
        # key -> (window start, seqnum) -> value (None: deleted in this transaction)
        self._by_key: dict[bytes, dict[tuple[int, int], bytes | None]] = {}
        self._setup(inner, max_uncommitted_bytes)

    def put(
        self, key: bytes, value: bytes | None, window_start_ms: int, timestamp_ms: int = 0
    ) -> None:
        # Once per record: the helpers (_check_open, expired_before, ...) written out inline.
        if not self._opened:
            self._check_open()
        stream_time = self.observed_stream_time
        if window_start_ms > stream_time:
            self.observed_stream_time = stream_time = window_start_ms
        if window_start_ms <= stream_time - self.retention_ms and stream_time != NO_TIME:
            return  # the store would drop it: so no buffer entry and no changelog record
        if value is None:
            if self.retain_duplicates:
                return
        elif type(value) is not bytes:
            value = bytes(value)
        if type(key) is not bytes:
            key = bytes(key)
        seqnum = self._next_seqnum() if self.retain_duplicates else 0
        store_key = key + WINDOW_KEY_TAIL.pack(window_start_ms, seqnum)  # window_store_key
        # One record, buffered and logged: the changelog carries exactly what commit applies.
        record: ChangelogRecord = new_tuple(ChangelogRecord, (store_key, value, timestamp_ms))
        self._buffer(store_key, record)
        windows = self._by_key.get(key)
        if windows is None:
            windows = self._by_key[key] = {}
        windows[(window_start_ms, seqnum)] = value
        if self._changelog is not None:  # _log_later, written out inline
            unlogged = self._unlogged
            if store_key in unlogged:
                del unlogged[store_key]
            unlogged[store_key] = record

    def fetch(self, key: bytes, window_start_ms: int) -> bytes | None:
        if not self._opened:
            self._check_open()
        stream_time = self.observed_stream_time
        if window_start_ms <= stream_time - self.retention_ms and stream_time != NO_TIME:
            return None  # expired
        if not self.retain_duplicates:
            buffered = self._by_key.get(key)
            if buffered is not None:
                slot = (window_start_ms, 0)
                if slot in buffered:
                    return buffered[slot]
            value: bytes | None = self.inner.fetch(key, window_start_ms)
            return value
        for _, value in self.fetch_range(key, window_start_ms, window_start_ms):
            return value
        return None

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> Iterator[tuple[int, bytes]]:
        self._check_open()
        time_from = max(time_from, self.expired_before() + 1)
        stored = list(self.inner.fetch_range(key, time_from, time_to))
        buffered = [
            (start, seqnum, value)
            for (start, seqnum), value in self._by_key.get(key, {}).items()
            if time_from <= start <= time_to
        ]
        if self.retain_duplicates:
            # Buffered duplicates are newer than stored ones of the same window.
            rows = [(start, 0, i, value) for i, (start, value) in enumerate(stored)]
            rows += [(start, 1, seqnum, value) for start, seqnum, value in buffered]
            rows.sort(key=lambda r: (r[0], r[1], r[2]))
            return iter([(start, value) for start, _, _, value in rows if value is not None])
        merged: dict[int, bytes | None] = dict(stored)
        merged.update((start, value) for start, _, value in buffered)
        return iter([(s, v) for s, v in sorted(merged.items()) if v is not None])

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[bytes, int, bytes]]:
        self._check_open()
        time_from = max(time_from, self.expired_before() + 1)
        stored = list(self.inner.fetch_all(time_from, time_to))
        buffered = [
            (start, key, seqnum, value)
            for key, windows in self._by_key.items()
            for (start, seqnum), value in windows.items()
            if time_from <= start <= time_to
        ]
        if self.retain_duplicates:
            rows = [(start, key, 0, i, value) for i, (key, start, value) in enumerate(stored)]
            rows += [(start, key, 1, seqnum, value) for start, key, seqnum, value in buffered]
            rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
            return iter([(key, start, value) for start, key, _, _, value in rows])
        merged: dict[tuple[int, bytes], bytes | None] = {
            (start, key): value for key, start, value in stored
        }
        merged.update(((start, key), value) for start, key, _, value in buffered)
        return iter(
            [(key, start, v) for (start, key), v in sorted(merged.items()) if v is not None]
        )

    def approximate_num_entries(self) -> int:
        count: int = getattr(self.inner, "approximate_num_entries", lambda: 0)()
        return count + len(self._pending)

    def _clear_overlay(self) -> None:
        self._by_key.clear()

    def _sync(self, committed: bool) -> None:
        inner = self.inner
        if committed:
            self.observed_stream_time = max(self.observed_stream_time, inner.observed_stream_time)
            self._seqnum = max(self._seqnum, inner._seqnum)
        else:
            # Aborted writes never happened: their stream time and sequence numbers are free.
            self.observed_stream_time = inner.observed_stream_time
            self._seqnum = inner._seqnum


class TransactionalSessionStore(TransactionalStore, SessionStore):
    """A transactional layer over any bytes :class:`SessionStore`.

    Buffered records carry the session end as their timestamp: a session store's state does not
    depend on changelog timestamps, and the listener already got the real one at write time.
    """

    def __init__(
        self, inner: SessionStore, max_uncommitted_bytes: int = DEFAULT_MAX_UNCOMMITTED_BYTES
    ) -> None:
        SessionStore.__init__(self, inner.name, inner.persistent, inner.retention_ms)
        # key -> (end, start) -> value, the sessions written in this transaction
        self._by_key: dict[bytes, dict[tuple[int, int], bytes]] = {}
        # key -> (end, start) of the sessions removed in this transaction. Apart from the
        # written ones: a session that grows record by record leaves one removed entry per
        # record, and a lookup must not read them all (it checks only what the store returns).
        self._removed: dict[bytes, set[tuple[int, int]]] = {}
        self._keys: list[bytes] = []
        self._setup(inner, max_uncommitted_bytes)

    def fetch_session(self, key: bytes, session_start_ms: int, session_end_ms: int) -> bytes | None:
        self._check_open()
        if session_end_ms <= self.expired_before():
            return None
        bounds = (session_end_ms, session_start_ms)
        buffered = self._by_key.get(key)
        if buffered is not None and bounds in buffered:
            return buffered[bounds]
        removed = self._removed.get(key)
        if removed is not None and bounds in removed:
            return None
        value: bytes | None = self.inner.fetch_session(key, session_start_ms, session_end_ms)
        return value

    def approximate_num_entries(self) -> int:
        count: int = getattr(self.inner, "approximate_num_entries", lambda: 0)()
        return count + len(self._pending)

    def _write(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        key = bytes(key)
        stored = None if value is None else bytes(value)
        store_key = session_store_key(key, start, end)
        self._buffer(store_key, ChangelogRecord(store_key, stored, end))
        if key not in self._by_key:
            self._by_key[key] = {}
            self._removed[key] = set()
            bisect.insort(self._keys, key)
        bounds = (end, start)
        if stored is None:
            self._by_key[key].pop(bounds, None)
            self._removed[key].add(bounds)
        else:
            self._removed[key].discard(bounds)
            self._by_key[key][bounds] = stored

    def _advance(self, session_end_ms: int) -> None:
        self.observed_stream_time = max(self.observed_stream_time, session_end_ms)

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
            keys = [key_from] if key_from in self._by_key else []
        else:
            stored = self.inner.find_sessions_range(key_from, key_to, earliest_end, latest_start)
            lo = 0 if key_from is None else bisect.bisect_left(self._keys, key_from)
            hi = len(self._keys) if key_to is None else bisect.bisect_right(self._keys, key_to)
            keys = self._keys[lo:hi]
        merged: dict[tuple[int, bytes, int], bytes] = {}
        removed = self._removed
        for e in stored:
            gone = removed.get(e.key)
            if gone is None or (e.end_ms, e.start_ms) not in gone:
                merged[(e.end_ms, e.key, e.start_ms)] = e.value
        for key in keys:
            for (end, start), value in self._by_key[key].items():
                if end >= earliest_end and start <= latest_start:
                    merged[(end, key, start)] = value
        return iter(
            [
                SessionEntry(key, start, end, value)
                for (end, key, start), value in sorted(merged.items())
            ]
        )

    def _clear_overlay(self) -> None:
        self._by_key.clear()
        self._removed.clear()
        self._keys.clear()

    def _sync(self, committed: bool) -> None:
        inner_time = self.inner.observed_stream_time
        self.observed_stream_time = (
            max(self.observed_stream_time, inner_time) if committed else inner_time
        )


own_abc_bookkeeping(TransactionalWindowStore, TransactionalSessionStore)
