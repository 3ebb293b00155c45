"""Timestamped key-value stores: each value remembers the timestamp of the record that wrote it.

KTables need that timestamp to stamp their downstream revisions. The store keeps
``8-byte BE timestamp + value`` in an ordinary bytes store (Kafka Streams' timestamped format),
while its changelog carries the plain value with the timestamp as the record timestamp, so the
changelog topic looks like any table topic to a consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from fluvial.state.base import (
    ChangelogMessage,
    ChangelogRecord,
    KeyValueStore,
    StateStore,
    from_timestamped_bytes,
    own_abc_bookkeeping,
    to_timestamped_bytes,
    with_timestamps,
)

#: (key, new (value, timestamp) or None, old (value, timestamp) or None, timestamp_ms)
TimestampedFlushListener = Callable[
    [bytes, tuple[bytes, int] | None, tuple[bytes, int] | None, int], None
]


class TimestampedKeyValueStore(StateStore):
    """A key-value store of ``(value bytes, timestamp_ms)`` over any bytes :class:`KeyValueStore`.

    The inner store may be a :class:`~fluvial.state.CachingKeyValueStore`; the cache then holds
    timestamped bytes, and :meth:`set_flush_listener` hands its evictions out already split.
    """

    def __init__(self, inner: KeyValueStore) -> None:
        super().__init__(inner.name, inner.persistent)
        self.inner = inner
        inner.set_change_listener(self._forward)

    @property
    def committed_offset(self) -> int | None:  # type: ignore[override]
        return self.inner.committed_offset

    @committed_offset.setter
    def committed_offset(self, offset: int | None) -> None:
        # StateStore.__init__ assigns this before self.inner exists; nothing to forward then.
        # (hasattr, not __dict__: the compiled class keeps its attributes in slots.)
        if hasattr(self, "inner"):
            self.inner.committed_offset = offset

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    def init(self, state_dir: Path | None = None) -> None:
        self.inner.init(state_dir)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def destroy(self) -> None:
        self.inner.destroy()

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        raw = self.inner.get(key)
        return None if raw is None else from_timestamped_bytes(raw)

    def put(self, key: bytes, value: bytes | None, timestamp_ms: int) -> None:
        raw = None if value is None else to_timestamped_bytes(value, timestamp_ms)
        self.inner.put(key, raw, timestamp_ms)

    def put_if_absent(
        self, key: bytes, value: bytes, timestamp_ms: int
    ) -> tuple[bytes, int] | None:
        existing = self.get(key)
        if existing is None:
            self.put(key, value, timestamp_ms)
        return existing

    def delete(self, key: bytes, timestamp_ms: int = 0) -> tuple[bytes, int] | None:
        old = self.get(key)
        self.inner.put(key, None, timestamp_ms)
        return old

    def range(
        self, from_key: bytes | None, to_key: bytes | None
    ) -> Iterator[tuple[bytes, tuple[bytes, int]]]:
        """Entries as ``(key, (value, timestamp))`` in key order."""
        for key, raw in self.inner.range(from_key, to_key):
            yield key, from_timestamped_bytes(raw)

    def all(self) -> Iterator[tuple[bytes, tuple[bytes, int]]]:
        return self.range(None, None)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self.inner.restore(with_timestamps(records))

    def restore_batch(self, batch: Sequence[ChangelogMessage], timestamped: bool = False) -> None:
        # The layers below put each timestamp before its value as they write the batch.
        assert not timestamped, "a timestamped store under a timestamped store"
        self.inner.restore_batch(batch, timestamped=True)

    def set_flush_listener(
        self, listener: TimestampedFlushListener | None, send_old_values: bool = True
    ) -> None:
        """Forward cache flushes, with values split into ``(value, timestamp)``.

        Only valid when the inner store is a caching store; ``send_old_values`` as for
        :meth:`fluvial.state.caching.CachingKeyValueStore.set_flush_listener`.
        """
        set_inner = getattr(self.inner, "set_flush_listener", None)
        if set_inner is None:
            raise TypeError(
                f"store {self.name!r} has no cache: wrap the bytes store in CachingKeyValueStore "
                "before making it timestamped to get flush callbacks"
            )
        if listener is None:
            set_inner(None)
            return

        def split(key: bytes, new: bytes | None, old: bytes | None, timestamp_ms: int) -> None:
            listener(
                key,
                None if new is None else from_timestamped_bytes(new),
                None if old is None else from_timestamped_bytes(old),
                timestamp_ms,
            )

        set_inner(split, send_old_values)

    def _forward(self, record: ChangelogRecord) -> None:
        # Strip the timestamp prefix: the changelog holds the plain value, stamped with the
        # record timestamp.
        if self._listener is None:
            return
        value = None if record.value is None else from_timestamped_bytes(record.value)[0]
        self._listener(ChangelogRecord(record.key, value, record.timestamp_ms))


own_abc_bookkeeping(TimestampedKeyValueStore)
