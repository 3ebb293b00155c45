"""Session store conformance: every test runs against every backend."""

from __future__ import annotations

import struct

import pytest

from fluvial import serdes
from fluvial.records import Window, Windowed
from fluvial.state import (
    ChangelogRecord,
    RocksDBSessionStore,
    SessionEntry,
    TypedSessionStore,
    parse_session_store_key,
    session_store_key,
)


def kafka_session_key(key: bytes, start: int, end: int) -> bytes:
    """Kafka Streams' SessionKeySchema.toBinary, written out independently: end before start."""
    return key + struct.pack(">q", end) + struct.pack(">q", start)


def spans(entries):
    return [(e.key, e.start_ms, e.end_ms) for e in entries]


def test_put_fetch_session_and_remove(make_session):
    store = make_session()
    store.put(b"k", 10, 20, b"a")
    store.put(b"k", 30, 30, b"b")
    assert store.fetch_session(b"k", 10, 20) == b"a"
    assert store.fetch_session(b"k", 10, 21) is None
    assert store.fetch_session(b"other", 10, 20) is None
    store.put(b"k", 10, 20, b"a2")
    assert store.fetch_session(b"k", 10, 20) == b"a2"
    store.remove(b"k", 10, 20)
    assert store.fetch_session(b"k", 10, 20) is None
    store.put(b"k", 30, 30, None)
    assert list(store.all()) == []


def test_find_sessions_selects_by_end_and_start(make_session):
    store = make_session(retention_ms=10_000)
    for start, end in [(0, 10), (20, 50), (60, 60), (70, 100), (200, 300)]:
        store.put(b"k", start, end, f"{start}-{end}".encode())
    store.put(b"j", 20, 50, b"other key")
    # end >= 50 and start <= 70
    assert spans(store.find_sessions(b"k", 50, 70)) == [
        (b"k", 20, 50),
        (b"k", 60, 60),
        (b"k", 70, 100),
    ]
    # a record at 55 with gap 5 merges with nothing; with gap 10 it bridges two sessions
    assert spans(store.find_sessions(b"k", 50, 60)) == [(b"k", 20, 50), (b"k", 60, 60)]
    assert spans(store.find_sessions(b"k", 51, 59)) == []
    entry = next(store.find_sessions(b"k", 0, 0))
    assert entry == SessionEntry(b"k", 0, 10, b"0-10")


def test_find_sessions_orders_by_end_then_start(make_session):
    store = make_session(retention_ms=10_000)
    store.put(b"k", 40, 100, b"x")
    store.put(b"k", 90, 90, b"y")
    store.put(b"k", 10, 100, b"z")
    assert spans(store.fetch(b"k")) == [(b"k", 90, 90), (b"k", 10, 100), (b"k", 40, 100)]


def test_range_reads_order_by_end_key_start(make_session):
    store = make_session(retention_ms=10_000)
    store.put(b"b", 0, 100, b"1")
    store.put(b"a", 0, 200, b"2")
    store.put(b"\xff", 50, 100, b"3")
    store.put(b"a", 0, 100, b"4")
    store.put(b"c", 0, 100, b"5")
    assert spans(store.all()) == [
        (b"a", 0, 100),
        (b"b", 0, 100),
        (b"c", 0, 100),
        (b"\xff", 50, 100),
        (b"a", 0, 200),
    ]
    assert spans(store.fetch_range(b"b", b"c")) == [(b"b", 0, 100), (b"c", 0, 100)]
    assert spans(store.find_sessions_range(None, b"b", 150, 1000)) == [(b"a", 0, 200)]
    assert spans(store.find_sessions_range(b"c", None, 0, 10)) == [(b"c", 0, 100)]


def test_keys_that_extend_the_key_do_not_leak(make_session):
    store = make_session(retention_ms=10_000)
    store.put(b"a", 100, 100, b"short")
    store.put(b"a\x00", 50, 100, b"longer")
    store.put(b"a" + b"\x00" * 16, 0, 50, b"sneaky")
    assert spans(store.fetch(b"a")) == [(b"a", 100, 100)]
    assert spans(store.fetch(b"a\x00")) == [(b"a\x00", 50, 100)]
    assert spans(store.fetch_range(b"a", b"a")) == [(b"a", 100, 100)]


