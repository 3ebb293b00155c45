"""One conformance suite, every backend: each store test runs on in-memory and on RocksDB.

In the manner of Ibis' backend suite, tests ask for a factory (``make_kv``, ``make_window``) and
never name a backend; the ``backend`` fixture parametrizes them. A test that needs what only one
backend does (surviving a restart) says so with ``requires_persistence``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fluvial.state import (
    ChangelogRecord,
    InMemoryKeyValueStore,
    InMemorySessionStore,
    InMemoryVersionedKeyValueStore,
    InMemoryWindowStore,
    KeyValueStore,
    RocksDBKeyValueStore,
    RocksDBSessionStore,
    RocksDBVersionedKeyValueStore,
    RocksDBWindowStore,
    SessionStore,
    StateStore,
    VersionedKeyValueStore,
    WindowStore,
)

BACKENDS = ["memory", "rocksdb"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def open_stores() -> list[StateStore]:
    """Stores made by the factories; closed after the test so RocksDB locks never leak."""
    stores: list[StateStore] = []
    yield stores  # type: ignore[misc]
    for store in stores:
        if store.is_open:
            store.close()


@pytest.fixture
def make_kv(
    backend: str, state_dir: Path, open_stores: list[StateStore]
) -> Callable[..., KeyValueStore]:
    """``make_kv(name="kv")``: a new, open key-value store of the current backend."""

    def make(name: str = "kv") -> KeyValueStore:
        store: KeyValueStore = (
            InMemoryKeyValueStore(name) if backend == "memory" else RocksDBKeyValueStore(name)
        )
        store.init(state_dir)
        open_stores.append(store)
        return store

    return make


@pytest.fixture
def make_window(
    backend: str, state_dir: Path, open_stores: list[StateStore]
) -> Callable[..., WindowStore]:
    """``make_window(retention_ms, window_size_ms, retain_duplicates=False, name="win")``."""

    def make(
        retention_ms: int = 1000,
        window_size_ms: int = 100,
        retain_duplicates: bool = False,
        name: str = "win",
    ) -> WindowStore:
        store: WindowStore
        if backend == "memory":
            store = InMemoryWindowStore(name, retention_ms, window_size_ms, retain_duplicates)
        else:
            # Small segments, so that tests see segments come and go.
            store = RocksDBWindowStore(
                name,
                retention_ms,
                window_size_ms,
                retain_duplicates,
                segment_interval_ms=max(retention_ms // 2, 1),
            )
        store.init(state_dir)
        open_stores.append(store)
        return store

    return make


@pytest.fixture
def make_session(
    backend: str, state_dir: Path, open_stores: list[StateStore]
) -> Callable[..., SessionStore]:
    """``make_session(retention_ms=1000, name="sess")``: a new, open session store."""

    def make(retention_ms: int = 1000, name: str = "sess") -> SessionStore:
        store: SessionStore
        if backend == "memory":
            store = InMemorySessionStore(name, retention_ms)
        else:
            # Small segments, so that tests see segments come and go.
            store = RocksDBSessionStore(
                name, retention_ms, segment_interval_ms=max(retention_ms // 2, 1)
            )
        store.init(state_dir)
        open_stores.append(store)
        return store

    return make


@pytest.fixture
def make_versioned(
    backend: str, state_dir: Path, open_stores: list[StateStore]
) -> Callable[..., VersionedKeyValueStore]:
    """``make_versioned(history_retention_ms=1000, name="ver")``: a new, open versioned store."""

    def make(history_retention_ms: int = 1000, name: str = "ver") -> VersionedKeyValueStore:
        store: VersionedKeyValueStore
        if backend == "memory":
            store = InMemoryVersionedKeyValueStore(name, history_retention_ms)
        else:
            store = RocksDBVersionedKeyValueStore(name, history_retention_ms)
        store.init(state_dir)
        open_stores.append(store)
        return store

    return make


@pytest.fixture
def requires_persistence(backend: str) -> None:
    if backend == "memory":
        pytest.skip("in-memory stores do not survive close; the changelog restores them")


@pytest.fixture
def attach_changelog() -> Callable[[StateStore], list[ChangelogRecord]]:
    """``attach_changelog(store)``: a list that receives every changelog record of ``store``."""

    def attach(store: StateStore) -> list[ChangelogRecord]:
        log: list[ChangelogRecord] = []
        store.set_change_listener(log.append)
        return log

    return attach
