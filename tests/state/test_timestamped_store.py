"""Timestamped key-value stores, over every backend."""

from __future__ import annotations

import pytest

from fluvial.state import (
    CachingKeyValueStore,
    ChangelogRecord,
    TimestampedKeyValueStore,
    from_timestamped_bytes,
    to_timestamped_bytes,
)


def test_get_returns_value_and_timestamp(make_kv):
    store = TimestampedKeyValueStore(make_kv())
    store.put(b"a", b"1", 100)
    store.put(b"a", b"2", 50)  # a table keeps the latest write, whatever its timestamp
    assert store.get(b"a") == (b"2", 50)
    assert store.get(b"missing") is None


def test_inner_store_holds_timestamp_prefixed_values(make_kv):
    inner = make_kv()
    store = TimestampedKeyValueStore(inner)
    store.put(b"a", b"xyz", 258)
    assert inner.get(b"a") == b"\x00\x00\x00\x00\x00\x00\x01\x02xyz"
    assert from_timestamped_bytes(inner.get(b"a")) == (b"xyz", 258)
    assert to_timestamped_bytes(b"", -1) == b"\xff" * 8


def test_changelog_has_plain_values_stamped_with_the_timestamp(make_kv, attach_changelog):
    store = TimestampedKeyValueStore(make_kv())
    log = attach_changelog(store)
    store.put(b"a", b"1", 100)
    store.delete(b"a", timestamp_ms=120)
    store.put(b"b", b"2", 130)
    assert log == [
        ChangelogRecord(b"a", b"1", 100),
        ChangelogRecord(b"a", None, 120),
        ChangelogRecord(b"b", b"2", 130),
    ]


def test_restore_from_plain_changelog_recovers_timestamps(make_kv, attach_changelog):
    original = TimestampedKeyValueStore(make_kv("original"))
    log = attach_changelog(original)
    original.put(b"a", b"1", 100)
    original.put(b"b", b"2", 200)
    original.put(b"a", b"3", 300)
    original.delete(b"b", 400)

    rebuilt = TimestampedKeyValueStore(make_kv("rebuilt"))
    echoed = attach_changelog(rebuilt)
    rebuilt.restore(log)
    assert list(rebuilt.all()) == [(b"a", (b"3", 300))]
    assert list(rebuilt.all()) == list(original.all())
    assert echoed == []


def test_range_and_put_if_absent(make_kv):
    store = TimestampedKeyValueStore(make_kv())
    store.put(b"a", b"1", 1)
    store.put(b"c", b"3", 3)
    assert store.put_if_absent(b"a", b"x", 9) == (b"1", 1)
    assert store.put_if_absent(b"b", b"2", 2) is None
    assert list(store.range(b"b", b"c")) == [(b"b", (b"2", 2)), (b"c", (b"3", 3))]
    assert store.approximate_num_entries() >= 1


def test_committed_offset_belongs_to_the_inner_store(make_kv):
    inner = make_kv()
    store = TimestampedKeyValueStore(inner)
    assert store.committed_offset is None
    store.committed_offset = 12
    assert inner.committed_offset == 12


def test_over_a_cache_flushes_split_values(make_kv, attach_changelog):
    store = TimestampedKeyValueStore(CachingKeyValueStore(make_kv(), max_bytes=10_000))
    log = attach_changelog(store)
    flushed = []
    store.set_flush_listener(lambda *args: flushed.append(args))
    store.put(b"a", b"1", 10)
    store.put(b"a", b"2", 20)
    assert store.get(b"a") == (b"2", 20)
    assert log == []
    store.flush()
    assert flushed == [(b"a", (b"2", 20), None, 20)]
    assert log == [ChangelogRecord(b"a", b"2", 20)]
    store.put(b"a", b"3", 30)
    store.flush()
    assert flushed[-1] == (b"a", (b"3", 30), (b"2", 20), 30)


def test_flush_listener_needs_a_cache(make_kv):
    with pytest.raises(TypeError, match="CachingKeyValueStore"):
        TimestampedKeyValueStore(make_kv()).set_flush_listener(lambda *args: None)
