"""Stream aggregations: count, reduce and aggregate, per key and per (window, key).

Aggregates live in the task's state store, so they survive restarts via the changelog; each
update emits a revision ``Change(new, old)`` keyed by the key (or ``Windowed`` key).

Windowed aggregation applies the completeness rule: a window accepts a record only while
``window_end > stream_time - grace``. Later records are dropped and counted in
``dropped-records``; the output is untouched.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls user code in initializers, aggregators, reducers and the stores'
serdes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mypy_extensions import mypyc_attr

from fluvial.dsl.change import Change
from fluvial.dsl.forwarding import TableForwarder, WindowForwarder, emit
from fluvial.dsl.old_values import OldValues
from fluvial.dsl.windows import SlidingWindows, TimeWindows
from fluvial.processor.metrics import LATE, NULL_KEY, REVISIONS_EMITTED, dropped
from fluvial.processor_api import Processor
from fluvial.records import Record, Window, Windowed
from fluvial.serdes import Serde
from fluvial.state.value_format import from_timestamped_bytes, to_timestamped_bytes

log = logging.getLogger(__name__)

Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]  # (key, value, aggregate) -> aggregate


def count_aggregator(key: Any, value: Any, count: int) -> int:
    """``count()``'s aggregator: the value is never looked at."""
    return count + 1


class StreamAggregateProcessor(Processor[Any, Any]):
    """``KGroupedStream`` count/reduce/aggregate. ``initializer`` None means reduce."""

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        initializer: Initializer | None,
        aggregator: Aggregator,
        old_values: OldValues | None = None,
    ) -> None:
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.initializer = initializer
        self.aggregator = aggregator
        self.old_values = old_values  # the result table's: whether downstream reads old values

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.forwarder = TableForwarder(
            context, self.store, self.key_serde, self.value_serde, self.old_values
        )

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None or record.value is None:
            log.debug("skipping record with null key or value in %s", self.store_name)
            dropped(self.context, NULL_KEY)
            return
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        found = self.store.get(key_bytes)
        old = None if found is None else self.value_serde.deserialize(None, found[0])
        timestamp = record.timestamp_ms if found is None else max(record.timestamp_ms, found[1])
        if found is None and self.initializer is None:
            new = record.value  # reduce: the first value is the aggregate
        else:
            # A new key's old value is the initializer's, as Kafka Streams forwards it (a
            # filter downstream may then forward a deletion).
            old = old if found is not None else self.initializer()  # type: ignore[misc]
            new = self.aggregator(record.key, record.value, old)
        self.store.put(key_bytes, self.value_serde.serialize(None, new), timestamp)
        self.forwarder.maybe_forward(record.key, new, old, timestamp)


