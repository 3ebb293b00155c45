"""Key-value store conformance: every test runs against every backend."""

from __future__ import annotations

import pytest

from fluvial.errors import StreamsError
from fluvial.state import ChangelogRecord, InMemoryKeyValueStore, RocksDBKeyValueStore


def test_put_get_overwrite_and_delete(make_kv):
    store = make_kv()
    assert store.get(b"a") is None
    store.put(b"a", b"1")
    store.put(b"a", b"2")
    assert store.get(b"a") == b"2"
    assert store.delete(b"a") == b"2"
    assert store.get(b"a") is None
    assert store.delete(b"a") is None


def test_put_none_is_a_tombstone(make_kv):
    store = make_kv()
    store.put(b"a", b"1")
    store.put(b"a", None)
    assert store.get(b"a") is None
    assert list(store.all()) == []


def test_empty_value_is_not_a_tombstone(make_kv):
    store = make_kv()
    store.put(b"a", b"")
    assert store.get(b"a") == b""
    assert list(store.all()) == [(b"a", b"")]


def test_all_is_sorted_by_unsigned_bytes(make_kv):
    store = make_kv()
    for key in [b"\xff", b"\x01", b"\x80", b"\x01\x00", b"\x00", b"b", b"a"]:
        store.put(key, key * 2)
    assert [k for k, _ in store.all()] == [
        b"\x00",
        b"\x01",
        b"\x01\x00",
        b"a",
        b"b",
        b"\x80",
        b"\xff",
    ]
    assert dict(store.all())[b"\xff"] == b"\xff\xff"


def test_range_is_inclusive_on_both_ends(make_kv):
    store = make_kv()
    for key in [b"a", b"b", b"c", b"d", b"\xff"]:
        store.put(key, key.upper())
    assert list(store.range(b"b", b"d")) == [(b"b", b"B"), (b"c", b"C"), (b"d", b"D")]
    assert [k for k, _ in store.range(b"bb", b"c")] == [b"c"]
    assert [k for k, _ in store.range(b"c", None)] == [b"c", b"d", b"\xff"]
    assert [k for k, _ in store.range(None, b"b")] == [b"a", b"b"]
    assert list(store.range(b"x", b"b")) == []


def test_put_if_absent_keeps_the_existing_value(make_kv, attach_changelog):
    store = make_kv()
    log = attach_changelog(store)
    assert store.put_if_absent(b"a", b"1") is None
    assert store.put_if_absent(b"a", b"2") == b"1"
    assert store.get(b"a") == b"1"
    assert log == [ChangelogRecord(b"a", b"1", 0)]


def test_every_write_emits_one_changelog_record(make_kv, attach_changelog):
    store = make_kv()
    log = attach_changelog(store)
    store.put(b"a", b"1", timestamp_ms=10)
    store.put(b"b", b"2", timestamp_ms=11)
    store.put(b"a", b"3", timestamp_ms=12)
    store.delete(b"b", timestamp_ms=13)
    store.put(b"c", None, timestamp_ms=14)
    store.put_all([(b"d", b"4"), (b"e", b"5")], timestamp_ms=15)
    assert log == [
        ChangelogRecord(b"a", b"1", 10),
        ChangelogRecord(b"b", b"2", 11),
        ChangelogRecord(b"a", b"3", 12),
        ChangelogRecord(b"b", None, 13),
        ChangelogRecord(b"c", None, 14),
        ChangelogRecord(b"d", b"4", 15),
        ChangelogRecord(b"e", b"5", 15),
    ]


def test_listener_can_be_removed(make_kv, attach_changelog):
    store = make_kv()
    log = attach_changelog(store)
    store.set_change_listener(None)
    store.put(b"a", b"1")
    assert log == []


def test_changelog_rebuilds_an_identical_store(make_kv, attach_changelog):
    original = make_kv("original")
    log = attach_changelog(original)
    for i in range(50):
        original.put(f"k{i % 17}".encode(), f"v{i}".encode(), timestamp_ms=i)
        if i % 5 == 0:
            original.delete(f"k{(i * 3) % 17}".encode())

    rebuilt = make_kv("rebuilt")
    restored_log = attach_changelog(rebuilt)
    rebuilt.restore(log)
    assert list(rebuilt.all()) == list(original.all())
    assert restored_log == [], "restore must not echo records back to the changelog"


