"""Every persistent store gets its transactional layer where it is built, and keeps its
changelog flowing.

Each wrapper chain the DSL builds (timestamped views, caches) must still hand every write to
the changelog with the layer under it; and only committed writes may reach RocksDB. The runtime
and the test driver build stores with the same function, so both run this stack.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.processor.stores import StoreStack, create_store_stack
from fluvial.state.caching import ThreadCache
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


def build(chain: str) -> StoreStack:
    return create_store_stack(CHAINS[chain], ROCKSDB, ThreadCache(1 << 20))


@pytest.mark.parametrize("chain", list(CHAINS))
def test_writes_reach_the_changelog_and_only_commits_reach_disk(chain: str, tmp_path: Path) -> None:
    stack = build(chain)
    store = stack.store
    assert stack.transactional is not None, "a persistent store gets a transactional layer"
    assert stack.transactional.inner is stack.bottom
    changelog = []
    stack.set_changelog_listener(changelog.append)
    store.init(tmp_path)

    def write(key: bytes, value: bytes) -> None:
        if "window" in chain:
            store.put(key, value, 0, 5)
        else:
            store.put(key, value, 5)

    write(b"a", b"1")
    store.flush()  # a cache flush pushes into the layer, and so into the changelog
    assert [r.key[:1] for r in changelog] == [b"a"], "the write is on the changelog at once"
    stack.committed(7)
    write(b"b", b"2")
    store.flush()
    store.close()  # a crash: nothing uncommitted may survive

    reopened = build(chain).store
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
    stack = create_store_stack(CHAINS[chain], IN_MEMORY, ThreadCache(1 << 20))
    assert stack.transactional is None
    assert stack.raw is (stack.cache or stack.bottom)


@pytest.mark.parametrize("chain", ["kv", "timestamped", "window"])
def test_a_restored_store_keeps_its_offset_across_a_restart(chain: str, tmp_path: Path) -> None:
    """Restoration records the changelog offset it reached and flushes: that must be durable,
    though a commit's flushes have nothing to sync under the transactional layer."""
    from fluvial.state.base import ChangelogRecord, window_store_key

    key = window_store_key(b"a", 0, 0) if "window" in chain else b"a"
    value = b"\x00" * 8 + b"1" if chain == "timestamped" else b"1"
    stack = build(chain)
    stack.store.init(tmp_path)
    stack.store.restore([ChangelogRecord(key, value, 5)])
    stack.store.committed_offset = 11
    stack.store.flush()
    stack.bottom.close()  # no close of the layers above: only what was synced counts

    reopened = build(chain).store
    reopened.init(tmp_path)
    try:
        assert reopened.committed_offset == 11
        if "window" in chain:
            assert reopened.fetch(b"a", 0) is not None
        else:
            assert reopened.get(b"a") is not None
    finally:
        reopened.close()
