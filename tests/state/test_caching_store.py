"""Record caches over every backend: coalescing, old values, eviction, reads through the cache."""

from __future__ import annotations

import random

import pytest

from fluvial.state import (
    CachingKeyValueStore,
    CachingWindowStore,
    ChangelogRecord,
    ThreadCache,
)
from fluvial.state.caching import ENTRY_OVERHEAD


class Flushes(list):
    """A flush listener that records its calls."""

    def __call__(self, *args):
        self.append(args)


def entry_size(key: bytes, value: bytes) -> int:
    return len(key) + len(value) + ENTRY_OVERHEAD


def test_updates_of_one_key_coalesce_into_one_flush(make_kv, attach_changelog):
    inner = make_kv()
    log = attach_changelog(inner)
    flushes = Flushes()
    cache = CachingKeyValueStore(inner, max_bytes=10_000, flush_listener=flushes)
    for i in range(10):
        cache.put(b"k", f"v{i}".encode(), timestamp_ms=i)
    assert flushes == []
    assert log == [], "nothing reaches the changelog before the flush"
    assert inner.get(b"k") is None

    cache.flush()
    assert flushes == [(b"k", b"v9", None, 9)]
    assert log == [ChangelogRecord(b"k", b"v9", 9)]
    assert inner.get(b"k") == b"v9"


def test_old_value_is_what_downstream_last_saw(make_kv):
    inner = make_kv()
    inner.put(b"k", b"before")
    flushes = Flushes()
    cache = CachingKeyValueStore(inner, max_bytes=10_000, flush_listener=flushes)
    cache.put(b"k", b"x", 1)
    cache.put(b"k", b"y", 2)
    cache.flush()
    cache.put(b"k", b"z", 3)
    cache.delete(b"k", timestamp_ms=4)
    cache.flush()
    assert flushes == [(b"k", b"y", b"before", 2), (b"k", None, b"y", 4)]
    assert inner.get(b"k") is None


def test_a_listener_without_old_values_gets_none_and_costs_no_read(make_kv, monkeypatch):
    """Where nothing downstream reads old values (an aggregation followed by to_stream), a
    flushed update must not read the inner store for one; a deletion still reads it, so that
    only the removal of a row the store held goes downstream."""
    inner = make_kv()
    inner.put(b"k", b"before")
    inner.put(b"gone", b"held")
    flushes = Flushes()
    cache = CachingKeyValueStore(inner, max_bytes=10_000)
    cache.set_flush_listener(flushes, send_old_values=False)
    cache.put(b"k", b"x", 1)
    cache.put(b"gone", None, 2)
    cache.put(b"new", b"1", 3)
    cache.put(b"new", None, 4)
    reads = []
    get = inner.get
    monkeypatch.setattr(inner, "get", lambda key: reads.append(key) or get(key))
    cache.flush()
    assert flushes == [(b"k", b"x", None, 1), (b"gone", None, None, 2)]
    assert reads == [b"gone", b"new"]
    monkeypatch.undo()
    assert (inner.get(b"k"), inner.get(b"gone"), inner.get(b"new")) == (b"x", None, None)


def test_flush_order_follows_the_latest_update(make_kv):
    flushes = Flushes()
    cache = CachingKeyValueStore(make_kv(), max_bytes=10_000, flush_listener=flushes)
    cache.put(b"a", b"1")
    cache.put(b"b", b"1")
    cache.put(b"a", b"2")
    cache.flush()
    assert [f[0] for f in flushes] == [b"b", b"a"]


def test_a_key_created_and_deleted_between_flushes_emits_nothing(make_kv):
    flushes = Flushes()
    cache = CachingKeyValueStore(make_kv(), max_bytes=10_000, flush_listener=flushes)
    cache.put(b"k", b"1")
    cache.put(b"k", None)
    cache.flush()
    assert flushes == []


def test_reads_see_cached_values(make_kv):
    inner = make_kv()
    inner.put(b"a", b"stored-a")
    inner.put(b"b", b"stored-b")
    inner.put(b"d", b"stored-d")
    cache = CachingKeyValueStore(inner, max_bytes=10_000)
    cache.put(b"b", b"cached-b")
    cache.put(b"c", b"cached-c")
    cache.delete(b"d")
    cache.put(b"\xff", b"cached-ff")

    assert cache.get(b"a") == b"stored-a"
    assert cache.get(b"b") == b"cached-b"
    assert cache.get(b"d") is None
    assert list(cache.all()) == [
        (b"a", b"stored-a"),
        (b"b", b"cached-b"),
        (b"c", b"cached-c"),
        (b"\xff", b"cached-ff"),
    ]
    assert list(cache.range(b"b", b"d")) == [(b"b", b"cached-b"), (b"c", b"cached-c")]
    if not inner.persistent:  # RocksDB only estimates
        assert cache.approximate_num_entries() == 4
    assert inner.get(b"b") == b"stored-b", "the inner store is untouched until flush"