def test_restore_applies_tombstones(make_kv):
    store = make_kv()
    store.put(b"a", b"1")
    store.restore([ChangelogRecord(b"a", None, 0), ChangelogRecord(b"b", b"2", 0)])
    assert list(store.all()) == [(b"b", b"2")]


def test_writes_while_iterating_do_not_break_iteration(make_kv):
    store = make_kv()
    keys = [f"{i:04d}".encode() for i in range(1200)]  # several RocksDB read batches
    for key in keys:
        store.put(key, b"v")
    seen = []
    for key, _ in store.all():
        seen.append(key)
        store.delete(key)
    assert seen == keys
    assert list(store.all()) == []


def test_approximate_num_entries_counts_keys(make_kv, backend):
    store = make_kv()
    for i in range(100):
        store.put(f"k{i}".encode(), b"v")
    store.flush()
    count = store.approximate_num_entries()
    if backend == "memory":
        assert count == 100
    else:
        assert 50 <= count <= 200  # RocksDB estimates


def test_closed_store_refuses_use(make_kv):
    store = make_kv()
    store.close()
    assert not store.is_open
    with pytest.raises(RuntimeError, match="not open"):
        store.get(b"a")


def test_committed_offset_starts_unset_and_is_kept(make_kv):
    store = make_kv()
    assert store.committed_offset is None
    store.committed_offset = 41
    store.flush()
    assert store.committed_offset == 41


def test_persistent_flag_matches_the_backend(make_kv, backend):
    assert make_kv().persistent is (backend == "rocksdb")


# -- persistence: only stores that survive a restart ----------------------------------------


@pytest.mark.usefixtures("requires_persistence")
def test_data_and_committed_offset_survive_close_and_reopen(make_kv, state_dir):
    store = make_kv("durable")
    store.put(b"a", b"1")
    store.put(b"\xff", b"2")
    store.put(b"gone", b"3")
    store.delete(b"gone")
    store.committed_offset = 1234
    store.flush()
    store.close()

    reopened = make_kv("durable")
    assert list(reopened.all()) == [(b"a", b"1"), (b"\xff", b"2")]
    assert reopened.committed_offset == 1234


@pytest.mark.usefixtures("requires_persistence")
def test_committed_offset_is_not_an_entry(make_kv):
    store = make_kv()
    store.committed_offset = 7
    store.flush()
    assert list(store.all()) == []
    assert store.get(b"committed_offset") is None


@pytest.mark.usefixtures("requires_persistence")
def test_destroy_wipes_files(make_kv, state_dir):
    store = make_kv("doomed")
    store.put(b"a", b"1")
    store.committed_offset = 5
    store.flush()
    store.destroy()
    assert not (state_dir / "doomed").exists()

    fresh = make_kv("doomed")
    assert list(fresh.all()) == []
    assert fresh.committed_offset is None


def test_rocksdb_needs_a_state_dir():
    with pytest.raises(ValueError, match="state directory"):
        RocksDBKeyValueStore("kv").init(None)


def test_rocksdb_keeps_its_data_in_rocksdb(tmp_path):
    store = RocksDBKeyValueStore("kv")
    store.init(tmp_path)
    store.put(b"a", b"1")
    assert not any(isinstance(v, dict) for v in vars(store).values())
    store.close()
    assert any((tmp_path / "kv").iterdir())


def test_in_memory_destroy_forgets_everything():
    store = InMemoryKeyValueStore("kv")
    store.init(None)
    store.put(b"a", b"1")
    store.committed_offset = 3
    store.destroy()
    store.init(None)
    assert list(store.all()) == []
    assert store.committed_offset is None


def test_rocksdb_explains_a_held_lock(tmp_path):
    first = RocksDBKeyValueStore("kv")
    first.init(tmp_path)
    second = RocksDBKeyValueStore("kv")
    try:
        with pytest.raises(StreamsError, match="cannot open RocksDB store 'kv'.*close it first"):
            second.init(tmp_path)
    finally:
        first.close()
    second.init(tmp_path)  # free once the first instance is closed
    second.close()
