"""Window store conformance: every test runs against every backend."""

from __future__ import annotations

import struct

import pytest

from fluvial.state import (
    ChangelogRecord,
    InMemoryWindowStore,
    RocksDBWindowStore,
    parse_window_store_key,
    window_store_key,
)


def kafka_window_key(key: bytes, start: int, seqnum: int) -> bytes:
    """Kafka Streams' WindowKeySchema.toStoreKeyBinary, written out independently."""
    return key + struct.pack(">q", start) + struct.pack(">i", seqnum)


def test_put_and_fetch_one_window(make_window):
    store = make_window()
    store.put(b"k", b"v0", 0)
    store.put(b"k", b"v100", 100)
    store.put(b"k", b"v100b", 100)
    assert store.fetch(b"k", 0) == b"v0"
    assert store.fetch(b"k", 100) == b"v100b"
    assert store.fetch(b"k", 200) is None
    assert store.fetch(b"other", 0) is None


def test_put_none_deletes_a_window(make_window):
    store = make_window()
    store.put(b"k", b"v", 0)
    store.put(b"k", None, 0)
    assert store.fetch(b"k", 0) is None
    assert list(store.all()) == []


def test_fetch_range_is_inclusive_and_ascending(make_window):
    store = make_window(retention_ms=10_000)
    for start in [500, 100, 300, 0, 200, 400]:
        store.put(b"k", str(start).encode(), start)
    store.put(b"j", b"other key", 200)
    assert list(store.fetch_range(b"k", 100, 400)) == [
        (100, b"100"),
        (200, b"200"),
        (300, b"300"),
        (400, b"400"),
    ]
    assert list(store.fetch_range(b"k", 101, 199)) == []
    assert list(store.fetch_range(b"missing", 0, 500)) == []


def test_fetch_range_ignores_keys_that_extend_the_key(make_window):
    # b"a" + start bytes and b"a\x00..." interleave in byte order; only exact keys may match.
    store = make_window(retention_ms=10_000)
    store.put(b"a", b"short", 100)
    store.put(b"a\x00", b"longer", 100)
    store.put(b"a\x00\x00\x00\x00\x00\x00\x00\x00", b"sneaky", 50)
    store.put(b"a", b"short2", 200)
    assert list(store.fetch_range(b"a", 0, 1000)) == [(100, b"short"), (200, b"short2")]
    assert list(store.fetch_range(b"a\x00", 0, 1000)) == [(100, b"longer")]


def test_fetch_all_orders_by_start_then_key(make_window):
    store = make_window(retention_ms=10_000)
    store.put(b"b", b"b200", 200)
    store.put(b"\xff", b"ff100", 100)
    store.put(b"a", b"a200", 200)
    store.put(b"b", b"b100", 100)
    store.put(b"a", b"a300", 300)
    assert list(store.fetch_all(100, 200)) == [
        (b"b", 100, b"b100"),
        (b"\xff", 100, b"ff100"),
        (b"a", 200, b"a200"),
        (b"b", 200, b"b200"),
    ]
    assert [(k, s) for k, s, _ in store.all()] == [
        (b"b", 100),
        (b"\xff", 100),
        (b"a", 200),
        (b"b", 200),
        (b"a", 300),
    ]


def test_windows_expire_after_retention(make_window, attach_changelog):
    store = make_window(retention_ms=1000, window_size_ms=100)
    log = attach_changelog(store)
    store.put(b"k", b"old", 0)
    store.put(b"k", b"mid", 500)
    store.put(b"k", b"new", 1000)
    # Stream time 1000, retention 1000: start 0 is at the boundary and so expired.
    assert store.observed_stream_time == 1000
    assert store.fetch(b"k", 0) is None
    assert list(store.fetch_range(b"k", 0, 2000)) == [(500, b"mid"), (1000, b"new")]
    assert [s for _, s, _ in store.all()] == [500, 1000]

    store.put(b"k", b"too late", 0)
    assert store.fetch(b"k", 0) is None
    assert len(log) == 3, "a put into an expired window must not reach the changelog"

    store.put(b"k", b"newest", 1600)
    assert list(store.fetch_range(b"k", 0, 2000)) == [(1000, b"new"), (1600, b"newest")]


def test_stream_time_never_goes_back(make_window):
    store = make_window(retention_ms=1000)
    store.put(b"k", b"a", 900)
    store.put(b"k", b"b", 100)
    assert store.observed_stream_time == 900
    assert store.fetch(b"k", 100) == b"b"