def test_ranges_between_writes_evictions_and_flushes_match_a_plain_dict(make_kv):
    """Ranges see exactly the live keys, in byte order, whatever happened to the cache's keys
    since the last range: new keys, tombstones, evictions (a small budget) and flushes."""
    rng = random.Random(11)
    cache = CachingKeyValueStore(make_kv(), max_bytes=40 * entry_size(b"k000", b"v0000"))
    model: dict[bytes, bytes] = {}
    for step in range(4000):
        key = f"k{rng.randrange(200):03d}".encode()
        roll = rng.random()
        if roll < 0.55:
            value = f"v{step:04d}".encode()
            cache.put(key, value)
            model[key] = value
        elif roll < 0.7:
            cache.put(key, None)
            model.pop(key, None)
        elif roll < 0.75:
            cache.flush()
        else:
            lo, hi = sorted(f"k{rng.randrange(200):03d}".encode() for _ in range(2))
            expected = sorted((k, v) for k, v in model.items() if lo <= k <= hi)
            assert list(cache.range(lo, hi)) == expected, f"step {step}"
    assert list(cache.range(None, None)) == sorted(model.items())


def test_eviction_over_max_bytes_flushes_the_least_recently_used(make_kv):
    inner = make_kv()
    flushes = Flushes()
    budget = 2 * entry_size(b"k1", b"v1")
    cache = CachingKeyValueStore(inner, max_bytes=budget, flush_listener=flushes)
    cache.put(b"k1", b"v1", 1)
    cache.put(b"k2", b"v2", 2)
    assert flushes == []
    assert cache.get(b"k1") == b"v1"  # k1 is now more recently used than k2
    cache.put(b"k3", b"v3", 3)
    assert flushes == [(b"k2", b"v2", None, 2)]
    assert inner.get(b"k2") == b"v2"
    assert inner.get(b"k1") is None
    assert cache.thread_cache.size_bytes <= budget
    assert cache.get(b"k2") == b"v2", "an evicted entry is read from the inner store"


def test_zero_budget_forwards_every_write(make_kv):
    flushes = Flushes()
    cache = CachingKeyValueStore(make_kv(), max_bytes=0, flush_listener=flushes)
    cache.put(b"k", b"1", 1)
    cache.put(b"k", b"2", 2)
    assert flushes == [(b"k", b"1", None, 1), (b"k", b"2", b"1", 2)]


def test_caches_can_share_one_budget(make_kv):
    shared = ThreadCache(max_bytes=2 * entry_size(b"k", b"v"))
    first_flushes, second_flushes = Flushes(), Flushes()
    first = CachingKeyValueStore(make_kv("first"), flush_listener=first_flushes, cache=shared)
    second = CachingKeyValueStore(make_kv("second"), flush_listener=second_flushes, cache=shared)
    first.put(b"k", b"v")
    second.put(b"k", b"v")
    second.put(b"j", b"v")  # over budget: the globally oldest entry (in `first`) goes
    assert first_flushes == [(b"k", b"v", None, 0)]
    assert second_flushes == []


def test_discard_drops_uncommitted_writes(make_kv, attach_changelog):
    inner = make_kv()
    log = attach_changelog(inner)
    flushes = Flushes()
    cache = CachingKeyValueStore(inner, max_bytes=10_000, flush_listener=flushes)
    cache.put(b"k", b"uncommitted")
    cache.discard()
    cache.flush()
    assert cache.get(b"k") is None
    assert flushes == [] and log == []
    assert cache.thread_cache.size_bytes == 0


def test_close_flushes_and_committed_offset_goes_to_the_inner_store(make_kv, state_dir):
    inner = make_kv()
    cache = CachingKeyValueStore(inner, max_bytes=10_000)
    cache.committed_offset = 5
    assert inner.committed_offset == 5
    cache.put(b"k", b"v")
    cache.close()
    assert not cache.is_open
    cache.init(state_dir)
    assert inner.get(b"k") == b"v"
    assert cache.committed_offset == 5


def test_restore_goes_to_the_inner_store(make_kv):
    inner = make_kv()
    cache = CachingKeyValueStore(inner, max_bytes=10_000)
    inner.put(b"k", b"old")
    assert cache.get(b"k") == b"old"  # now cached clean
    cache.restore([ChangelogRecord(b"k", b"new", 0)])
    assert cache.get(b"k") == b"new"


# -- window caches ---------------------------------------------------------------------------


def test_window_updates_coalesce_with_old_values(make_window, attach_changelog):
    inner = make_window(retention_ms=10_000)
    log = attach_changelog(inner)
    flushes = Flushes()
    cache = CachingWindowStore(inner, max_bytes=10_000, flush_listener=flushes)
    for count in range(1, 6):
        cache.put(b"k", str(count).encode(), 100, timestamp_ms=100 + count)
    cache.put(b"k", b"other window", 200, timestamp_ms=201)
    assert log == []
    cache.flush()
    assert flushes == [(b"k", 100, b"5", None, 105), (b"k", 200, b"other window", None, 201)]
    assert len(log) == 2
    cache.put(b"k", b"6", 100, timestamp_ms=106)
    cache.flush()
    assert flushes[-1] == (b"k", 100, b"6", b"5", 106)


