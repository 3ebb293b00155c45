"""The session record cache on every backend: coalescing, merges, reads, eviction, discard."""

from __future__ import annotations

import random

from fluvial.state import CachingSessionStore, ChangelogRecord, SessionEntry, session_store_key


class Flushes(list):
    def __call__(self, key, start, end, new, old, timestamp_ms):
        self.append((key, start, end, new, old, timestamp_ms))


def test_rewrites_of_a_session_coalesce_until_flush(make_session, attach_changelog):
    inner = make_session(retention_ms=10_000)
    flushes = Flushes()
    cache = CachingSessionStore(inner, flush_listener=flushes)
    log = attach_changelog(cache)
    for count in range(1, 6):
        cache.put(b"k", 0, 10, str(count).encode(), timestamp_ms=10)
    assert flushes == [] and log == [] and inner.fetch_session(b"k", 0, 10) is None
    assert cache.fetch_session(b"k", 0, 10) == b"5"
    cache.flush()
    assert flushes == [(b"k", 0, 10, b"5", None, 10)]
    assert log == [ChangelogRecord(session_store_key(b"k", 0, 10), b"5", 10)]


def test_a_merge_flushes_a_tombstone_for_the_replaced_session(make_session):
    inner = make_session(retention_ms=10_000)
    flushes = Flushes()
    cache = CachingSessionStore(inner, flush_listener=flushes)
    cache.put(b"k", 0, 10, b"a")
    cache.put(b"k", 30, 40, b"b")
    cache.flush()
    flushes.clear()
    # A record at 20 with gap 10 bridges both sessions.
    for entry in cache.find_sessions(b"k", 10, 30):
        cache.remove(b"k", entry.start_ms, entry.end_ms)
    cache.put(b"k", 0, 40, b"ab")
    cache.put(b"k", 100, 100, b"short-lived")
    cache.remove(b"k", 100, 100)
    cache.flush()
    assert sorted(flushes) == [
        (b"k", 0, 10, None, b"a", 10),
        (b"k", 0, 40, b"ab", None, 40),
        (b"k", 30, 40, None, b"b", 40),
    ], "a session created and removed between flushes never goes downstream"
    assert list(inner.fetch(b"k")) == [SessionEntry(b"k", 0, 40, b"ab")]


def test_reads_merge_cache_and_store_like_a_plain_store(make_session):
    plain = make_session(retention_ms=1000, name="plain")
    cache = CachingSessionStore(make_session(retention_ms=1000, name="cached"), max_bytes=600)
    rng = random.Random(21)
    for step in range(300):
        key = f"k{rng.randrange(4)}".encode()
        start = max(0, step * 10 - rng.randrange(1500)) // 20 * 20
        end = start + rng.randrange(3) * 20
        for entry in list(plain.find_sessions(key, start - 20, end + 20)):
            plain.remove(key, entry.start_ms, entry.end_ms)
            cache.remove(key, entry.start_ms, entry.end_ms)
        plain.put(key, start, end, f"v{step}".encode())
        cache.put(key, start, end, f"v{step}".encode())
        if step % 37 == 0:
            cache.flush()
        if step % 10 == 0:
            assert list(cache.all()) == list(plain.all())
            assert list(cache.find_sessions(key, start - 200, end)) == list(
                plain.find_sessions(key, start - 200, end)
            )
            assert list(cache.fetch_range(b"k1", b"k2")) == list(plain.fetch_range(b"k1", b"k2"))
    cache.flush()
    assert list(cache.inner.all()) == list(plain.all())


def test_discard_drops_unflushed_sessions(make_session):
    inner = make_session(retention_ms=10_000)
    cache = CachingSessionStore(inner)
    cache.put(b"k", 0, 10, b"committed")
    cache.flush()
    cache.put(b"k", 0, 10, b"aborted")
    cache.put(b"j", 5, 5, b"aborted")
    cache.discard()
    assert list(cache.all()) == [SessionEntry(b"k", 0, 10, b"committed")]
    assert cache.dirty_count() == 0
