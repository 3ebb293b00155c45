"""Every persistent store gets its transactional layer where it is built, and keeps its
changelog flowing.

Each wrapper chain the DSL builds (timestamped views, caches) must still hand every write to
the changelog with the layer under it; and only committed writes may reach RocksDB. The runtime
and the test driver build stores with the same function, so both run this stack.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.processor.stores import create_store
from fluvial.state.caching import ThreadCache
from fluvial.state.transactional import find_transactional
from fluvial.topology.nodes import (
    IN_MEMORY,
    KEY_VALUE,
    ROCKSDB,
    TIMESTAMPED_KEY_VALUE,
    WINDOW,
    StoreSpec,
)

CHAINS = {
    "kv": StoreSpec(name="s", kind=KEY_VALUE, caching_enabled=False),
    "timestamped": StoreSpec(name="s", kind=TIMESTAMPED_KEY_VALUE, caching_enabled=False),
    "cached": StoreSpec(name="s", kind=KEY_VALUE, caching_enabled=True),
    "cached-timestamped": StoreSpec(name="s", kind=TIMESTAMPED_KEY_VALUE, caching_enabled=True),
    "window": StoreSpec(
        name="s", kind=WINDOW, retention_ms=60_000, window_size_ms=1_000, caching_enabled=False
    ),
    "cached-window": StoreSpec(
        name="s", kind=WINDOW, retention_ms=60_000, window_size_ms=1_000, caching_enabled=True
    ),
}


def build(chain: str):  # noqa: ANN201
    return create_store(CHAINS[chain], ROCKSDB, ThreadCache(1 << 20))


@pytest.mark.parametrize("chain", list(CHAINS))
def test_writes_reach_the_changelog_and_only_commits_reach_disk(chain: str, tmp_path: Path) -> None:
    store = build(chain)
    layer = find_transactional(store)
    assert layer is not None, "a persistent store gets a transactional layer"
    changelog = []
    store.set_change_listener(changelog.append)
    store.init(tmp_path)

    def write(key: bytes, value: bytes) -> None:
        if "window" in chain:
            store.put(key, value, 0, 5)
        else:
            store.put(key, value, 5)

    write(b"a", b"1")
    store.flush()  # a cache flush pushes into the layer, and so into the changelog
    assert [r.key[:1] for r in changelog] == [b"a"], "the write is on the changelog at once"
    layer.commit(7)
    write(b"b", b"2")
    store.flush()
    store.close()  # a crash: nothing uncommitted may survive

    reopened = build(chain)
    reopened.init(tmp_path)
    try:
        if "window" in chain:
            assert reopened.fetch(b"a", 0) is not None and reopened.fetch(b"b", 0) is None
        else:
            assert reopened.get(b"a") is not None and reopened.get(b"b") is None
        assert reopened.committed_offset == 7
    finally:
        reopened.close()


@pytest.mark.parametrize("chain", list(CHAINS))
def test_in_memory_stores_have_no_transactional_layer(chain: str) -> None:
    assert find_transactional(create_store(CHAINS[chain], IN_MEMORY, ThreadCache(1 << 20))) is None
