"""State stores: bytes-level key-value, window, session and versioned stores, caches and typed views.

Stores know nothing of Kafka. Each write is handed to a change listener as a
:class:`ChangelogRecord`; the runtime appends those to the store's changelog topic and replays them
through :meth:`StateStore.restore` to rebuild a store. Two backends keep the same contracts:
in-memory and RocksDB. Transactional layers keep uncommitted writes out of a store until commit,
for exactly-once.
"""

from fluvial.state.base import (
    ChangeListener,
    ChangelogRecord,
    KeyValueStore,
    StateStore,
    ValueAndTimestamp,
    WindowStore,
    from_timestamped_bytes,
    parse_window_store_key,
    to_timestamped_bytes,
    window_store_key,
)
from fluvial.state.caching import (
    CachingKeyValueStore,
    CachingWindowStore,
    FlushListener,
    ThreadCache,
    WindowFlushListener,
)
from fluvial.state.caching_session import CachingSessionStore, SessionFlushListener
from fluvial.state.memory import InMemoryKeyValueStore, InMemoryWindowStore
from fluvial.state.rocksdb import RocksDBKeyValueStore, RocksDBWindowStore
from fluvial.state.rocksdb_session import RocksDBSessionStore
from fluvial.state.rocksdb_versioned import RocksDBVersionedKeyValueStore
from fluvial.state.session import (
    InMemorySessionStore,
    SessionEntry,
    SessionStore,
    parse_session_store_key,
    session_store_key,
)
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.transactional import (
    DEFAULT_MAX_UNCOMMITTED_BYTES,
    TransactionalKeyValueStore,
    TransactionalStore,
    TransactionalVersionedKeyValueStore,
)
from fluvial.state.transactional_windowed import (
    TransactionalSessionStore,
    TransactionalWindowStore,
)
from fluvial.state.typed import (
    ReadOnlyKeyValueStore,
    TypedKeyValueStore,
    TypedSessionStore,
    TypedTimestampedKeyValueStore,
    TypedVersionedKeyValueStore,
    TypedWindowStore,
)
from fluvial.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    InMemoryVersionedKeyValueStore,
    VersionedKeyValueStore,
    VersionedRecord,
)

__all__ = [
    "CachingKeyValueStore",
    "CachingSessionStore",
    "CachingWindowStore",
    "ChangeListener",
    "ChangelogRecord",
    "DEFAULT_MAX_UNCOMMITTED_BYTES",
    "FlushListener",
    "InMemoryKeyValueStore",
    "InMemorySessionStore",
    "InMemoryVersionedKeyValueStore",
    "InMemoryWindowStore",
    "KeyValueStore",
    "PUT_RETURN_CODE_NOT_PUT",
    "PUT_RETURN_CODE_VALID_TO_UNDEFINED",
    "ReadOnlyKeyValueStore",
    "RocksDBKeyValueStore",
    "RocksDBSessionStore",
    "RocksDBVersionedKeyValueStore",
    "RocksDBWindowStore",
    "SessionEntry",
    "SessionFlushListener",
    "SessionStore",
    "StateStore",
    "ThreadCache",
    "TimestampedKeyValueStore",
    "TransactionalKeyValueStore",
    "TransactionalSessionStore",
    "TransactionalStore",
    "TransactionalVersionedKeyValueStore",
    "TransactionalWindowStore",
    "TypedKeyValueStore",
    "TypedSessionStore",
    "TypedTimestampedKeyValueStore",
    "TypedVersionedKeyValueStore",
    "TypedWindowStore",
    "ValueAndTimestamp",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowFlushListener",
    "WindowStore",
    "from_timestamped_bytes",
    "parse_session_store_key",
    "parse_window_store_key",
    "session_store_key",
    "to_timestamped_bytes",
    "window_store_key",
]
