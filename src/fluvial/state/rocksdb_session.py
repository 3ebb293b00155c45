"""The RocksDB session store: one column family per segment of session *end* time.

Segment choice by end time means expiry (which runs against the end) drops whole segments, as for
window stores. Inside a segment, keys are the session key layout (key + BE end + BE start), so
one key's sessions are a contiguous run ordered by end, because all ends of one segment share a
sign. Starts may differ in sign from their end, so results are sorted numerically in memory; a
key has few sessions per segment.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rocksdict import Rdict, WriteBatch

from fluvial.state.base import ChangelogRecord
from fluvial.state.rocksdb import _LONG, _STREAM_TIME, _options, _RocksDBStore, _scan
from fluvial.state.session import (
    MIN_TIME,
    SessionEntry,
    SessionStore,
    parse_session_store_key,
    session_store_key,
)

_SEGMENT_PREFIX = "session-segment-"
_HIGHEST_SUFFIX = b"\xff" * 16


class RocksDBSessionStore(_RocksDBStore, SessionStore):
    """A persistent session store in ``state_dir / name``.

    ``segment_interval_ms`` defaults to ``max(retention / 2, 60 s)``, as for window stores.
    """

    def __init__(
        self, name: str, retention_ms: int, segment_interval_ms: int | None = None
    ) -> None:
        SessionStore.__init__(self, name, True, retention_ms)
        _RocksDBStore.__init__(self)
        if segment_interval_ms is None:
            segment_interval_ms = max(retention_ms // 2, 60_000)
        if segment_interval_ms <= 0:
            raise ValueError(f"segment_interval_ms must be positive, got {segment_interval_ms}")
        self.segment_interval_ms = segment_interval_ms
        self._segments: dict[int, Rdict] = {}
        self._batch: WriteBatch | None = None  # set while a restore or commit stages writes
        self._dead: list[int] = []
        self._staged: set[bytes] = set()  # store keys the batch puts

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self, state_dir: Path | None) -> None:
        if self._db is not None:
            return
        families = self._open(state_dir)
        db = self._live_db()
        for family in families:
            if family.startswith(_SEGMENT_PREFIX):
                self._segments[int(family[len(_SEGMENT_PREFIX) :])] = db.get_column_family(family)
        assert self._meta is not None
        raw = self._meta.get(_STREAM_TIME)
        self.observed_stream_time = MIN_TIME if raw is None else _LONG.unpack(raw)[0]

    def flush(self) -> None:
        self._flush_meta()

    def close(self) -> None:
        if self._db is not None:
            self._flush_meta(sync=True)
        self._segments.clear()
        self._release()

    def destroy(self) -> None:
        self._segments.clear()
        self._wipe()
        self.observed_stream_time = MIN_TIME

    @property
    def segment_ids(self) -> list[int]:
        """Ids of the segments on disk (for tests and metrics)."""
        return sorted(self._segments)

    def approximate_num_entries(self) -> int:
        return sum(
            int(segment.property_int_value("rocksdb.estimate-num-keys") or 0)
            for segment in self._segments.values()
        )

    # -- writes ------------------------------------------------------------------------------

    def put(
        self,
        key: bytes,
        session_start_ms: int,
        session_end_ms: int,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        # One batch per put: the data and the stream time it implies land together or not at all.
        self._live_db()
        self._begin()
        try:
            super().put(key, session_start_ms, session_end_ms, value, timestamp_ms)
        finally:
            self._finish(None, write_offset=False)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._live_db()
        self._begin()
        try:
            super().restore(records)
        finally:
            self._finish(None, write_offset=False)

    def apply_committed(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None
    ) -> None:
        """Apply changelog records and the offset they reach in one atomic RocksDB write."""
        self._live_db()
        self._begin()
        try:
            SessionStore.restore(self, records)
        finally:
            self._finish(committed_offset, write_offset=True)

    def _begin(self) -> None:
        self._batch = WriteBatch(raw_mode=True)
        self._dead = []
        self._staged = set()

    def _finish(self, committed_offset: int | None, write_offset: bool) -> None:
        batch, self._batch = self._batch, None
        assert batch is not None
        if write_offset:
            self.committed_offset = committed_offset
            self._write_meta(batch, b"committed_offset", committed_offset)
        self._staged = set()
        self._live_db().write(batch)
        # Only now: staged writes may name a segment that has just died.
        for segment_id in self._dead:
            if segment_id in self._segments:
                del self._segments[segment_id]  # the handle keeps the family alive; drop it first
                self._live_db().drop_column_family(f"{_SEGMENT_PREFIX}{segment_id}")
        self._dead = []

    def _write(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        assert self._batch is not None
        segment_id = end // self.segment_interval_ms
        store_key = session_store_key(key, start, end)
        if value is None:
            segment = self._segments.get(segment_id)
            # A growing session replaces its previous version on every record. Most versions
            # never reach this store (the cache or the transaction already folded them), and
            # a tombstone for a key the store never held would cost every later lookup of the
            # key a step over it: delete only what the store or this batch holds.
            if segment is not None and (
                store_key in self._staged or segment.get(store_key) is not None
            ):
                self._batch.delete(store_key, self._handle(segment_id))
            return
        self._staged.add(store_key)
        if segment_id not in self._segments:
            db = self._live_db()
            family = f"{_SEGMENT_PREFIX}{segment_id}"
            self._segments[segment_id] = db.create_column_family(family, _options())
        self._batch.put(store_key, bytes(value), self._handle(segment_id))

    def _advance(self, session_end_ms: int) -> None:
        if session_end_ms <= self.observed_stream_time:
            return
        assert self._batch is not None
        self.observed_stream_time = session_end_ms
        self._write_meta(self._batch, _STREAM_TIME, session_end_ms)
        expired, interval = self.expired_before(), self.segment_interval_ms
        # A segment is dead once its last possible end is expired.
        self._dead.extend(
            s for s in self._segments if (s + 1) * interval - 1 <= expired and s not in self._dead
        )

    def _handle(self, segment_id: int) -> Any:
        return self._live_db().get_column_family_handle(f"{_SEGMENT_PREFIX}{segment_id}")

    # -- reads -------------------------------------------------------------------------------

    def fetch_session(self, key: bytes, session_start_ms: int, session_end_ms: int) -> bytes | None:
        self._live_db()
        if session_end_ms <= self.expired_before():
            return None
        segment = self._segments.get(session_end_ms // self.segment_interval_ms)
        if segment is None:
            return None
        value: bytes | None = segment.get(session_store_key(key, session_start_ms, session_end_ms))
        return value

    def _find(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        one_key: bool,
    ) -> Iterator[SessionEntry]:
        self._live_db()
        earliest_end = self._live_from(earliest_end)
        interval = self.segment_interval_ms
        first = earliest_end // interval
        # Sessions ending anywhere after earliest_end qualify: every later segment is scanned.
        live = [s for s in sorted(self._segments) if s >= first and s not in self._dead]
        found: list[tuple[int, bytes, int, bytes]] = []
        for segment_id in live:
            lo_end = max(earliest_end, segment_id * interval)
            if one_key:
                assert key_from is not None
                hi_end = (segment_id + 1) * interval - 1
                lower: bytes | None = key_from + _LONG.pack(lo_end)
                upper: bytes | None = key_from + _LONG.pack(hi_end) + _HIGHEST_SUFFIX[:8]
            else:
                lower = key_from
                upper = None if key_to is None else key_to + _HIGHEST_SUFFIX
            segment_found = []
            for store_key, value in _scan(self._segments[segment_id], lower, upper):
                key, start, end = parse_session_store_key(store_key)
                # Keys that extend the bounds interleave in byte order; filter exactly.
                if one_key and key != key_from:
                    continue
                if key_from is not None and key < key_from:
                    continue
                if key_to is not None and key > key_to:
                    continue
                if end >= earliest_end and start <= latest_start:
                    segment_found.append((end, key, start, value))
            segment_found.sort(key=lambda f: (f[0], f[1], f[2]))
            found.extend(segment_found)
        # Materialised per call: a session merge removes and puts while it walks the result.
        return iter([SessionEntry(key, start, end, value) for end, key, start, value in found])