def test_changelog_key_is_kafka_streams_window_key(make_window, attach_changelog):
    store = make_window(retention_ms=10_000)
    log = attach_changelog(store)
    store.put(b"user-1", b"3", 5000, timestamp_ms=5123)
    store.put(b"user-1", None, 5000, timestamp_ms=5200)
    assert log == [
        ChangelogRecord(
            b"user-1" + b"\x00\x00\x00\x00\x00\x00\x13\x88" + b"\x00\x00\x00\x00", b"3", 5123
        ),
        ChangelogRecord(kafka_window_key(b"user-1", 5000, 0), None, 5200),
    ]


def test_window_key_helpers_round_trip():
    binary = window_store_key(b"\xffkey", 2**40, 7)
    assert binary == kafka_window_key(b"\xffkey", 2**40, 7)
    assert parse_window_store_key(binary) == (b"\xffkey", 2**40, 7)
    assert parse_window_store_key(window_store_key(b"", -5, 0)) == (b"", -5, 0)
    with pytest.raises(ValueError, match="at least 12 bytes"):
        parse_window_store_key(b"short")


def test_retain_duplicates_keeps_every_put(make_window, attach_changelog):
    store = make_window(retention_ms=10_000, retain_duplicates=True)
    log = attach_changelog(store)
    store.put(b"k", b"first", 100)
    store.put(b"k", b"second", 100)
    store.put(b"k", None, 100)  # no single entry to delete: ignored
    store.put(b"k", b"third", 200)
    assert list(store.fetch_range(b"k", 0, 300)) == [
        (100, b"first"),
        (100, b"second"),
        (200, b"third"),
    ]
    assert store.fetch(b"k", 100) == b"first"
    assert [record.key for record in log] == [
        kafka_window_key(b"k", 100, 1),
        kafka_window_key(b"k", 100, 2),
        kafka_window_key(b"k", 200, 3),
    ]


def test_changelog_rebuilds_an_identical_window_store(make_window, attach_changelog):
    original = make_window(retention_ms=1000, name="original")
    log = attach_changelog(original)
    for i in range(40):
        original.put(f"k{i % 3}".encode(), f"v{i}".encode(), i * 50, timestamp_ms=i * 50 + 7)
        if i % 4 == 0:
            original.put(f"k{(i + 1) % 3}".encode(), None, i * 50)

    rebuilt = make_window(retention_ms=1000, name="rebuilt")
    echoed = attach_changelog(rebuilt)
    rebuilt.restore(log)
    assert list(rebuilt.all()) == list(original.all())
    assert rebuilt.observed_stream_time == original.observed_stream_time
    assert echoed == []


def test_restore_with_duplicates_continues_the_sequence(make_window, attach_changelog):
    original = make_window(retention_ms=10_000, retain_duplicates=True, name="original")
    log = attach_changelog(original)
    original.put(b"k", b"a", 100)
    original.put(b"k", b"b", 100)

    rebuilt = make_window(retention_ms=10_000, retain_duplicates=True, name="rebuilt")
    rebuilt.restore(log)
    rebuilt.put(b"k", b"c", 100)
    assert list(rebuilt.fetch_range(b"k", 100, 100)) == [(100, b"a"), (100, b"b"), (100, b"c")]


def test_restore_skips_expired_windows(make_window):
    store = make_window(retention_ms=1000)
    store.restore(
        [
            ChangelogRecord(window_store_key(b"k", 5000, 0), b"new", 5000),
            ChangelogRecord(window_store_key(b"k", 100, 0), b"ancient", 100),
        ]
    )
    assert list(store.all()) == [(b"k", 5000, b"new")]


def test_retention_must_cover_the_window(backend):
    cls = InMemoryWindowStore if backend == "memory" else RocksDBWindowStore
    with pytest.raises(ValueError, match="at least window_size_ms"):
        cls("w", 50, 100)


# -- persistence ---------------------------------------------------------------------------


@pytest.mark.usefixtures("requires_persistence")
def test_windows_stream_time_and_offset_survive_reopen(make_window):
    store = make_window(retention_ms=1000, name="durable")
    store.put(b"k", b"a", 100)
    store.put(b"j", b"b", 900)
    store.committed_offset = 99
    store.flush()
    store.close()

    reopened = make_window(retention_ms=1000, name="durable")
    assert list(reopened.all()) == [(b"k", 100, b"a"), (b"j", 900, b"b")]
    assert reopened.observed_stream_time == 900
    assert reopened.committed_offset == 99
    reopened.put(b"k", b"late", -200)  # expired relative to the persisted stream time
    assert reopened.fetch(b"k", -200) is None


