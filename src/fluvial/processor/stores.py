"""State stores for tasks: user-facing store builders, and turning a StoreSpec into a live store.

The stores themselves live in :mod:`fluvial.state`; this module only chooses and wraps them
(backend, record cache, timestamps) and gives processors a typed view.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fluvial.config import to_millis
from fluvial.errors import StreamsError
from fluvial.serdes import Serde
from fluvial.state.base import KeyValueStore, StateStore, WindowStore
from fluvial.state.caching import CachingKeyValueStore, CachingWindowStore, ThreadCache
from fluvial.state.memory import InMemoryKeyValueStore, InMemoryWindowStore
from fluvial.state.rocksdb import RocksDBKeyValueStore, RocksDBWindowStore
from fluvial.state.rocksdb_session import RocksDBSessionStore
from fluvial.state.rocksdb_versioned import RocksDBVersionedKeyValueStore
from fluvial.state.session import InMemorySessionStore, SessionStore
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.transactional import (
    TransactionalKeyValueStore,
    TransactionalVersionedKeyValueStore,
)
from fluvial.state.transactional_windowed import TransactionalSessionStore, TransactionalWindowStore
from fluvial.state.typed import (
    TypedKeyValueStore,
    TypedSessionStore,
    TypedTimestampedKeyValueStore,
    TypedVersionedKeyValueStore,
    TypedWindowStore,
)
from fluvial.state.versioned import InMemoryVersionedKeyValueStore, VersionedKeyValueStore
from fluvial.topology.nodes import (
    IN_MEMORY,
    KEY_VALUE,
    ROCKSDB,
    SESSION,
    STORE_TYPES,
    TIMESTAMPED_KEY_VALUE,
    VERSIONED_KEY_VALUE,
    WINDOW,
    StoreSpec,
)


def _transactional_layer(store: StateStore) -> StateStore:
    """A persistent bytes store under a transactional layer (see
    :mod:`fluvial.state.transactional`): its writes reach disk only once committed. In-memory
    stores are returned as they are: a crash loses them whole, so nothing uncommitted survives.
    """
    if not store.persistent:
        return store
    # Versioned before key-value: a versioned store may also satisfy the key-value contract.
    if isinstance(store, VersionedKeyValueStore):
        return TransactionalVersionedKeyValueStore(store)
    if isinstance(store, WindowStore):
        return TransactionalWindowStore(store)
    if isinstance(store, SessionStore):
        return TransactionalSessionStore(store)
    if isinstance(store, KeyValueStore):
        return TransactionalKeyValueStore(store)
    raise StreamsError(
        f"store {store.name!r} of type {type(store).__name__} has no transactional layer"
    )


def create_store(
    spec: StoreSpec,
    default_store_type: str,
    cache: ThreadCache | None,
    *,
    transactional: bool = True,
) -> StateStore:
    """A fresh, unopened store for one task, built bottom up: the bytes store, its
    transactional layer when persistent, a record cache when the spec asks for one, and a
    timestamped view for timestamped key-value stores. The runtime and the test driver both
    build every store here, so both run the same stack.

    All caches of a task share ``cache``'s byte budget; ``None`` (or a zero budget) turns
    caching off. ``transactional=False`` leaves out the transactional layer (GlobalKTable
    stores: rebuilt from their topic, never committed).
    """

    def transactional_layer(store: StateStore) -> StateStore:
        return _transactional_layer(store) if transactional else store

    store_type = spec.store_type or default_store_type
    if store_type not in STORE_TYPES:
        raise ValueError(f"unknown store type {store_type!r}: use one of {', '.join(STORE_TYPES)}")
    cached = spec.caching_enabled and cache is not None and cache.max_bytes > 0
    if spec.kind in (KEY_VALUE, TIMESTAMPED_KEY_VALUE):
        kv: Any = transactional_layer(
            RocksDBKeyValueStore(spec.name)
            if store_type == ROCKSDB
            else InMemoryKeyValueStore(spec.name)
        )
        if cached:
            kv = CachingKeyValueStore(kv, cache=cache)
        return TimestampedKeyValueStore(kv) if spec.kind == TIMESTAMPED_KEY_VALUE else kv
    if spec.kind == WINDOW:
        assert spec.retention_ms is not None and spec.window_size_ms is not None
        window_cls = RocksDBWindowStore if store_type == ROCKSDB else InMemoryWindowStore
        ws: Any = transactional_layer(
            window_cls(spec.name, spec.retention_ms, spec.window_size_ms, spec.retain_duplicates)
        )
        if cached and not spec.retain_duplicates:
            ws = CachingWindowStore(ws, cache=cache)
        return ws  # type: ignore[no-any-return]
    if spec.kind == SESSION:
        # No session cache yet: every session update is written (and forwarded) at once.
        assert spec.retention_ms is not None
        if store_type == ROCKSDB:
            return transactional_layer(RocksDBSessionStore(spec.name, spec.retention_ms))
        return InMemorySessionStore(spec.name, spec.retention_ms)
    if spec.kind == VERSIONED_KEY_VALUE:
        # Versioned stores are never cached: an as-of read must see every version.
        assert spec.history_retention_ms is not None
        if store_type == ROCKSDB:
            return transactional_layer(
                RocksDBVersionedKeyValueStore(spec.name, spec.history_retention_ms)
            )
        return InMemoryVersionedKeyValueStore(spec.name, spec.history_retention_ms)
    raise ValueError(f"store {spec.name!r} has unknown kind {spec.kind!r}")


def is_cached(store: StateStore) -> bool:
    """Whether writes to ``store`` are held in a record cache until the next flush."""
    inner = store.inner if isinstance(store, TimestampedKeyValueStore) else store
    return isinstance(inner, CachingKeyValueStore | CachingWindowStore)


def typed_view(spec: StoreSpec, store: StateStore, topic: str | None) -> Any:
    """The object-level store a user processor gets from ``context.get_state_store``."""
    assert spec.key_serde is not None and spec.value_serde is not None
    if isinstance(store, TimestampedKeyValueStore):
        return TypedTimestampedKeyValueStore(store, spec.key_serde, spec.value_serde, topic)
    if isinstance(store, WindowStore):
        return TypedWindowStore(store, spec.key_serde, spec.value_serde, topic)
    if isinstance(store, SessionStore):
        return TypedSessionStore(store, spec.key_serde, spec.value_serde, topic)
    if isinstance(store, VersionedKeyValueStore):
        return TypedVersionedKeyValueStore(store, spec.key_serde, spec.value_serde, topic)
    assert isinstance(store, KeyValueStore)
    return TypedKeyValueStore(store, spec.key_serde, spec.value_serde, topic)


class StoreBuilder:
    """Describes a store for ``builder.add_state_store``; made by :class:`Stores`.

    User stores start with caching off and changelogging on, as in Kafka Streams.
    """

    def __init__(self, **fields: Any) -> None:
        self._fields = {"caching_enabled": False, "logging_enabled": True, **fields}

    @property
    def name(self) -> str:
        return str(self._fields["name"])

    def with_caching_enabled(self) -> StoreBuilder:
        return StoreBuilder(**{**self._fields, "caching_enabled": True})

    def with_caching_disabled(self) -> StoreBuilder:
        return StoreBuilder(**{**self._fields, "caching_enabled": False})

    def with_logging_enabled(self) -> StoreBuilder:
        return StoreBuilder(**{**self._fields, "logging_enabled": True})

    def with_logging_disabled(self) -> StoreBuilder:
        """No changelog: the store is lost with its task's local state. Rarely what you want."""
        return StoreBuilder(**{**self._fields, "logging_enabled": False})

    def build_spec(self) -> StoreSpec:
        return StoreSpec(**self._fields)


