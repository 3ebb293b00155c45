"""Store suppliers: what a topology holds instead of a store.

A topology is a description, built once and run by many tasks; each task needs its own store
instance. A supplier carries the store's name and shape (which the runtime also needs to create
the changelog topic) and makes a fresh store on every :meth:`StoreSupplier.get`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from fluvial.config import to_millis
from fluvial.state.base import KeyValueStore, StateStore
from fluvial.state.memory import InMemoryKeyValueStore, InMemoryWindowStore
from fluvial.state.rocksdb import RocksDBKeyValueStore, RocksDBWindowStore
from fluvial.state.rocksdb_session import RocksDBSessionStore
from fluvial.state.rocksdb_versioned import RocksDBVersionedKeyValueStore
from fluvial.state.session import InMemorySessionStore
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.versioned import InMemoryVersionedKeyValueStore

StoreKind = Literal["key_value", "window", "session", "versioned"]


@dataclass(frozen=True)
class StoreSupplier:
    """Makes new instances of one named store.

    ``retention_ms`` is set for window and session stores; the changelog topic of such a store
    is ``compact,delete`` with retention ``retention_ms`` + 1 day. ``history_retention_ms`` is
    set for versioned stores.
    """

    name: str
    persistent: bool
    kind: StoreKind
    factory: Callable[[], StateStore] = field(repr=False, compare=False)
    timestamped: bool = False
    retention_ms: int | None = None
    window_size_ms: int | None = None
    retain_duplicates: bool = False
    history_retention_ms: int | None = None

    def get(self) -> StateStore:
        """A new, not yet initialised store."""
        return self.factory()


def key_value_store_supplier(
    name: str, persistent: bool = True, *, timestamped: bool = False
) -> StoreSupplier:
    """Supplier of key-value stores; ``timestamped`` gives :class:`TimestampedKeyValueStore`."""
    _check_name(name)

    def make() -> StateStore:
        inner: KeyValueStore = (
            RocksDBKeyValueStore(name) if persistent else InMemoryKeyValueStore(name)
        )
        return TimestampedKeyValueStore(inner) if timestamped else inner

    return StoreSupplier(name, persistent, "key_value", make, timestamped=timestamped)


def window_store_supplier(
    name: str,
    persistent: bool = True,
    *,
    retention_ms: int | timedelta,
    window_size_ms: int | timedelta,
    retain_duplicates: bool = False,
) -> StoreSupplier:
    """Supplier of window stores that keep windows for ``retention_ms`` of stream time."""
    _check_name(name)
    retention_ms = to_millis(retention_ms, "retention_ms")
    window_size_ms = to_millis(window_size_ms, "window_size_ms")

    def make() -> StateStore:
        if persistent:
            return RocksDBWindowStore(name, retention_ms, window_size_ms, retain_duplicates)
        return InMemoryWindowStore(name, retention_ms, window_size_ms, retain_duplicates)

    make()  # validates retention and size now, at topology build time, not in the first task
    return StoreSupplier(
        name,
        persistent,
        "window",
        make,
        retention_ms=retention_ms,
        window_size_ms=window_size_ms,
        retain_duplicates=retain_duplicates,
    )


def session_store_supplier(
    name: str, persistent: bool = True, *, retention_ms: int | timedelta
) -> StoreSupplier:
    """Supplier of session stores that keep sessions for ``retention_ms`` past their end.

    Retention must cover the inactivity gap plus the grace period, or sessions would expire
    before late records could still merge into them.
    """
    _check_name(name)
    retention = to_millis(retention_ms, "retention_ms")

    def make() -> StateStore:
        if persistent:
            return RocksDBSessionStore(name, retention)
        return InMemorySessionStore(name, retention)

    make()  # validates now, at topology build time
    return StoreSupplier(name, persistent, "session", make, retention_ms=retention)


def versioned_key_value_store_supplier(
    name: str, persistent: bool = True, *, history_retention_ms: int | timedelta
) -> StoreSupplier:
    """Supplier of versioned key-value stores answering as-of queries ``history_retention_ms``
    back. Their changelog is ``compact``, like any table's."""
    _check_name(name)
    history = to_millis(history_retention_ms, "history_retention_ms")

    def make() -> StateStore:
        if persistent:
            return RocksDBVersionedKeyValueStore(name, history)
        return InMemoryVersionedKeyValueStore(name, history)

    return StoreSupplier(name, persistent, "versioned", make, history_retention_ms=history)


def _check_name(name: str) -> None:
    # The name becomes a directory and part of a topic name.
    if not name or any(c in name for c in "/\\") or name in (".", ".."):
        raise ValueError(
            f"store name {name!r} is invalid: use a non-empty name without path separators"
        )
