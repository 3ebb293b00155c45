"""The contracts every state store keeps, whatever holds its bytes.

Stores hold bytes, never objects: serdes live in the typed facades (:mod:`fluvial.state.typed`),
so one store implementation serves every key and value type, and the bytes in a store are the
bytes on its changelog topic.

Every write is observable as a :class:`ChangelogRecord` handed synchronously to the store's change
listener. Stores know nothing of Kafka: the runtime turns those records into changelog appends,
and feeds them back through :meth:`StateStore.restore` to rebuild a store.
"""

from __future__ import annotations

import struct
from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

# Re-exported: the layout of a timestamped store's values lives in a compiled module.
from fluvial.state.value_format import TIMESTAMP_PREFIX as TIMESTAMP_PREFIX
from fluvial.state.value_format import from_timestamped_bytes as from_timestamped_bytes
from fluvial.state.value_format import to_timestamped_bytes as to_timestamped_bytes

V = TypeVar("V")

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
#: What follows the record key in a window store key: 8-byte BE start, 4-byte BE sequence number.
WINDOW_KEY_TAIL = struct.Struct(">qi")

#: Stream time of a window store that has seen no write yet: nothing is expired.
NO_TIME = -(2**63)

#: Bytes a window store key carries after the record key: 8-byte start, 4-byte sequence number.
WINDOW_KEY_SUFFIX = 12


class ChangelogRecord(NamedTuple):
    """One state change as it goes to (and comes back from) the changelog topic."""

    key: bytes
    value: bytes | None
    timestamp_ms: int


ChangeListener = Callable[[ChangelogRecord], None]

#: Builds a named tuple from a tuple of its fields: ``new_tuple(ChangelogRecord, (k, v, t))``.
#: A NamedTuple's own constructor is a Python function, a frame per call; hot paths that make
#: one per record call this C function instead.
new_tuple = tuple.__new__


class ChangelogMessage(Protocol):
    """A changelog record as a consumer hands it over, read by :meth:`StateStore.restore_batch`.

    Always a record with a key (never an event): the restore checks that before it hands a
    batch on. Only these three accessors are used, so stores stay free of any Kafka client.
    """

    def key(self) -> bytes: ...

    def value(self) -> bytes | None: ...

    def timestamp(self) -> tuple[int, int]: ...


class ValueAndTimestamp(NamedTuple, Generic[V]):
    """A value of a timestamped store together with the timestamp of the record that wrote it."""

    value: V
    timestamp_ms: int


