"""Forwarding table revisions now, or when the record cache lets them out.

With a cache, a store holds back consecutive updates of a key and hands the coalesced
``(new, old)`` to a flush listener at the next commit (or eviction); the revision is forwarded
then. Without one, it is forwarded right after the write. Either way the final value is the same.
"""

from __future__ import annotations

from typing import Any

from fluvial.dsl.change import Change
from fluvial.dsl.old_values import OldValues
from fluvial.processor.metrics import REVISIONS_EMITTED
from fluvial.processor.stores import is_cached
from fluvial.processor_api import ProcessorContext
from fluvial.records import Record, Window, Windowed
from fluvial.serdes import Serde
from fluvial.state.timestamped import TimestampedKeyValueStore
from fluvial.state.value_format import from_timestamped_bytes


class TableForwarder:
    """For processors that write a timestamped key-value store and emit its changes."""

    def __init__(
        self,
        context: ProcessorContext,
        store: TimestampedKeyValueStore,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        old_values: OldValues | None = None,
    ) -> None:
        self.context = context
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.cached = is_cached(store)
        if self.cached:
            # Decided once the whole topology is built: whether an operator downstream (a
            # group_by, a join, a filter, suppress) reads old values. When none does, a flush
            # skips reading and decoding them, as Kafka Streams' cache does.
            send_old = old_values is None or old_values.enabled
            store.set_flush_listener(self._on_flush, send_old)

    def maybe_forward(self, key: Any, new: Any, old: Any, timestamp_ms: int) -> None:
        if not self.cached:
            emit(self.context, key, Change(new, old), timestamp_ms)

    def _on_flush(
        self,
        key: bytes,
        new: tuple[bytes, int] | None,
        old: tuple[bytes, int] | None,
        timestamp_ms: int,
    ) -> None:
        emit(
            self.context,
            self.key_serde.deserialize(None, key),
            Change(
                None if new is None else self.value_serde.deserialize(None, new[0]),
                None if old is None else self.value_serde.deserialize(None, old[0]),
            ),
            timestamp_ms,
        )


class WindowForwarder:
    """The same for window stores, whose values the aggregation keeps timestamp-prefixed."""

    def __init__(
        self,
        context: ProcessorContext,
        store: Any,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        window_size_ms: int,
        enabled: bool,
        old_values: OldValues | None = None,
    ) -> None:
        self.context = context
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.size = window_size_ms
        self.enabled = enabled
        self.cached = is_cached(store)
        if self.cached and enabled:
            store.set_flush_listener(self._on_flush, old_values is None or old_values.enabled)

    def maybe_forward(self, key: Any, window: Window, new: Any, old: Any, ts: int) -> None:
        if self.enabled and not self.cached:
            emit(self.context, Windowed(key, window), Change(new, old), ts)

    def _on_flush(
        self, key: bytes, start: int, new: bytes | None, old: bytes | None, timestamp_ms: int
    ) -> None:
        if not self.enabled:
            return
        new_value = None if new is None else from_timestamped_bytes(new)
        old_value = None if old is None else from_timestamped_bytes(old)
        emit(
            self.context,
            Windowed(self.key_serde.deserialize(None, key), Window(start, start + self.size)),
            Change(
                None if new_value is None else self.value_serde.deserialize(None, new_value[0]),
                None if old_value is None else self.value_serde.deserialize(None, old_value[0]),
            ),
            new_value[1] if new_value is not None else timestamp_ms,
        )


def emit(context: ProcessorContext, key: Any, change: Change[Any], timestamp_ms: int) -> None:
    """Forward one revision and count it."""
    context.forward(Record(key, change, timestamp_ms))
    context.metrics.increment(REVISIONS_EMITTED)