def test_negative_times_are_numeric_order(make_session):
    store = make_session(retention_ms=10_000)
    for start, end in [(-50, 20), (-1000, -900), (0, 0), (-10, -5)]:
        store.put(b"k", start, end, b"v")
    assert [(e.start_ms, e.end_ms) for e in store.fetch(b"k")] == [
        (-1000, -900),
        (-10, -5),
        (0, 0),
        (-50, 20),
    ]


def test_sessions_expire_by_end_after_retention(make_session, attach_changelog):
    store = make_session(retention_ms=1000)
    log = attach_changelog(store)
    store.put(b"k", 0, 100, b"old")
    store.put(b"k", 500, 600, b"mid")
    store.put(b"k", 1000, 1100, b"new")
    # Stream time 1100, retention 1000: end 100 is at the boundary and so expired.
    assert store.observed_stream_time == 1100
    assert store.fetch_session(b"k", 0, 100) is None
    assert spans(store.fetch(b"k")) == [(b"k", 500, 600), (b"k", 1000, 1100)]
    store.put(b"k", 50, 90, b"too late")
    assert store.fetch_session(b"k", 50, 90) is None
    assert len(log) == 3, "a put of an expired session must not reach the changelog"
    store.put(b"k", 1200, 2000, b"newest")
    assert spans(store.all()) == [(b"k", 1000, 1100), (b"k", 1200, 2000)]


def test_end_before_start_is_refused(make_session):
    with pytest.raises(ValueError, match="before its start"):
        make_session().put(b"k", 10, 5, b"v")


def test_changelog_key_is_kafka_streams_session_key(make_session, attach_changelog):
    store = make_session(retention_ms=10_000)
    log = attach_changelog(store)
    store.put(b"user", 1000, 5000, b"3")
    store.put(b"user", 1000, 5000, None, timestamp_ms=5001)
    assert log == [
        ChangelogRecord(
            b"user" + b"\x00\x00\x00\x00\x00\x00\x13\x88" + b"\x00\x00\x00\x00\x00\x00\x03\xe8",
            b"3",
            5000,  # defaults to the session end
        ),
        ChangelogRecord(kafka_session_key(b"user", 1000, 5000), None, 5001),
    ]


def test_session_key_helpers_round_trip():
    binary = session_store_key(b"\xffk", -5, 2**40)
    assert binary == kafka_session_key(b"\xffk", -5, 2**40)
    assert parse_session_store_key(binary) == (b"\xffk", -5, 2**40)
    assert parse_session_store_key(session_store_key(b"", 0, 0)) == (b"", 0, 0)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        parse_session_store_key(b"short")


def test_changelog_rebuilds_an_identical_session_store(make_session, attach_changelog):
    original = make_session(retention_ms=1000, name="original")
    log = attach_changelog(original)
    for i in range(60):
        key = f"k{i % 4}".encode()
        original.put(key, i * 40, i * 40 + i % 3 * 10, f"v{i}".encode())
        if i % 5 == 0:
            original.remove(f"k{(i + 1) % 4}".encode(), (i - 1) * 40, (i - 1) * 40 + 10)
    rebuilt = make_session(retention_ms=1000, name="rebuilt")
    echoed = attach_changelog(rebuilt)
    rebuilt.restore(log)
    assert list(rebuilt.all()) == list(original.all())
    assert rebuilt.observed_stream_time == original.observed_stream_time
    assert echoed == []


def test_restore_skips_expired_sessions(make_session):
    store = make_session(retention_ms=1000)
    store.restore(
        [
            ChangelogRecord(session_store_key(b"k", 4000, 5000), b"new", 5000),
            ChangelogRecord(session_store_key(b"k", 0, 100), b"ancient", 100),
        ]
    )
    assert spans(store.all()) == [(b"k", 4000, 5000)]


def test_merge_while_iterating(make_session):
    # What a session aggregation does: find overlapping sessions, remove them, put the merge.
    store = make_session(retention_ms=10_000)
    store.put(b"k", 0, 10, b"a")
    store.put(b"k", 20, 30, b"b")
    merged_start, merged_end = 0, 30
    for entry in store.find_sessions(b"k", 5, 25):
        store.remove(b"k", entry.start_ms, entry.end_ms)
    store.put(b"k", merged_start, merged_end, b"ab")
    assert list(store.fetch(b"k")) == [SessionEntry(b"k", 0, 30, b"ab")]


