"""The runtime's transactional layer keeps every store's changelog flowing.

Each wrapper chain the DSL builds (timestamped views, caches) must still hand every write to
the changelog once the layer sits under it; and only committed writes may reach RocksDB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.runtime.state import make_transactional
from fluvial.state.caching import CachingKeyValueStore, CachingWindowStore, ThreadCache
from fluvial.state.rocksdb import RocksDBKeyValueStore, RocksDBWindowStore
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.transactional import find_transactional


def chains():  # noqa: ANN201
    cache = ThreadCache(1 << 20)
    return {
        "kv": lambda: RocksDBKeyValueStore("s"),
        "timestamped": lambda: TimestampedKeyValueStore(RocksDBKeyValueStore("s")),
        "cached": lambda: CachingKeyValueStore(RocksDBKeyValueStore("s"), cache=cache),
        "cached-timestamped": lambda: TimestampedKeyValueStore(
            CachingKeyValueStore(RocksDBKeyValueStore("s"), cache=cache)
        ),
        "window": lambda: RocksDBWindowStore("s", 60_000, 1_000),
        "cached-window": lambda: CachingWindowStore(
            RocksDBWindowStore("s", 60_000, 1_000), cache=cache
        ),
    }


@pytest.mark.parametrize("chain", list(chains()))
def test_writes_reach_the_changelog_and_only_commits_reach_disk(chain: str, tmp_path: Path) -> None:
    store = make_transactional(chains()[chain]())
    layer = find_transactional(store)
    assert layer is not None, "a persistent store gets a transactional layer"
    changelog = []
    store.set_change_listener(changelog.append)
    store.init(tmp_path)

    def write(key: bytes, value: bytes) -> None:
        if "window" in chain:
            store.put(key, value, 0, 5)
        elif "timestamped" in chain:
            store.put(key, value, 5)
        else:
            store.put(key, value, 5)

    write(b"a", b"1")
    store.flush()  # a cache flush pushes into the layer, and so into the changelog
    assert [r.key[:1] for r in changelog] == [b"a"], "the write is on the changelog at once"
    layer.commit(7)
    write(b"b", b"2")
    store.flush()
    store.close()  # a crash: nothing uncommitted may survive

    reopened = make_transactional(chains()[chain]())
    reopened.init(tmp_path)
    try:
        if "window" in chain:
            assert reopened.fetch(b"a", 0) is not None and reopened.fetch(b"b", 0) is None
        else:
            assert reopened.get(b"a") is not None and reopened.get(b"b") is None
        assert reopened.committed_offset == 7
    finally:
        reopened.close()
