"""RocksDB stores read by another process: secondary instances of a store a task has open.

The reader process of interactive queries opens each store this way. A secondary sees the
store as of its opening, then as of each ``catch_up``; it says when the store's segments
changed under it (it must be opened anew to see them), and it never writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.errors import StreamsError
from fluvial.state import (
    ChangelogRecord,
    RocksDBKeyValueStore,
    RocksDBSessionStore,
    RocksDBVersionedKeyValueStore,
    RocksDBWindowStore,
    window_store_key,
)

MINUTE = 60_000


def test_a_secondary_sees_commits_only_once_it_catches_up(tmp_path: Path) -> None:
    primary = RocksDBKeyValueStore("totals")
    primary.init(tmp_path / "task")
    primary.apply_committed([ChangelogRecord(b"news", b"1", 0)], 1)
    reader = RocksDBKeyValueStore("totals")
    reader.open_secondary(tmp_path / "task", tmp_path / "secondary")
    assert reader.get(b"news") == b"1" and reader.committed_offset == 1

    primary.apply_committed([ChangelogRecord(b"news", b"2", 0), ChangelogRecord(b"sport", b"5", 0)],
                            3)  # fmt: skip
    assert reader.get(b"news") == b"1", "nothing changes under a read between catch-ups"
    assert reader.catch_up() is True
    assert reader.get(b"news") == b"2"
    assert list(reader.range(None, None)) == [(b"news", b"2"), (b"sport", b"5")]

    reader.close()  # closing a secondary writes nothing into the primary's store
    primary.close()
    primary.init(tmp_path / "task")
    assert primary.committed_offset == 3 and primary.get(b"sport") == b"5"
    primary.close()


def test_a_secondary_cannot_write(tmp_path: Path) -> None:
    primary = RocksDBKeyValueStore("totals")
    primary.init(tmp_path / "task")
    reader = RocksDBKeyValueStore("totals")
    reader.open_secondary(tmp_path / "task", tmp_path / "secondary")
    with pytest.raises(Exception, match="(?i)not supported|read.only|secondary"):
        reader.put(b"news", b"1")
    reader.close()
    primary.close()


def test_a_secondary_of_a_missing_store_fails_with_its_path(tmp_path: Path) -> None:
    reader = RocksDBKeyValueStore("totals")
    with pytest.raises(StreamsError, match="cannot read RocksDB store 'totals'"):
        reader.open_secondary(tmp_path / "nothing-here", tmp_path / "secondary")


def test_window_segments_created_and_dropped_are_followed_by_a_catch_up(tmp_path: Path) -> None:
    def window(key: bytes, start: int, value: bytes) -> ChangelogRecord:
        return ChangelogRecord(window_store_key(key, start, 0), value, start)

    primary = RocksDBWindowStore("counts", retention_ms=2 * MINUTE, window_size_ms=5000)
    primary.init(tmp_path / "task")
    primary.apply_committed([window(b"news", 0, b"1")], 1)
    reader = RocksDBWindowStore("counts", retention_ms=2 * MINUTE, window_size_ms=5000)
    reader.open_secondary(tmp_path / "task", tmp_path / "secondary")
    primary.apply_committed([window(b"news", 0, b"2")], 2)  # the same segment
    assert reader.catch_up() is True and reader.fetch(b"news", 0) == b"2"

    # Segments share one column family: a new one is new keys, which a catch-up sees.
    primary.apply_committed([window(b"news", MINUTE, b"7")], 3)
    assert primary.segment_ids == [0, 1]
    assert reader.fetch(b"news", MINUTE) is None, "not before the catch-up"
    assert reader.catch_up() is True
    assert reader.segment_ids == [0, 1]
    assert reader.fetch(b"news", MINUTE) == b"7" and reader.fetch(b"news", 0) == b"2"

    primary.apply_committed([window(b"news", 4 * MINUTE, b"9")], 4)  # segments 0, 1 expire
    assert primary.segment_ids == [4]
    assert reader.catch_up() is True
    assert reader.segment_ids == [4]
    assert reader.fetch(b"news", 0) is None and reader.fetch(b"news", 4 * MINUTE) == b"9"
    assert reader.observed_stream_time == primary.observed_stream_time
    reader.close()
    primary.close()


def test_expiry_follows_the_stream_time_caught_up_with(tmp_path: Path) -> None:
    def window(start: int, value: bytes) -> ChangelogRecord:
        return ChangelogRecord(window_store_key(b"news", start, 0), value, start)

    # One segment holds it all (the interval is a day): only the stream time moves.
    primary = RocksDBWindowStore("counts", 30_000, 5000, segment_interval_ms=24 * 3_600_000)
    primary.init(tmp_path / "task")
    primary.apply_committed([window(0, b"1"), window(10_000, b"2")], 2)
    reader = RocksDBWindowStore("counts", 30_000, 5000, segment_interval_ms=24 * 3_600_000)
    reader.open_secondary(tmp_path / "task", tmp_path / "secondary")
    assert reader.fetch(b"news", 0) == b"1"
    primary.apply_committed([window(40_000, b"3")], 3)  # window 0 is now expired
    assert reader.catch_up() is True
    assert reader.fetch(b"news", 0) is None and reader.fetch(b"news", 40_000) == b"3"
    reader.close()
    primary.close()


def test_session_and_versioned_stores_read_through_a_secondary(tmp_path: Path) -> None:
    sessions = RocksDBSessionStore("sessions", retention_ms=10 * MINUTE)
    sessions.init(tmp_path / "task")
    sessions.put(b"user-1", 1000, 2000, b"2")
    versions = RocksDBVersionedKeyValueStore("prices", history_retention_ms=10 * MINUTE)
    versions.init(tmp_path / "task")
    versions.put(b"apple", b"10", 1000)

    session_reader = RocksDBSessionStore("sessions", retention_ms=10 * MINUTE)
    session_reader.open_secondary(tmp_path / "task", tmp_path / "secondary" / "sessions")
    version_reader = RocksDBVersionedKeyValueStore("prices", history_retention_ms=10 * MINUTE)
    version_reader.open_secondary(tmp_path / "task", tmp_path / "secondary" / "prices")
    assert [(e.start_ms, e.end_ms, e.value) for e in session_reader.fetch(b"user-1")] == [
        (1000, 2000, b"2")]  # fmt: skip
    assert version_reader.get(b"apple").value == b"10"

    sessions.put(b"user-1", 1000, 2000, None)
    sessions.put(b"user-1", 1000, 3000, b"3")
    versions.put(b"apple", b"12", 5000)
    assert session_reader.catch_up() is True and version_reader.catch_up() is True
    assert [(e.start_ms, e.end_ms, e.value) for e in session_reader.fetch(b"user-1")] == [
        (1000, 3000, b"3")]  # fmt: skip
    assert version_reader.get(b"apple").value == b"12"
    assert version_reader.get(b"apple", 2000).value == b"10"
    for store in (session_reader, version_reader, sessions, versions):
        store.close()
