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
from fluvial.state.base import ChangelogRecord
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


class Consumed:
    """A changelog record as the restore's consumer hands it to ``restore_batch``."""

    def __init__(self, record: ChangelogRecord) -> None:
        self.record = record

    def key(self) -> bytes:
        return self.record.key

    def value(self) -> bytes | None:
        return self.record.value

    def timestamp(self) -> tuple[int, int]:
        return (1, self.record.timestamp_ms)  # 1: CreateTime


@pytest.mark.parametrize("backend", [ROCKSDB, IN_MEMORY])
@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_batch_restore_rebuilds_what_the_changelog_recorded(
    chain: str, backend: str, tmp_path: Path
) -> None:
    """A store restored from its changelog in consumer batches holds what the written store
    held: values, timestamps of timestamped stores, overwrites and deletes; and the same as a
    restore of the same records one by one."""
    written = create_store_stack(CHAINS[chain], backend, ThreadCache(1 << 20))
    changelog: list[ChangelogRecord] = []
    written.set_changelog_listener(changelog.append)
    written.store.init(tmp_path / "written")
    for i in range(60):
        key, value, ts = f"k{i % 17:02d}".encode(), f"v{i}".encode() * (i % 5 + 1), 1000 + i
        if "window" in chain:
            written.store.put(key, None if i % 11 == 10 else value, (i % 3) * 1000, ts)
        elif i % 11 == 10:
            written.store.delete(key, ts)
        else:
            written.store.put(key, value, ts)
        if i % 20 == 19:
            written.store.flush()  # three rounds: later ones overwrite and delete earlier ones
    assert len({r.key for r in changelog}) < len(changelog), "overwrites are on the changelog"
    assert any(r.value is None for r in changelog), "deletes are on the changelog"

    def contents(restore: str) -> list:
        stack = create_store_stack(CHAINS[chain], backend, ThreadCache(1 << 20))
        stack.store.init(tmp_path / restore)
        for start in range(0, len(changelog), 7):  # batches of 7, as a consumer might return
            part = changelog[start : start + 7]
            if restore == "batch":
                stack.store.restore_batch([Consumed(r) for r in part])
            else:
                stack.store.restore(part)
        try:
            return list(stack.store.all())
        finally:
            stack.store.close()

    expected = list(written.store.all())
    written.store.close()
    assert expected, "the written store holds entries"
    assert contents("batch") == expected
    assert contents("records") == expected