@pytest.mark.usefixtures("requires_persistence")
def test_sessions_stream_time_and_offset_survive_reopen(make_session):
    store = make_session(retention_ms=1000, name="durable")
    store.put(b"k", 0, 100, b"a")
    store.put(b"j", 800, 900, b"b")
    store.committed_offset = 7
    store.flush()
    store.close()
    reopened = make_session(retention_ms=1000, name="durable")
    assert spans(reopened.all()) == [(b"k", 0, 100), (b"j", 800, 900)]
    assert reopened.observed_stream_time == 900
    assert reopened.committed_offset == 7
    reopened.put(b"k", -200, -150, b"late")
    assert reopened.fetch_session(b"k", -200, -150) is None


def test_rocksdb_drops_expired_session_segments(tmp_path):
    store = RocksDBSessionStore("s", retention_ms=1000, segment_interval_ms=500)
    store.init(tmp_path)
    store.put(b"k", 0, 100, b"a")
    store.put(b"k", 550, 600, b"b")
    assert store.segment_ids == [0, 1]
    store.put(b"k", 1500, 1600, b"c")  # expires ends <= 600: segment 0 ([0, 499]) is dead
    assert store.segment_ids == [1, 3]
    store.close()
    reopened = RocksDBSessionStore("s", retention_ms=1000, segment_interval_ms=500)
    reopened.init(tmp_path)
    assert reopened.segment_ids == [1, 3]
    assert spans(reopened.all()) == [(b"k", 1500, 1600)]
    reopened.close()


def test_rocksdb_leaves_no_tombstone_for_a_session_it_never_held(tmp_path):
    """A growing session replaces its previous version on every record. Versions the store
    never held (the cache or the transaction folded them) must leave no tombstone: every later
    lookup of the key would step over each one. Removing what the store holds still lands."""
    store = RocksDBSessionStore("s", retention_ms=10_000, segment_interval_ms=60_000)
    store.init(tmp_path)
    store.put(b"k", 0, 100, b"a")
    store.put(b"j", 0, 100, b"other key")
    # One commit's changelog: three versions the store never held, the one it holds, the new.
    never_held = [ChangelogRecord(session_store_key(b"k", 0, e), None, e) for e in (110, 120, 130)]
    store.apply_committed(
        [*never_held,
         ChangelogRecord(session_store_key(b"k", 0, 100), None, 100),
         ChangelogRecord(session_store_key(b"k", 0, 140), b"b", 140)],
        committed_offset=5,
    )  # fmt: skip
    deletes = store._segments[0].property_int_value("rocksdb.num-deletes-active-mem-table")
    assert deletes == 1
    assert spans(store.find_sessions(b"k", 0, 1000)) == [(b"k", 0, 140)]
    # A restore replays a put and the remove of the same session in one batch: both land.
    store.restore([ChangelogRecord(session_store_key(b"k", 150, 160), b"c", 160),
                   ChangelogRecord(session_store_key(b"k", 150, 160), None, 160)])  # fmt: skip
    assert spans(store.all()) == [(b"j", 0, 100), (b"k", 0, 140)]
    store.remove(b"j", 0, 100)
    assert spans(store.all()) == [(b"k", 0, 140)]
    store.close()
    reopened = RocksDBSessionStore("s", retention_ms=10_000, segment_interval_ms=60_000)
    reopened.init(tmp_path)
    assert spans(reopened.all()) == [(b"k", 0, 140)]
    assert reopened.committed_offset == 5
    reopened.close()


def test_typed_session_store_uses_windowed_keys(make_session):
    store = TypedSessionStore(make_session(retention_ms=10_000), serdes.string(), serdes.long())
    store.put(Windowed("alice", Window(10, 20)), 2)
    store.put(Windowed("bob", Window(15, 15)), 1)
    assert store.fetch_session("alice", 10, 20) == 2
    assert list(store.find_sessions("alice", 0, 100)) == [(Windowed("alice", Window(10, 20)), 2)]
    assert list(store.all()) == [
        (Windowed("bob", Window(15, 15)), 1),
        (Windowed("alice", Window(10, 20)), 2),
    ]
    assert list(store.fetch_range("b", "c")) == [(Windowed("bob", Window(15, 15)), 1)]
    store.remove(Windowed("alice", Window(10, 20)))
    assert list(store.fetch("alice")) == []