def test_a_window_listener_without_old_values_gets_none_and_costs_no_read(make_window, monkeypatch):
    inner = make_window(retention_ms=10_000)
    inner.put(b"k", b"5", 100)
    inner.put(b"gone", b"held", 100)
    flushes = Flushes()
    cache = CachingWindowStore(inner, max_bytes=10_000)
    cache.set_flush_listener(flushes, send_old_values=False)
    cache.put(b"k", b"6", 100, timestamp_ms=106)
    cache.put(b"gone", None, 100, timestamp_ms=107)
    cache.put(b"new", b"1", 100, timestamp_ms=108)
    cache.put(b"new", None, 100, timestamp_ms=109)
    reads = []
    fetch = inner.fetch
    monkeypatch.setattr(inner, "fetch", lambda key, start: reads.append(key) or fetch(key, start))
    cache.flush()
    assert flushes == [(b"k", 100, b"6", None, 106), (b"gone", 100, None, None, 107)]
    assert reads == [b"gone", b"new"]
    monkeypatch.undo()
    assert [inner.fetch(k, 100) for k in (b"k", b"gone", b"new")] == [b"6", None, None]


def test_window_reads_see_cached_values(make_window):
    inner = make_window(retention_ms=10_000)
    inner.put(b"k", b"stored100", 100)
    inner.put(b"k", b"stored300", 300)
    inner.put(b"j", b"stored-j", 200)
    cache = CachingWindowStore(inner, max_bytes=10_000)
    cache.put(b"k", b"cached200", 200)
    cache.put(b"k", b"cached300", 300)
    cache.put(b"j", None, 200)
    assert cache.fetch(b"k", 300) == b"cached300"
    assert cache.fetch(b"k", 100) == b"stored100"
    assert list(cache.fetch_range(b"k", 0, 1000)) == [
        (100, b"stored100"),
        (200, b"cached200"),
        (300, b"cached300"),
    ]
    assert list(cache.fetch_all(0, 1000)) == [
        (b"k", 100, b"stored100"),
        (b"k", 200, b"cached200"),
        (b"k", 300, b"cached300"),
    ]


def test_window_cache_eviction_and_expiry(make_window):
    inner = make_window(retention_ms=1000)
    flushes = Flushes()
    size = len(b"k") + 8 + len(b"v") + ENTRY_OVERHEAD
    cache = CachingWindowStore(inner, max_bytes=2 * size, flush_listener=flushes)
    cache.put(b"k", b"v", 0, 0)
    cache.put(b"k", b"v", 100, 100)
    cache.put(b"k", b"v", 200, 200)
    assert flushes == [(b"k", 0, b"v", None, 0)]
    cache.put(b"k", b"w", 5000, 5000)  # expires windows 100 and 200 while they are cached
    cache.flush()
    # Expired windows still forward their last revision (their final result), but are not stored.
    assert [f[1] for f in flushes] == [0, 100, 200, 5000]
    assert list(cache.all()) == [(b"k", 5000, b"w")]
    assert list(inner.all()) == [(b"k", 5000, b"w")]


def test_window_cache_refuses_duplicate_stores(make_window):
    with pytest.raises(ValueError, match="retains duplicates"):
        CachingWindowStore(make_window(retain_duplicates=True), max_bytes=100)


def test_asking_whether_a_store_is_a_cache_changes_no_other_answer(make_kv, make_window):
    """``isinstance`` against a caching or timestamped store class answers for that class alone.

    The compiled classes of these layers once shared their base's ABC caches: a "no, not a
    cache" about a transactional store was cached as "not a KeyValueStore", and a "yes" about
    any key-value store as "a CachingKeyValueStore", so the runtime took a transactional store
    for a cache (and a cache for no store at all).
    """
    from fluvial.state import KeyValueStore, StateStore, TimestampedKeyValueStore, WindowStore
    from fluvial.state.caching_session import CachingSessionStore
    from fluvial.state.session import InMemorySessionStore, SessionStore
    from fluvial.state.transactional import TransactionalKeyValueStore
    from fluvial.state.transactional_windowed import TransactionalSessionStore

    kv, window = make_kv(), make_window()
    session = TransactionalSessionStore(InMemorySessionStore("sess", 1000))
    transactional = TransactionalKeyValueStore(make_kv("tkv"))
    cached = CachingKeyValueStore(make_kv("ckv"))
    caches = (CachingKeyValueStore, CachingWindowStore, CachingSessionStore)
    for _ in range(2):  # the second round reads what the first one cached
        for store in (kv, window, session, transactional):
            for cache_class in (*caches, TimestampedKeyValueStore):
                assert not isinstance(store, cache_class), (store, cache_class)
        assert all(isinstance(s, StateStore) for s in (kv, window, session, transactional, cached))
        assert isinstance(kv, KeyValueStore) and isinstance(transactional, KeyValueStore)
        assert isinstance(window, WindowStore) and isinstance(session, SessionStore)
        assert isinstance(cached, CachingKeyValueStore) and isinstance(cached, KeyValueStore)
        assert not isinstance(cached, CachingWindowStore | SessionStore | WindowStore)
