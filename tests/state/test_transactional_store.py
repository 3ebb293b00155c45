"""Transactional stores (KIP-892 style) on every backend: buffer, commit, abort, crash."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fluvial.state import (
    CachingKeyValueStore,
    ChangelogRecord,
    RocksDBKeyValueStore,
    TimestampedKeyValueStore,
    TransactionalKeyValueStore,
    TransactionalSessionStore,
    TransactionalVersionedKeyValueStore,
    TransactionalWindowStore,
    VersionedRecord,
    parse_window_store_key,
)

# -- key-value ---------------------------------------------------------------------------------


def test_abort_drops_uncommitted_writes(make_kv, attach_changelog):
    inner = make_kv()
    inner.put(b"kept", b"0")
    store = TransactionalKeyValueStore(inner)
    log = attach_changelog(store)
    store.put(b"a", b"1", timestamp_ms=5)
    store.delete(b"kept")
    assert store.get(b"a") == b"1" and store.get(b"kept") is None, "reads see the buffer"
    assert inner.get(b"a") is None and inner.get(b"kept") == b"0", "the store does not"
    assert log == [], "changelog records go out when the transaction's writes are complete"
    store.log_changes()
    assert log == [ChangelogRecord(b"a", b"1", 5), ChangelogRecord(b"kept", None, 0)]
    store.abort()
    assert store.get(b"a") is None
    assert list(store.all()) == [(b"kept", b"0")]
    assert store.uncommitted_count == 0


def test_commit_applies_the_buffer_with_the_offset(make_kv):
    inner = make_kv()
    store = TransactionalKeyValueStore(inner)
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    store.put(b"a", b"3")
    store.commit(41)
    assert inner.committed_offset == 41 == store.committed_offset
    assert list(inner.all()) == [(b"a", b"3"), (b"b", b"2")]
    assert store.uncommitted_count == 0 and store.uncommitted_bytes == 0
    store.delete(b"a")
    store.commit(42)
    assert list(inner.all()) == [(b"b", b"2")]
    assert inner.committed_offset == 42


def test_flush_and_close_never_apply_uncommitted_writes(make_kv, state_dir):
    inner = make_kv("tx")
    store = TransactionalKeyValueStore(inner)
    store.put(b"a", b"committed")
    store.commit(1)
    store.put(b"a", b"uncommitted")
    store.put(b"b", b"uncommitted")
    store.flush()
    assert inner.get(b"a") == b"committed"
    with pytest.raises(RuntimeError, match="uncommitted writes"):
        store.committed_offset = 2
    store.close()  # like a crash: no commit
    store.init(state_dir)
    assert list(store.all()) == [(b"a", b"committed")]
    assert store.committed_offset == 1


def test_range_merges_buffer_and_store_like_a_plain_store(make_kv):
    plain = make_kv("plain")
    store = TransactionalKeyValueStore(make_kv("tx"))
    rng = random.Random(3)
    for step in range(600):
        key = f"k{rng.randrange(40):02d}".encode()
        value = None if rng.random() < 0.3 else f"v{step}".encode()
        plain.put(key, value)
        store.put(key, value)
        if step % 97 == 0:
            store.commit(step)
        if step % 25 == 0:
            lo, hi = sorted([f"k{rng.randrange(45):02d}".encode() for _ in range(2)])
            assert list(store.range(lo, hi)) == list(plain.range(lo, hi))
            assert list(store.range(None, hi)) == list(plain.range(None, hi))
            assert list(store.all()) == list(plain.all())
    assert list(store.all()) == list(plain.all())


def test_buffer_asks_for_an_early_commit_when_full(make_kv):
    store = TransactionalKeyValueStore(make_kv(), max_uncommitted_bytes=1000)
    while not store.commit_needed:
        store.put(f"key{store.uncommitted_count}".encode(), b"x" * 50)
    assert 1000 <= store.uncommitted_bytes < 1200
    store.commit(0)
    assert not store.commit_needed


def test_restore_goes_to_the_store_and_is_refused_mid_transaction(make_kv):
    store = TransactionalKeyValueStore(make_kv())
    store.restore([ChangelogRecord(b"r", b"1", 0)])
    assert store.inner.get(b"r") == b"1"
    store.put(b"x", b"2")
    with pytest.raises(RuntimeError, match="uncommitted writes"):
        store.restore([ChangelogRecord(b"r", b"3", 0)])


def test_composes_under_timestamped_and_caching_layers(make_kv, attach_changelog):
    inner = make_kv()
    tx = TransactionalKeyValueStore(inner)
    store = TimestampedKeyValueStore(CachingKeyValueStore(tx))
    log = attach_changelog(store)
    store.put(b"a", b"v", 7)
    store.flush()  # the cache flushes into the transaction, not into the store
    assert inner.get(b"a") is None
    assert log == [ChangelogRecord(b"a", b"v", 7)], "plain value, record timestamp"
    tx.commit(3)
    assert store.get(b"a") == (b"v", 7)
    assert inner.committed_offset == 3


def test_the_changelog_gets_each_keys_last_write_per_transaction_and_rebuilds_what_commit_applied(
    make_kv, attach_changelog
):
    """A key updated many times in one transaction costs one changelog record, its last write;
    replaying the changelog rebuilds exactly the store that the commits produced."""
    inner = make_kv("tx")
    store = TransactionalKeyValueStore(inner)
    log = attach_changelog(store)
    rng = random.Random(4)
    for transaction in range(5):
        sent_before = len(log)
        for step in range(200):
            key = f"k{rng.randrange(6)}".encode()
            if rng.random() < 0.1:
                store.delete(key)
            else:
                store.put(key, f"{transaction}.{step}".encode(), timestamp_ms=step)
        store.flush()  # the commit cycle's flush: every write of the transaction is made
        sent = log[sent_before:]
        assert len(sent) == len({r.key for r in sent}) <= 6, "one record per key written"
        assert sent == [ChangelogRecord(k, store.get(k), r.timestamp_ms) for r in sent
                        for k in [r.key]], "each the key's last write"  # fmt: skip
        store.commit(len(log))
    replayed = make_kv("replayed")
    replayed.restore(log)
    assert list(replayed.all()) == list(inner.all())


def test_writes_after_a_flush_reach_the_changelog_and_commit_refuses_unsent_ones(
    make_kv, attach_changelog
):
    store = TransactionalKeyValueStore(make_kv())
    log = attach_changelog(store)
    store.put(b"a", b"1")
    store.flush()
    store.put(b"a", b"2")  # e.g. a later store's cache flush writing into this one
    with pytest.raises(RuntimeError, match="never sent"):
        store.commit(1)  # applying it would keep a write the changelog never got
    store.log_changes()
    assert log == [ChangelogRecord(b"a", b"1", 0), ChangelogRecord(b"a", b"2", 0)]
    store.commit(2)
    assert store.inner.get(b"a") == b"2"


def test_versions_of_one_key_are_logged_apart(make_versioned, attach_changelog):
    store = TransactionalVersionedKeyValueStore(make_versioned(history_retention_ms=1000))
    log = attach_changelog(store)
    store.put(b"k", b"a", 10)
    store.put(b"k", b"b", 20)
    store.put(b"k", b"c", 10)  # replaces the version at 10
    store.flush()
    assert log == [ChangelogRecord(b"k", b"b", 20), ChangelogRecord(b"k", b"c", 10)]


CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys
    from fluvial.state import RocksDBKeyValueStore, TransactionalKeyValueStore
    store = TransactionalKeyValueStore(RocksDBKeyValueStore("kv"))
    store.init(sys.argv[1])
    for i in range(100):
        store.put(f"k{i}".encode(), b"committed")
    store.commit(99)
    for i in range(50, 200):
        store.put(f"k{i}".encode(), b"uncommitted")
    store.put(b"k0", None)
    os._exit(1)  # a crash: no commit, no close
    """
)