class StateStore(ABC):
    """What the runtime needs from any store: lifecycle, changelog hooks and the committed offset.

    ``committed_offset`` is the changelog offset the store's contents reflect. The runtime sets it
    before :meth:`flush`; persistent stores write it durably together with the data, so that after
    a restart only the changelog suffix past it has to be replayed.
    """

    def __init__(self, name: str, persistent: bool) -> None:
        self.name = name
        self.persistent = persistent
        self.committed_offset: int | None = None
        self._listener: ChangeListener | None = None

    @property
    @abstractmethod
    def is_open(self) -> bool:
        """Whether the store is initialised and not yet closed."""

    @abstractmethod
    def init(self, state_dir: Path | None) -> None:
        """Open the store; persistent stores keep their files in ``state_dir / name``."""

    @abstractmethod
    def flush(self) -> None:
        """Make every write so far durable (and, for caches, visible to the inner store)."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's resources; persistent contents survive."""

    def destroy(self) -> None:
        """Close the store and wipe its contents (files included)."""
        self.close()

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        """Call ``listener`` synchronously with the changelog record of every write."""
        self._listener = listener

    @abstractmethod
    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        """Apply changelog records without calling the listener; a ``None`` value deletes."""

    def restore_batch(self, batch: Sequence[ChangelogMessage], timestamped: bool = False) -> None:
        """Apply a batch of changelog records as the consumer returned them, like :meth:`restore`.

        ``timestamped``: keep each value behind its record's 8-byte timestamp, as a timestamped
        store's layer above asks. The restore of a changelog comes through here once per batch:
        this default makes :class:`ChangelogRecord` objects for :meth:`restore`, and the stores
        on the common path (the key-value stack) override it to write the batch in one loop,
        with no object per record.
        """
        records = [
            new_tuple(ChangelogRecord, (m.key(), m.value(), m.timestamp()[1])) for m in batch
        ]
        self.restore(with_timestamps(records) if timestamped else records)

    def apply_committed(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None
    ) -> None:
        """Apply changelog records that are now committed, and the offset they reach.

        Transactional stores call this at commit, after the Kafka transaction that carried the
        records committed. Persistent stores override it to write the data and the offset in
        one atomic step, so that a crash leaves the store at one committed state or the next,
        never in between. The listener is not called: the records are already on the changelog.
        """
        self.restore(records)
        self.committed_offset = committed_offset
        self.flush()

    def _log(self, key: bytes, value: bytes | None, timestamp_ms: int) -> None:
        if self._listener is not None:
            self._listener(ChangelogRecord(key, value, timestamp_ms))

    def _check_open(self) -> None:
        if not self.is_open:
            raise RuntimeError(
                f"state store {self.name!r} is not open: call init(state_dir) before using it"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class KeyValueStore(StateStore):
    """A sorted map from key bytes to value bytes.

    Order is unsigned byte order (``b"\\xff"`` after ``b"\\x01"``), which is what Python's ``bytes``
    comparison and RocksDB's default comparator both give.
    """

    @abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or ``None``."""

    @abstractmethod
    def put(self, key: bytes, value: bytes | None, timestamp_ms: int = 0) -> None:
        """Store ``value`` under ``key``; ``None`` deletes. ``timestamp_ms`` goes to the changelog."""

    @abstractmethod
    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``from_key <= key <= to_key`` in key order; ``None`` leaves a side open."""

    @abstractmethod
    def approximate_num_entries(self) -> int:
        """Roughly how many keys the store holds (exact for in-memory stores)."""

    def all(self) -> Iterator[tuple[bytes, bytes]]:
        """Every entry in key order."""
        return self.range(None, None)

    def put_if_absent(self, key: bytes, value: bytes, timestamp_ms: int = 0) -> bytes | None:
        """Store ``value`` only if ``key`` is absent; return the existing value, if any."""
        existing = self.get(key)
        if existing is None:
            self.put(key, value, timestamp_ms)
        return existing

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]], timestamp_ms: int = 0) -> None:
        """Put several entries, each logged as its own changelog record."""
        for key, value in entries:
            self.put(key, value, timestamp_ms)

    def delete(self, key: bytes, timestamp_ms: int = 0) -> bytes | None:
        """Remove ``key`` and return its old value. The tombstone is logged even if it was absent."""
        old = self.get(key)
        self.put(key, None, timestamp_ms)
        return old


