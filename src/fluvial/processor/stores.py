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
from fluvial.state.base import ChangeListener, KeyValueStore, StateStore, WindowStore
from fluvial.state.caching import CachingKeyValueStore, CachingWindowStore, ThreadCache
from fluvial.state.caching_session import CachingSessionStore
from fluvial.state.memory import InMemoryKeyValueStore, InMemoryWindowStore
from fluvial.state.rocksdb import RocksDBKeyValueStore, RocksDBWindowStore
from fluvial.state.rocksdb_session import RocksDBSessionStore
from fluvial.state.rocksdb_versioned import RocksDBVersionedKeyValueStore
from fluvial.state.session import InMemorySessionStore, SessionStore
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.transactional import (
    TransactionalKeyValueStore,
    TransactionalStore,
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


class StoreStack:
    """One task's store as built, bottom up, with every layer named.

    - ``bottom``: the bytes store that holds the data (RocksDB or in memory);
    - ``transactional``: the layer that keeps uncommitted writes out of ``bottom`` until commit
      (persistent stores; see :mod:`fluvial.state.transactional`), or ``None``;
    - ``cache``: the record cache, when the store has one;
    - ``raw``: the outermost layer holding the store's own bytes (a timestamped view decodes
      them above it);
    - ``store``: the outermost layer, which processors and queries are given.

    The changelog listener is wired to ``store``: each layer below hands its writes up through
    the listener it was given when the layer above was built. A transactional layer hands them
    over at the task's flush, the last write of each key once (:mod:`fluvial.state.transactional`).
    """

    __slots__ = ("spec", "bottom", "transactional", "cache", "raw", "store")

    def __init__(
        self,
        spec: StoreSpec,
        bottom: StateStore,
        transactional: TransactionalStore | None,
        cache: StateStore | None,
        raw: StateStore,
        store: StateStore,
    ) -> None:
        self.spec = spec
        self.bottom = bottom
        self.transactional = transactional
        self.cache = cache
        self.raw = raw
        self.store = store

    def set_changelog_listener(self, listener: ChangeListener | None) -> None:
        """Send every write's changelog record to ``listener`` (the task's changelog sender)."""
        self.store.set_change_listener(listener)

    def committed(self, changelog_offset: int | None) -> None:
        """The Kafka commit holding this store's changelog records succeeded: make the local
        store match it. A transactional layer writes its buffer and the offset in one atomic
        write; other stores record the offset and flush."""
        if self.transactional is not None:
            self.transactional.commit(changelog_offset)
        else:
            self.store.committed_offset = changelog_offset
            self.store.flush()

    @property
    def commit_needed(self) -> bool:
        """Whether the uncommitted writes reached their bound: the runtime should commit."""
        return self.transactional is not None and self.transactional.commit_needed


def _transactional_layer(store: StateStore) -> TransactionalStore:
    """The transactional layer of a persistent bytes store, by store type."""
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


def _bottom(spec: StoreSpec, store_type: str) -> StateStore:
    """The bytes store of ``spec`` on the chosen backend."""
    rocks = store_type == ROCKSDB
    if spec.kind in (KEY_VALUE, TIMESTAMPED_KEY_VALUE):
        return RocksDBKeyValueStore(spec.name) if rocks else InMemoryKeyValueStore(spec.name)
    if spec.kind == WINDOW:
        assert spec.retention_ms is not None and spec.window_size_ms is not None
        window_cls = RocksDBWindowStore if rocks else InMemoryWindowStore
        return window_cls(spec.name, spec.retention_ms, spec.window_size_ms, spec.retain_duplicates)
    if spec.kind == SESSION:
        assert spec.retention_ms is not None
        if rocks:
            return RocksDBSessionStore(spec.name, spec.retention_ms)
        return InMemorySessionStore(spec.name, spec.retention_ms)
    if spec.kind == VERSIONED_KEY_VALUE:
        assert spec.history_retention_ms is not None
        if rocks:
            return RocksDBVersionedKeyValueStore(spec.name, spec.history_retention_ms)
        return InMemoryVersionedKeyValueStore(spec.name, spec.history_retention_ms)
    raise ValueError(f"store {spec.name!r} has unknown kind {spec.kind!r}")


def create_store_stack(
    spec: StoreSpec,
    default_store_type: str,
    cache: ThreadCache | None,
    *,
    transactional: bool = True,
) -> StoreStack:
    """A fresh, unopened store for one task, built bottom up: the bytes store, its
    transactional layer when persistent, a record cache when the spec asks for one, and a
    timestamped view for timestamped key-value stores. The runtime and the test driver both
    build every store here, so both run the same stack.

    All caches of a task share ``cache``'s byte budget; ``None`` (or a zero budget) turns
    caching off. ``transactional=False`` leaves out the transactional layer (GlobalKTable
    stores: rebuilt from their topic, never committed). In-memory stores never get one: a
    crash loses them whole, so nothing uncommitted survives.
    """
    store_type = spec.store_type or default_store_type
    if store_type not in STORE_TYPES:
        raise ValueError(f"unknown store type {store_type!r}: use one of {', '.join(STORE_TYPES)}")
    bottom = _bottom(spec, store_type)
    layer = _transactional_layer(bottom) if transactional and bottom.persistent else None
    raw: Any = layer if layer is not None else bottom
    caching = spec.caching_enabled and cache is not None and cache.max_bytes > 0
    cached: StateStore | None = None
    # Versioned stores never get a cache: an as-of read must see every version.
    if caching and spec.kind in (KEY_VALUE, TIMESTAMPED_KEY_VALUE):
        raw = cached = CachingKeyValueStore(raw, cache=cache)
    elif caching and spec.kind == WINDOW and not spec.retain_duplicates:
        raw = cached = CachingWindowStore(raw, cache=cache)
    elif caching and spec.kind == SESSION:
        raw = cached = CachingSessionStore(raw, cache=cache)
    store: StateStore = TimestampedKeyValueStore(raw) if spec.kind == TIMESTAMPED_KEY_VALUE else raw
    return StoreStack(spec, bottom, layer, cached, raw, store)


def create_store(
    spec: StoreSpec,
    default_store_type: str,
    cache: ThreadCache | None,
    *,
    transactional: bool = True,
) -> StateStore:
    """The outermost layer of :func:`create_store_stack`, for callers that need no other."""
    return create_store_stack(spec, default_store_type, cache, transactional=transactional).store


def is_cached(store: StateStore) -> bool:
    """Whether writes to ``store`` are held in a record cache until the next flush."""
    inner = store.inner if isinstance(store, TimestampedKeyValueStore) else store
    return isinstance(inner, CachingKeyValueStore | CachingWindowStore | CachingSessionStore)


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
        """The store's name: what processors pass to ``context.get_state_store``."""
        return str(self._fields["name"])

    def with_caching_enabled(self) -> StoreBuilder:
        """Coalesce a key's writes in the record cache until the next commit (user stores start
        without).

        :returns: a new builder with caching on and every other setting kept.
        """
        return StoreBuilder(**{**self._fields, "caching_enabled": True})

    def with_caching_disabled(self) -> StoreBuilder:
        """Every write reaches the store and its changelog at once (the default for user stores).

        :returns: a new builder with caching off and every other setting kept.
        """
        return StoreBuilder(**{**self._fields, "caching_enabled": False})

    def with_logging_enabled(self) -> StoreBuilder:
        """Back the store with a changelog topic, from which it is restored (the default).

        :returns: a new builder with changelogging on and every other setting kept.
        """
        return StoreBuilder(**{**self._fields, "logging_enabled": True})

    def with_logging_disabled(self) -> StoreBuilder:
        """No changelog: the store is lost with its task's local state. Rarely what you want."""
        return StoreBuilder(**{**self._fields, "logging_enabled": False})

    def build_spec(self) -> StoreSpec:
        """The store's description as the topology records it (used by ``add_state_store``).

        :returns: the store's spec: name, kind, serdes, backend, caching, changelogging, retention.
        """
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