def test_crash_before_commit_leaves_only_committed_state(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stderr
    store = RocksDBKeyValueStore("kv")
    store.init(tmp_path)
    try:
        assert store.committed_offset == 99
        entries = dict(store.all())
        assert len(entries) == 100
        assert set(entries.values()) == {b"committed"}
    finally:
        store.close()


# -- window ------------------------------------------------------------------------------------


@pytest.mark.parametrize("retain_duplicates", [False, True])
def test_window_transaction_reads_like_a_plain_store(make_window, retain_duplicates):
    plain = make_window(retention_ms=1000, retain_duplicates=retain_duplicates, name="plain")
    inner = make_window(retention_ms=1000, retain_duplicates=retain_duplicates, name="tx")
    store = TransactionalWindowStore(inner)
    rng = random.Random(5)
    for step in range(400):
        key = f"k{rng.randrange(4)}".encode()
        start = max(0, step * 10 - rng.randrange(1500)) // 50 * 50
        value = None if rng.random() < 0.2 else f"v{step}".encode()
        plain.put(key, value, start)
        store.put(key, value, start)
        if step % 61 == 0:
            store.commit(step)
        if step % 20 == 0:
            assert list(store.all()) == list(plain.all())
            assert list(store.fetch_range(key, 0, 10_000)) == list(
                plain.fetch_range(key, 0, 10_000)
            )
            assert store.fetch(key, start) == plain.fetch(key, start)
            assert store.observed_stream_time == plain.observed_stream_time
    store.commit(400)
    assert list(inner.all()) == list(plain.all())
    assert inner.observed_stream_time == plain.observed_stream_time


def test_window_abort_rewinds_stream_time_and_sequence(make_window, attach_changelog):
    inner = make_window(retention_ms=1000, retain_duplicates=True)
    store = TransactionalWindowStore(inner)
    log = attach_changelog(store)
    store.put(b"k", b"a", 100)
    store.log_changes()
    store.commit(0)
    store.put(b"k", b"b", 5000)  # would expire start 100
    assert list(store.fetch_range(b"k", 0, 10_000)) == [(5000, b"b")]
    store.abort()
    assert store.observed_stream_time == 100
    assert list(store.fetch_range(b"k", 0, 10_000)) == [(100, b"a")]
    store.put(b"k", b"c", 100)
    store.log_changes()
    assert [r.value for r in log] == [b"a", b"c"], "an aborted write never reaches the changelog"
    assert parse_window_store_key(log[-1].key)[2] == 2, "the aborted sequence number is reused"
    store.commit(1)
    assert list(inner.fetch_range(b"k", 0, 1000)) == [(100, b"a"), (100, b"c")]


# -- session -----------------------------------------------------------------------------------


def test_session_transaction_reads_like_a_plain_store(make_session):
    plain = make_session(retention_ms=1000, name="plain")
    inner = make_session(retention_ms=1000, name="tx")
    store = TransactionalSessionStore(inner)
    rng = random.Random(9)
    for step in range(400):
        key = f"k{rng.randrange(4)}".encode()
        start = max(0, step * 10 - rng.randrange(1500)) // 20 * 20
        end = start + rng.randrange(3) * 20
        if rng.random() < 0.3:
            for entry in list(plain.find_sessions(key, start - 30, end + 30)):
                plain.remove(key, entry.start_ms, entry.end_ms)
                store.remove(key, entry.start_ms, entry.end_ms)
                # Removed in this transaction, maybe committed before: gone either way.
                assert store.fetch_session(key, entry.start_ms, entry.end_ms) is None
        plain.put(key, start, end, f"v{step}".encode())
        store.put(key, start, end, f"v{step}".encode())
        if step % 53 == 0:
            store.commit(step)
        if step % 20 == 0:
            assert list(store.all()) == list(plain.all())
            assert list(store.find_sessions(key, start - 100, end + 100)) == list(
                plain.find_sessions(key, start - 100, end + 100)
            )
            assert list(store.fetch_range(b"k1", b"k2")) == list(plain.fetch_range(b"k1", b"k2"))
            assert store.fetch_session(key, start, end) == plain.fetch_session(key, start, end)
    store.commit(400)
    assert list(inner.all()) == list(plain.all())


def test_session_abort_and_commit(make_session):
    inner = make_session(retention_ms=1000)
    store = TransactionalSessionStore(inner)
    store.put(b"k", 0, 10, b"a")
    store.abort()
    assert list(store.all()) == [] and store.observed_stream_time == inner.observed_stream_time
    store.put(b"k", 0, 10, b"a")
    store.commit(5)
    store.remove(b"k", 0, 10)
    assert list(store.fetch(b"k")) == []
    assert inner.fetch_session(b"k", 0, 10) == b"a"
    store.commit(6)
    assert list(inner.all()) == [] and inner.committed_offset == 6


# -- versioned ---------------------------------------------------------------------------------


def test_versioned_transaction_reads_like_a_plain_store(make_versioned):
    plain = make_versioned(history_retention_ms=300, name="plain")
    inner = make_versioned(history_retention_ms=300, name="tx")
    store = TransactionalVersionedKeyValueStore(inner)
    rng = random.Random(13)
    for step in range(400):
        key = f"k{rng.randrange(4)}".encode()
        ts = max(0, step * 5 - rng.randrange(400))
        value = None if rng.random() < 0.2 else f"v{step}".encode()
        assert store.put(key, value, ts) == plain.put(key, value, ts)
        if step % 47 == 0:
            store.commit(step)
        if step % 10 == 0:
            for as_of in range(ts - 350, ts + 50, 13):
                assert store.get(key, max(as_of, 0)) == plain.get(key, max(as_of, 0))
            assert store.get(key) == plain.get(key)
    store.commit(400)
    for k in range(4):
        key = f"k{k}".encode()
        for as_of in range(1500, 2100, 7):
            assert inner.get(key, as_of) == plain.get(key, as_of)


def test_versioned_abort_forgets_versions(make_versioned):
    inner = make_versioned(history_retention_ms=1000)
    store = TransactionalVersionedKeyValueStore(inner)
    store.put(b"k", b"a", 100)
    store.commit(0)
    assert store.put(b"k", b"b", 50) == 100
    assert store.get(b"k", 60) == VersionedRecord(b"b", 50, 100)
    store.abort()
    assert store.get(b"k", 60) is None
    assert store.get(b"k") == VersionedRecord(b"a", 100, None)
