"""Transactional stores (in the style of KIP-892): uncommitted writes live in memory until commit.

Under exactly-once, local state must never hold a write whose Kafka transaction did not commit.
Kafka Streams' answer is to wipe the store after a crash and restore it from the changelog, which
costs time in proportion to the state size. A transactional store instead keeps the writes of
the open transaction in a buffer layered over the store:

- reads see the buffer first, then the store; iteration merges both in the store's order;
- changelog records are sent when the transaction's writes are complete, not at write time:
  :meth:`TransactionalStore.log_changes` (called by :meth:`TransactionalStore.flush` and by the
  task's flush, before the Kafka commit) hands the change listener the last write of each store
  key since the previous call, so the runtime produces them inside the open Kafka transaction.
  A key updated a thousand times in one commit interval costs one changelog record, not a
  thousand; what a restore rebuilds is the same, since it keeps only the last write per key;
- :meth:`TransactionalStore.commit` (called *after* the Kafka transaction committed) applies the
  buffer to the store together with the changelog offset it reaches, in one atomic RocksDB write;
- :meth:`TransactionalStore.abort` drops the buffer;
- a crash before commit leaves the store on disk exactly at the last commit, with the offset of
  that commit, so recovery replays only the changelog suffix past it.

The buffer is keyed by the store's own key layout and keeps the last write per key in the order
of writes, so at commit it is handed to the store as changelog records through
:meth:`~fluvial.state.StateStore.apply_committed`, the same path restoration takes. One mechanism
therefore serves every store type; only the read merge differs per type. The changelog gets the
same records in the same order, so a restore from it rebuilds exactly what each commit applied.

The buffer is bounded by asking, not by spilling: once it holds ``max_uncommitted_bytes``,
:attr:`TransactionalStore.commit_needed` turns true and the runtime should commit early. Spilling
uncommitted writes to disk is exactly what this layer exists to avoid.

:meth:`StateStore.flush` commits nothing here: the commit cycle flushes stores *before* the Kafka
commit, while the buffer may only reach the store after it.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from fluvial.state.base import (
    ChangeListener,
    ChangelogMessage,
    ChangelogRecord,
    KeyValueStore,
    new_tuple,
    own_abc_bookkeeping,
)
from fluvial.state.caching import ENTRY_OVERHEAD, _merge, _sort_in
from fluvial.state.versioned import Version, VersionedKeyValueStore

#: The default bound of one store's uncommitted writes (KIP-892 proposes the same 64 MiB).
DEFAULT_MAX_UNCOMMITTED_BYTES = 64 * 1024 * 1024


class TransactionalStore:
    """Buffering, commit and abort, shared by the transactional wrappers of every store type.

    A mixin: each wrapper also derives from its store type's contract.
    """

    inner: Any

    def _setup(self, inner: Any, max_uncommitted_bytes: int) -> None:
        if max_uncommitted_bytes <= 0:
            raise ValueError(f"max_uncommitted_bytes must be positive, got {max_uncommitted_bytes}")
        self.inner = inner
        # Open and closed through this layer only; a flag is cheaper than asking ``inner``.
        self._opened = bool(inner.is_open)
        # Whether the store holds restored data or an offset that no sync has covered yet.
        self._unsynced = False
        self.max_uncommitted_bytes = max_uncommitted_bytes
        self.uncommitted_bytes = 0
        # Last write per store key, in write order (re-writing a key moves it to the end).
        self._pending: dict[Hashable, ChangelogRecord] = {}
        # The changelog records not yet handed to the change listener, in the same order.
        self._unlogged: dict[Hashable, ChangelogRecord] = {}
        self._changelog: ChangeListener | None = None

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        """Hand ``listener`` the changelog records at :meth:`log_changes`, not at write time."""
        self._changelog = listener

    def log_changes(self) -> None:
        """Send the last write of each store key since the previous call to the change listener.

        The commit cycle calls it (through :meth:`flush` and the task's flush) once every write
        of the transaction is made and before the Kafka transaction commits.
        """
        unlogged = self._unlogged
        if not unlogged:
            return
        listener = self._changelog
        records = list(unlogged.values())
        unlogged.clear()
        if listener is not None:
            for record in records:
                listener(record)

    def _log(self, key: bytes, value: bytes | None, timestamp_ms: int) -> None:
        # The stores' own write path (sessions, versions) logs here: keep it for log_changes.
        self._log_later(
            self._log_slot(key, timestamp_ms), ChangelogRecord(key, value, timestamp_ms)
        )

    def _log_slot(self, key: bytes, timestamp_ms: int) -> Hashable:
        """Which logged records a later one replaces: by default those of the same store key."""
        return key

    def _log_later(self, slot: Hashable, record: ChangelogRecord) -> None:
        if self._changelog is None:
            return
        unlogged = self._unlogged
        if slot in unlogged:
            del unlogged[slot]  # the newer record goes to the end: the last write is logged last
        unlogged[slot] = record

    # -- the transaction ---------------------------------------------------------------------

    def commit(self, changelog_offset: int | None) -> None:
        """Apply the buffer to the store with the changelog offset it reaches; empty the buffer.

        Call it once the Kafka transaction holding the buffer's changelog records committed.
        """
        if self._unlogged:
            # Applying writes the changelog never got would lose them on the next restore.
            raise RuntimeError(
                f"state store {self.inner.name!r}: {len(self._unlogged)} changelog record(s) "
                "were never sent; log_changes() must run before the Kafka commit"
            )
        # One atomic write of data and offset, synced: the only sync of a commit.
        self.inner.apply_committed(list(self._pending.values()), changelog_offset)
        self._unsynced = False
        self._drop(committed=True)

    def abort(self) -> None:
        """Forget every uncommitted write (the store is back at the last commit)."""
        self._drop(committed=False)

    @property
    def commit_needed(self) -> bool:
        """Whether the buffer reached ``max_uncommitted_bytes``: commit early."""
        return self.uncommitted_bytes >= self.max_uncommitted_bytes

    @property
    def uncommitted_count(self) -> int:
        """How many store keys the buffer holds."""
        return len(self._pending)

    # -- lifecycle: the inner store owns files and offsets ------------------------------------

    @property
    def committed_offset(self) -> int | None:
        # (hasattr, not __dict__: the compiled class keeps its attributes in slots.)
        return self.inner.committed_offset if hasattr(self, "inner") else None

    @committed_offset.setter
    def committed_offset(self, offset: int | None) -> None:
        if not hasattr(self, "inner"):  # StateStore.__init__ sets it before inner exists
            return
        if self._pending:
            # Recording an offset beyond data the store does not hold yet would make a restart
            # skip that data.
            raise RuntimeError(
                f"state store {self.inner.name!r} has uncommitted writes: record the changelog "
                "offset with commit(offset), which applies them together with it"
            )
        self.inner.committed_offset = offset
        self._unsynced = True

    @property
    def is_open(self) -> bool:
        return bool(self.inner.is_open)

    def init(self, state_dir: Path | None = None) -> None:
        self.inner.init(state_dir)
        self._opened = True
        self._unsynced = False
        self._drop(committed=False)

    def flush(self) -> None:
        """Make committed state durable; uncommitted writes stay buffered until :meth:`commit`.

        :meth:`commit` already syncs the store with its offset, so a flush in the commit cycle
        has nothing to do; only a restore or a recorded offset since then is synced here. The
        writes so far go to the changelog (:meth:`log_changes`).
        """
        self.log_changes()
        if self._unsynced:
            self.inner.flush()
            self._unsynced = False

    def close(self) -> None:
        """Close without committing: uncommitted writes are dropped, as in a crash."""
        self._opened = False
        self._drop(committed=False)
        self.inner.close()

    def destroy(self) -> None:
        self._opened = False
        self._drop(committed=False)
        self.inner.destroy()
        self._drop(committed=False)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        """Restore committed changelog records straight into the store."""
        self._check_nothing_pending()
        self.inner.restore(records)
        self._unsynced = True
        self._drop(committed=False)

    def restore_batch(self, batch: Sequence[ChangelogMessage], timestamped: bool = False) -> None:
        """As :meth:`restore`, for a batch as the consumer returned it."""
        self._check_nothing_pending()
        self.inner.restore_batch(batch, timestamped)
        self._unsynced = True
        self._drop(committed=False)

    def _check_nothing_pending(self) -> None:
        if self._pending:
            raise RuntimeError(
                f"state store {self.inner.name!r} has uncommitted writes: restore before "
                "processing, or abort first"
            )

    def apply_committed(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None
    ) -> None:
        self.restore(records)
        self.committed_offset = committed_offset
        self.inner.flush()
        self._unsynced = False

    # -- for the wrappers --------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._opened:
            raise RuntimeError(
                f"state store {self.inner.name!r} is not open: call init(state_dir) before using it"
            )

    def _buffer(self, slot: Hashable, record: ChangelogRecord) -> None:
        pending = self._pending
        old = pending.pop(slot, None)
        if old is not None:
            self.uncommitted_bytes -= _size(old)
        pending[slot] = record
        value = record.value
        self.uncommitted_bytes += (
            len(record.key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
        )

    def _drop(self, committed: bool) -> None:
        self._pending.clear()
        self._unlogged.clear()
        self.uncommitted_bytes = 0
        self._clear_overlay()
        self._sync(committed)

    def _clear_overlay(self) -> None:
        """Forget the wrapper's read indexes of the buffer."""

    def _sync(self, committed: bool) -> None:
        """Take derived state (stream time, sequence numbers) from the store.

        After an abort the store's values are the truth; after a commit the wrapper's own are
        at least as new.
        """


def _size(record: ChangelogRecord) -> int:
    return len(record.key) + (len(record.value) if record.value is not None else 0) + ENTRY_OVERHEAD


class TransactionalKeyValueStore(TransactionalStore, KeyValueStore):
    """A transactional layer over any bytes :class:`KeyValueStore`."""

    def __init__(
        self, inner: KeyValueStore, max_uncommitted_bytes: int = DEFAULT_MAX_UNCOMMITTED_BYTES
    ) -> None:
        KeyValueStore.__init__(self, inner.name, inner.persistent)
        # Buffered keys in byte order as of the last range, and the keys buffered since (sorted
        # in at the next range: an insort per new key moved the whole list each time).
        self._sorted: list[bytes] = []
        self._unsorted: list[bytes] = []
        self._setup(inner, max_uncommitted_bytes)

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        record = self._pending.get(key)
        if record is not None:
            return record.value
        value: bytes | None = self.inner.get(key)
        return value

    def put(self, key: bytes, value: bytes | None, timestamp_ms: int = 0) -> None:
        self._check_open()
        key = bytes(key)
        if key not in self._pending:
            self._unsorted.append(key)
        stored = None if value is None else bytes(value)
        # One record, buffered and logged: the changelog carries exactly what commit applies.
        record: ChangelogRecord = new_tuple(ChangelogRecord, (key, stored, timestamp_ms))
        self._buffer(key, record)
        self._log_later(key, record)

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        if self._unsorted:
            _sort_in(self._sorted, self._unsorted)
        lo = 0 if from_key is None else bisect.bisect_left(self._sorted, from_key)
        hi = len(self._sorted) if to_key is None else bisect.bisect_right(self._sorted, to_key)
        # A snapshot of the buffer: writes during iteration do not disturb it.
        buffered = [(k, self._pending[k].value) for k in self._sorted[lo:hi]]
        return _merge(self.inner.range(from_key, to_key), buffered)

    def approximate_num_entries(self) -> int:
        count: int = self.inner.approximate_num_entries()
        for key, record in self._pending.items():
            count += int(record.value is not None) - int(self.inner.get(key) is not None)
        return max(count, 0)

    def _clear_overlay(self) -> None:
        self._sorted.clear()
        self._unsorted.clear()


class TransactionalVersionedKeyValueStore(TransactionalStore, VersionedKeyValueStore):
    """A transactional layer over a :class:`VersionedKeyValueStore`.

    The buffer holds versions; a lookup takes the nearer of the buffered and the stored version,
    the buffered one winning on equal timestamps.
    """

    def __init__(
        self,
        inner: VersionedKeyValueStore,
        max_uncommitted_bytes: int = DEFAULT_MAX_UNCOMMITTED_BYTES,
    ) -> None:
        VersionedKeyValueStore.__init__(
            self, inner.name, inner.persistent, inner.history_retention_ms
        )
        self._times: dict[bytes, list[int]] = {}
        self._values: dict[bytes, list[bytes | None]] = {}
        self._setup(inner, max_uncommitted_bytes)

    def approximate_num_entries(self) -> int:
        count: int = self.inner.approximate_num_entries()
        return count + len(self._pending)

    def _log_slot(self, key: bytes, timestamp_ms: int) -> Hashable:
        return key, timestamp_ms  # each version is its own entry

    def _floor(self, key: bytes, timestamp_ms: int) -> Version | None:
        stored = self.inner._floor(key, timestamp_ms)
        times = self._times.get(key, [])
        i = bisect.bisect_right(times, timestamp_ms) - 1
        if i < 0:
            return stored  # type: ignore[no-any-return]
        if stored is not None and stored[0] > times[i]:
            return stored  # type: ignore[no-any-return]
        return times[i], self._values[key][i]

    def _next_after(self, key: bytes, timestamp_ms: int) -> int | None:
        stored: int | None = self.inner._next_after(key, timestamp_ms)
        times = self._times.get(key, [])
        i = bisect.bisect_right(times, timestamp_ms)
        buffered = times[i] if i < len(times) else None
        if stored is None or buffered is None:
            return stored if buffered is None else buffered
        return min(stored, buffered)

    def _latest(self, key: bytes) -> Version | None:
        stored = self.inner._latest(key)
        times = self._times.get(key)
        if not times or (stored is not None and stored[0] > times[-1]):
            return stored  # type: ignore[no-any-return]
        return times[-1], self._values[key][-1]

    def _write_versions(self, versions: list[tuple[bytes, int, bytes | None]]) -> None:
        for key, timestamp_ms, value in versions:
            stored = None if value is None else bytes(value)
            times = self._times.setdefault(key, [])
            values = self._values.setdefault(key, [])
            i = bisect.bisect_left(times, timestamp_ms)
            if i < len(times) and times[i] == timestamp_ms:
                values[i] = stored
            else:
                times.insert(i, timestamp_ms)
                values.insert(i, stored)
            self._buffer((key, timestamp_ms), ChangelogRecord(key, stored, timestamp_ms))

    def _clear_overlay(self) -> None:
        self._times.clear()
        self._values.clear()

    def _sync(self, committed: bool) -> None:
        inner_time = self.inner.observed_stream_time
        self.observed_stream_time = (
            max(self.observed_stream_time, inner_time) if committed else inner_time
        )


own_abc_bookkeeping(TransactionalKeyValueStore, TransactionalVersionedKeyValueStore)