# Interpreted classes (built-in operators not compiled, and users') subclass it.
@mypyc_attr(allow_interpreted_subclasses=True)
class WindowedAggregateProcessor(Processor[Any, Any]):
    """``TimeWindowedKStream`` count/reduce/aggregate over a window store.

    Store values are the aggregate prefixed with the timestamp of its latest record, so each
    revision carries the time of the newest record in its window.
    """

    def __init__(
        self,
        store_name: str,
        windows: TimeWindows | SlidingWindows,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        initializer: Initializer | None,
        aggregator: Aggregator,
        emit_on_close: bool,
        old_values: OldValues | None = None,
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.initializer = initializer
        self.aggregator = aggregator
        self.emit_on_close = emit_on_close
        self.old_values = old_values  # the result table's: whether downstream reads old values
        self._emitted_up_to = -(2**63)  # windows starting at or before this were emitted
        # This process() takes every record with a key, null value or not, and a count never
        # reads the value: a task may hand it the value's bytes undecoded (StreamTask.initialize).
        self.reads_values = (
            aggregator is not count_aggregator
            or type(self).process is not WindowedAggregateProcessor.process
        )

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.forwarder = WindowForwarder(
            context,
            self.store,
            self.key_serde,
            self.value_serde,
            self.windows.size_ms,
            enabled=not self.emit_on_close,
            old_values=self.old_values,
        )
        stream_time = context.input_stream_time_ms()
        self._observed = stream_time
        if stream_time >= 0:
            # Resumed with a known stream time: windows closed by then were already emitted.
            self._emitted_up_to = self._last_closed_start(stream_time)
        # Without a cache every update is forwarded at once, counted here as a plain int.
        self._forward_now = self.forwarder.enabled and not self.forwarder.cached
        # Straight to the sink when to_stream() alone leads there: no Windowed, Change or Record
        # per update, and the key bytes made once for the store and the output.
        find_writer = getattr(context, "windowed_writer", None)
        self._sink_write = (
            find_writer(self.key_serde)
            if self._forward_now
            and find_writer is not None
            and isinstance(self.windows, TimeWindows)
            else None
        )
        self.revisions = 0
        context.metrics.register(REVISIONS_EMITTED, lambda: self.revisions)
        # The windows of recent records: equal windows are one object, made once.
        self._recent_windows: dict[int, Window] = {}

    def process(self, record: Record[Any, Any]) -> None:
        # A null value is aggregated like any other (a reduce starts over from it); only a
        # null key has no window to go to. As in Kafka Streams.
        if record.key is None:
            dropped(self.context, NULL_KEY)
            return
        timestamp = record.timestamp_ms
        # Stream time as this operator saw it: records dropped upstream (a filter in the same
        # task) do not close its windows.
        if timestamp > self._observed:
            self._observed = timestamp
        stream_time = self._observed
        if self.emit_on_close:
            # Before writing: the write may expire closed windows from the store.
            self._emit_closed(stream_time)
        windows: TimeWindows = self.windows  # type: ignore[assignment]  # sliding ones override process()
        close_time = stream_time - windows.grace_ms
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        # Every window containing the timestamp, oldest first (TimeWindows.windows_for, by start).
        size, advance = windows.size_ms, windows.advance_ms
        if size == advance and timestamp >= 0:
            # Tumbling: the one window that holds the timestamp.
            start = timestamp - timestamp % size
            if start + size <= close_time:
                self._drop_late(timestamp, start, stream_time)
            else:
                self._update(key_bytes, record, start)
            return
        first = timestamp - size + advance
        if first < 0:
            first = 0
        start = first - first % advance
        while start <= timestamp:
            if start + size <= close_time:
                self._drop_late(timestamp, start, stream_time)
            else:
                self._update(key_bytes, record, start)
            start += advance

    def _drop_late(self, timestamp: int, start: int, stream_time: int) -> None:
        windows = self.windows
        log.debug(
            "dropping record at %d for closed window [%d, %d) (stream time %d, grace %d)",
            timestamp, start, start + windows.size_ms, stream_time, windows.grace_ms,
        )  # fmt: skip
        dropped(self.context, LATE)

    def _update(self, key_bytes: bytes, record: Record[Any, Any], start: int) -> None:
        raw = self.store.fetch(key_bytes, start)
        timestamp = record.timestamp_ms
        if raw is None:
            if self.initializer is None:
                old, new = None, record.value  # reduce: the first value is the aggregate
            else:
                old = self.initializer()
                new = self.aggregator(record.key, record.value, old)
        else:
            found, found_timestamp = from_timestamped_bytes(raw)
            old = self.value_serde.deserialize(None, found)
            if found_timestamp > timestamp:
                timestamp = found_timestamp
            new = self.aggregator(record.key, record.value, old)
        new_bytes = self.value_serde.serialize(None, new)
        stored = None if new_bytes is None else to_timestamped_bytes(new_bytes, timestamp)
        self.store.put(key_bytes, stored, start, timestamp)  # None: the window is gone
        if self._sink_write is not None:
            self._sink_write(record.key, key_bytes, start, new, timestamp)
            self.revisions += 1
        elif self._forward_now:
            window = self._recent_windows.get(start)
            if window is None:
                if len(self._recent_windows) >= 64:
                    self._recent_windows.clear()
                window = self._recent_windows[start] = Window(start, start + self.windows.size_ms)
            self.context.forward(Record(Windowed(record.key, window), Change(new, old), timestamp))
            self.revisions += 1

    def _last_closed_start(self, stream_time: int) -> int:
        """Windows starting at or before this are closed: ``end <= stream_time - grace``."""
        return stream_time - self.windows.grace_ms - self.windows.size_ms

    def _emit_closed(self, stream_time: int) -> None:
        """Emit each window once, when ``stream_time >= window_end + grace``."""
        last_closed_start = self._last_closed_start(stream_time)
        if isinstance(self.windows, TimeWindows):
            # Time windows start on the grid of their advance, so none closes between two grid
            # points: the store is scanned once per advance of stream time, not per record.
            last_closed_start -= last_closed_start % self.windows.advance_ms
        if last_closed_start <= self._emitted_up_to:
            return
        for key_bytes, start, raw in list(
            self.store.fetch_all(self._emitted_up_to + 1, last_closed_start)
        ):
            value, timestamp = from_timestamped_bytes(raw)
            emit(
                self.context,
                Windowed(
                    self.key_serde.deserialize(None, key_bytes),
                    Window(start, start + self.windows.size_ms),
                ),
                Change(self.value_serde.deserialize(None, value), None),
                timestamp,
            )
        self._emitted_up_to = last_closed_start
