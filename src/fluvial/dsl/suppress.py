"""The suppression buffer: hold a table's revisions back, then emit the latest one per key.

Each key is buffered with a *buffer time*: its window end (``until_window_closes``) or the
timestamp of its first held update (``until_time_limit``). A key leaves the buffer once
``buffer_time <= stream_time - delay``, where the delay is the grace period or the time limit.
Held updates of a key collapse into one ``Change(latest new, oldest old)``, which is exactly what
a downstream table aggregation needs to subtract and add correctly.

The buffer lives in a key-value store, so its changelog makes it survive restarts; an in-memory
time index over it is rebuilt in ``init``.
"""

from __future__ import annotations

import heapq
import struct
from typing import Any

from fluvial.dsl.change import Change, change_serde
from fluvial.dsl.forwarding import emit
from fluvial.dsl.suppressed import SHUT_DOWN, Suppressed
from fluvial.errors import BufferFullError
from fluvial.processor.metrics import SUPPRESSION_EMITS
from fluvial.processor_api import Processor
from fluvial.records import Record, Windowed
from fluvial.serdes import Serde

_HEADER = struct.Struct(">qq")  # buffer time, record timestamp


class SuppressProcessor(Processor[Any, Any]):
    def __init__(
        self,
        name: str,
        store_name: str,
        suppressed: Suppressed,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        grace_ms: int | None,
    ) -> None:
        self.name = name
        self.store_name = store_name
        self.suppressed = suppressed
        self.key_serde = key_serde
        self.change_serde = change_serde(value_serde)
        self.final_results = suppressed.kind == "window_close"
        delay = grace_ms if self.final_results else suppressed.time_limit_ms
        assert delay is not None
        self.delay_ms: int = delay

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        # key bytes -> buffer time; heap of (buffer time, key bytes) with stale entries skipped.
        self._times: dict[bytes, int] = {}
        self._heap: list[tuple[int, bytes]] = []
        self._bytes = 0
        # Stream time as this operator saw it (records it received), as in Kafka Streams:
        # records dropped upstream (a null key before an aggregation) do not release results.
        self._observed = context.input_stream_time_ms()
        for key_bytes, raw in self.store.all():
            buffer_time = _HEADER.unpack_from(raw)[0]
            self._index(key_bytes, buffer_time)
            self._bytes += len(key_bytes) + len(raw)

    def process(self, record: Record[Any, Any]) -> None:
        self._observed = max(self._observed, record.timestamp_ms)
        change: Change[Any] = record.value
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        previous = self.store.get(key_bytes)
        if previous is None:
            buffer_time = self._buffer_time(record)
            oldest_old = change.old_value
        else:
            # Keep the first buffer time and the first old value: the old value is what
            # downstream last saw for this key.
            buffer_time = _HEADER.unpack_from(previous)[0]
            oldest_old = self.change_serde.deserialize(None, previous[_HEADER.size :]).old_value  # type: ignore[union-attr]
            self._bytes -= len(key_bytes) + len(previous)
        body = self.change_serde.serialize(None, Change(change.new_value, oldest_old))
        assert body is not None
        raw = _HEADER.pack(buffer_time, record.timestamp_ms) + body
        self.store.put(key_bytes, raw, record.timestamp_ms)
        self._bytes += len(key_bytes) + len(raw)
        if previous is None:
            self._index(key_bytes, buffer_time)
        self._emit_due()
        self._enforce_limits()

    def _buffer_time(self, record: Record[Any, Any]) -> int:
        if self.final_results:
            key = record.key
            if not isinstance(key, Windowed):
                raise TypeError(
                    f"{self.name}: suppress(until_window_closes) needs windowed keys, got {key!r}"
                )
            return key.window.end_ms
        return record.timestamp_ms

    def _index(self, key_bytes: bytes, buffer_time: int) -> None:
        self._times[key_bytes] = buffer_time
        heapq.heappush(self._heap, (buffer_time, key_bytes))

    def _emit_due(self) -> None:
        expiry = self._observed - self.delay_ms
        while self._heap and self._heap[0][0] <= expiry:
            self._emit_oldest()

    def _emit_oldest(self) -> None:
        buffer_time, key_bytes = heapq.heappop(self._heap)
        if self._times.get(key_bytes) != buffer_time:
            return  # stale heap entry
        del self._times[key_bytes]
        raw = self.store.get(key_bytes)
        assert raw is not None
        self._bytes -= len(key_bytes) + len(raw)
        timestamp = _HEADER.unpack_from(raw)[1]
        change = self.change_serde.deserialize(None, raw[_HEADER.size :])
        assert change is not None
        self.store.put(key_bytes, None, timestamp)
        if self.final_results and change.new_value is None:
            # A window deleted before it closed (a session replaced by a merge) never had a
            # final result, so downstream has nothing to delete.
            return
        emit(self.context, self.key_serde.deserialize(None, key_bytes), change, timestamp)
        self.context.metrics.increment(SUPPRESSION_EMITS)

    def _over_limit(self) -> bool:
        buffer = self.suppressed.buffer
        return (buffer.record_limit is not None and len(self._times) > buffer.record_limit) or (
            buffer.byte_limit is not None and self._bytes > buffer.byte_limit
        )

    def _enforce_limits(self) -> None:
        if not self._over_limit():
            return
        buffer = self.suppressed.buffer
        if buffer.when_full == SHUT_DOWN:
            raise BufferFullError(
                f"suppression buffer of {self.name!r} is full ({len(self._times)} records, "
                f"{self._bytes} bytes; limits: max_records={buffer.record_limit}, "
                f"max_bytes={buffer.byte_limit}) and is set to shut down when full: raise the "
                "limits, use BufferConfig.unbounded(), or emit_early_when_full() if early "
                "results are acceptable"
            )
        while self._over_limit() and self._times:
            self._emit_oldest()