@pytest.mark.usefixtures("requires_persistence")
def test_duplicate_sequence_survives_reopen(make_window):
    store = make_window(retention_ms=10_000, retain_duplicates=True, name="dups")
    store.put(b"k", b"a", 100)
    store.close()
    reopened = make_window(retention_ms=10_000, retain_duplicates=True, name="dups")
    reopened.put(b"k", b"b", 100)
    assert list(reopened.fetch_range(b"k", 100, 100)) == [(100, b"a"), (100, b"b")]


def test_rocksdb_drops_expired_segments(tmp_path):
    store = RocksDBWindowStore("w", retention_ms=1000, window_size_ms=100, segment_interval_ms=500)
    store.init(tmp_path)
    store.put(b"k", b"a", 0)
    store.put(b"k", b"b", 600)
    assert store.segment_ids == [0, 1]
    store.put(b"k", b"c", 1600)  # expires starts <= 600: segment 0 ([0, 499]) is dead
    assert store.segment_ids == [1, 3]
    store.close()

    reopened = RocksDBWindowStore(
        "w", retention_ms=1000, window_size_ms=100, segment_interval_ms=500
    )
    reopened.init(tmp_path)
    assert reopened.segment_ids == [1, 3]
    assert list(reopened.all()) == [(b"k", 1600, b"c")]
    reopened.close()


def test_rocksdb_segments_come_and_go_without_new_column_families(tmp_path):
    """Segments share one column family: creating or dropping one is a key range, so the
    store's families stay the same however far stream time moves."""
    from rocksdict import Options, Rdict

    store = RocksDBWindowStore("w", retention_ms=1000, window_size_ms=100, segment_interval_ms=500)
    store.init(tmp_path)
    families = set(Rdict.list_cf(str(tmp_path / "w"), Options(raw_mode=True)))
    for start in range(0, 20_000, 250):
        store.put(b"k", str(start).encode(), start)
    assert store.segment_ids == [37, 38, 39]
    assert set(Rdict.list_cf(str(tmp_path / "w"), Options(raw_mode=True))) == families
    assert [s for s, _ in store.fetch_range(b"k", 0, 20_000)] == [19_000, 19_250, 19_500, 19_750]
    store.close()


def test_rocksdb_moves_a_store_with_a_column_family_per_segment(tmp_path):
    """Stores written by earlier fluvial versions kept one column family per segment
    (``segment-<id>``, keys without the segment id): opening one moves its windows over."""
    from rocksdict import Options, Rdict, WriteBatch

    def options() -> Options:
        o = Options(raw_mode=True)
        o.create_if_missing(True)
        o.create_missing_column_families(True)
        return o

    def write_old_layout(path: str) -> None:
        families = ("fluvial-meta", "segment-1", "segment-2")
        db = Rdict(path, options(), column_families={n: options() for n in families})
        batch = WriteBatch(raw_mode=True)
        for family, start, value in [("segment-1", 600, b"a"), ("segment-2", 1200, b"b")]:
            batch.put(kafka_window_key(b"k", start, 0), value, db.get_column_family_handle(family))
        meta = db.get_column_family_handle("fluvial-meta")
        batch.put(b"observed_stream_time", struct.pack(">q", 1200), meta)
        batch.put(b"committed_offset", struct.pack(">q", 41), meta)
        db.write(batch)
        db.close()

    path = str(tmp_path / "w")
    write_old_layout(path)

    store = RocksDBWindowStore("w", retention_ms=1000, window_size_ms=100, segment_interval_ms=500)
    store.init(tmp_path)
    assert store.committed_offset == 41
    assert store.segment_ids == [1, 2]
    assert list(store.all()) == [(b"k", 600, b"a"), (b"k", 1200, b"b")]
    assert store.fetch(b"k", 600) == b"a"
    store.close()
    assert not any(f.startswith("segment-") for f in Rdict.list_cf(path, Options(raw_mode=True)))
    reopened = RocksDBWindowStore(
        "w", retention_ms=1000, window_size_ms=100, segment_interval_ms=500
    )
    reopened.init(tmp_path)
    assert list(reopened.all()) == [(b"k", 600, b"a"), (b"k", 1200, b"b")]
    reopened.close()


def test_negative_window_starts_sort_before_positive_ones(make_window):
    # Big-endian signed bytes put -1 after +1; stores must still answer in numeric order.
    store = make_window(retention_ms=10_000)
    for start in [50, -50, 0, -1000, 1000]:
        store.put(b"k", str(start).encode(), start)
    assert [s for s, _ in store.fetch_range(b"k", -5000, 5000)] == [-1000, -50, 0, 50, 1000]
    assert [s for s, _ in store.fetch_range(b"k", -60, 10)] == [-50, 0]
    assert [s for _, s, _ in store.all()] == [-1000, -50, 0, 50, 1000]