class WindowStore(StateStore):
    """Values keyed by (key bytes, window start), kept for ``retention_ms`` of stream time.

    Stream time here is the largest window start ever put. A window whose start is at or before
    ``observed_stream_time - retention_ms`` is expired: puts into it are dropped, reads skip it, and
    its storage is reclaimed. With ``retain_duplicates`` (stream-stream joins) every put is kept
    under its own sequence number instead of overwriting.
    """

    def __init__(
        self,
        name: str,
        persistent: bool,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(name, persistent)
        if retention_ms < 0 or window_size_ms <= 0:
            raise ValueError(
                f"window store {name!r}: retention_ms must be >= 0 and window_size_ms > 0, "
                f"got {retention_ms} and {window_size_ms}"
            )
        if retention_ms < window_size_ms:
            raise ValueError(
                f"window store {name!r}: retention_ms ({retention_ms}) must be at least "
                f"window_size_ms ({window_size_ms}), or windows would expire before they close"
            )
        self.retention_ms = retention_ms
        self.window_size_ms = window_size_ms
        self.retain_duplicates = retain_duplicates
        self.observed_stream_time = NO_TIME
        self._seqnum = 0

    @abstractmethod
    def put(
        self, key: bytes, value: bytes | None, window_start_ms: int, timestamp_ms: int = 0
    ) -> None:
        """Store ``value`` for (key, window); ``None`` deletes (ignored with duplicates)."""

    @abstractmethod
    def fetch(self, key: bytes, window_start_ms: int) -> bytes | None:
        """The value of one window, or ``None`` (the first one, with duplicates)."""

    @abstractmethod
    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> Iterator[tuple[int, bytes]]:
        """(window start, value) of ``key`` for starts in ``[time_from, time_to]``, ascending."""

    @abstractmethod
    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, window start, value) for starts in ``[time_from, time_to]``.

        Ascending by window start, then key, then insertion (sequence number).
        """

    def all(self) -> Iterator[tuple[bytes, int, bytes]]:
        """Every live window, in :meth:`fetch_all` order."""
        return self.fetch_all(-(2**63), 2**63 - 1)

    def expired_before(self) -> int:
        """Windows starting at or before this time are expired."""
        if self.observed_stream_time == -(2**63):
            return -(2**63)
        return self.observed_stream_time - self.retention_ms

    def _next_seqnum(self) -> int:
        # Java keeps the sequence number in a signed int that wraps; only uniqueness among the
        # live duplicates of one (key, start) matters, so wrapping at 2**31 is harmless.
        if not self.retain_duplicates:
            return 0
        self._seqnum = (self._seqnum + 1) & 0x7FFFFFFF
        return self._seqnum


def window_store_key(key: bytes, window_start_ms: int, seqnum: int) -> bytes:
    """Key bytes + 8-byte BE window start + 4-byte BE sequence number (Kafka Streams' layout)."""
    return key + WINDOW_KEY_TAIL.pack(window_start_ms, seqnum)


def parse_window_store_key(binary: bytes) -> tuple[bytes, int, int]:
    """Split a window store key back into (key, window start, sequence number)."""
    if len(binary) < WINDOW_KEY_SUFFIX:
        raise ValueError(
            f"a window store key has at least {WINDOW_KEY_SUFFIX} bytes, got {len(binary)}"
        )
    start = _LONG.unpack_from(binary, len(binary) - WINDOW_KEY_SUFFIX)[0]
    seqnum = _INT.unpack_from(binary, len(binary) - 4)[0]
    return binary[:-WINDOW_KEY_SUFFIX], start, seqnum


def with_timestamps(records: Iterable[ChangelogRecord]) -> list[ChangelogRecord]:
    """Changelog records as a timestamped store keeps them: each value behind its timestamp
    (:func:`to_timestamped_bytes`, packed here in one comprehension: a restore's whole
    changelog may pass through)."""
    pack = TIMESTAMP_PREFIX.pack
    return [
        new_tuple(ChangelogRecord, (key, None if value is None else pack(ts) + value, ts))
        for key, value, ts in records
    ]


def own_abc_bookkeeping(*classes: type) -> None:
    """Give store classes of the compiled engine their own ``isinstance`` caches.

    A compiled class that derives from :class:`StateStore` is made without ``ABCMeta.__new__``,
    so it has no ABC bookkeeping of its own and would use its base's: an ``isinstance`` check
    against it (say, "is this store a cache?", false for a transactional store) would then be
    cached as the *base's* answer, and ``isinstance(store, StateStore)`` turn false for good.
    Each compiled store module calls this on its classes; classes that have their own (the
    interpreted build's) keep them.
    """
    import _abc  # ABCMeta's C half: what ABCMeta.__new__ calls

    for cls in classes:
        if isinstance(cls, ABCMeta) and "_abc_impl" not in vars(cls):
            _abc._abc_init(cls)