class Stores:
    """Factories of :class:`StoreBuilder` for the Processor API."""

    @staticmethod
    def key_value_store_builder(
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        store_type: str | None = None,
    ) -> StoreBuilder:
        """A plain key-value store; ``store_type`` is ``"in_memory"``, ``"rocksdb"`` or the default."""
        _check_type(store_type)
        return StoreBuilder(
            name=name, kind=KEY_VALUE, key_serde=key_serde, value_serde=value_serde,
            store_type=store_type,
        )  # fmt: skip

    @staticmethod
    def timestamped_key_value_store_builder(
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        store_type: str | None = None,
    ) -> StoreBuilder:
        """A key-value store whose values carry the timestamp of the record that wrote them."""
        _check_type(store_type)
        return StoreBuilder(
            name=name, kind=TIMESTAMPED_KEY_VALUE, key_serde=key_serde, value_serde=value_serde,
            store_type=store_type,
        )  # fmt: skip

    @staticmethod
    def window_store_builder(
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        retention: int | timedelta,
        window_size: int | timedelta,
        retain_duplicates: bool = False,
        store_type: str | None = None,
    ) -> StoreBuilder:
        """A window store keeping windows for ``retention`` of stream time."""
        _check_type(store_type)
        return StoreBuilder(
            name=name, kind=WINDOW, key_serde=key_serde, value_serde=value_serde,
            store_type=store_type, retention_ms=to_millis(retention, "retention"),
            window_size_ms=to_millis(window_size, "window_size"),
            retain_duplicates=retain_duplicates,
        )  # fmt: skip

    @staticmethod
    def session_store_builder(
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        retention: int | timedelta,
        store_type: str | None = None,
    ) -> StoreBuilder:
        """A session store keeping sessions for ``retention`` of stream time past their end."""
        _check_type(store_type)
        return StoreBuilder(
            name=name, kind=SESSION, key_serde=key_serde, value_serde=value_serde,
            store_type=store_type, retention_ms=to_millis(retention, "retention"),
        )  # fmt: skip

    @staticmethod
    def versioned_key_value_store_builder(
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        history_retention: int | timedelta,
        store_type: str | None = None,
    ) -> StoreBuilder:
        """A key-value store keeping each key's history for ``history_retention``."""
        _check_type(store_type)
        return StoreBuilder(
            name=name, kind=VERSIONED_KEY_VALUE, key_serde=key_serde, value_serde=value_serde,
            store_type=store_type,
            history_retention_ms=to_millis(history_retention, "history_retention"),
        )  # fmt: skip


def _check_type(store_type: str | None) -> None:
    if store_type is not None and store_type not in STORE_TYPES:
        raise ValueError(
            f"unknown store type {store_type!r}: use {IN_MEMORY!r} or {ROCKSDB!r} "
            "(or None for the runtime's default)"
        )
