"""Windowed stream-stream joins: inner, left and outer, without spurious results.

Each side keeps its records in a window store (duplicates retained, no cache) for as long as a
record of the other side may still join with them. A record of the left side at ``t`` joins
right records in ``[t - before, t + after]``; a right record at ``t`` joins left records in
``[t - after, t + before]``. A record arriving after its own join window closed
(``stream_time > t + window_after + grace``) is dropped and counted.

Left and outer joins must also emit records that found no partner, but only once no partner can
arrive any more. Such records wait in an "outer" key-value store, ordered by timestamp, and are
emitted with a ``None`` partner when stream time passes their window's close. A later match
removes them from the waiting store, so nothing is emitted that is later contradicted.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from fluvial.dsl.stream_table_join import Joiner
from fluvial.dsl.windows import JoinWindows
from fluvial.processor.api import Processor
from fluvial.processor.metrics import DROPPED_RECORDS
from fluvial.records import Record
from fluvial.serdes import Serde

log = logging.getLogger(__name__)

_LONG = struct.Struct(">q")
_LEN = struct.Struct(">i")
LEFT, RIGHT = b"\x00", b"\x01"


def outer_key(timestamp_ms: int, side: bytes, key: bytes) -> bytes:
    """Waiting-store key: 8-byte BE timestamp (records are never negative), side, key bytes."""
    return _LONG.pack(timestamp_ms) + side + key


def pack_values(values: list[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(v)) + v for v in values)


def unpack_values(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (length,) = _LEN.unpack_from(data, pos)
        out.append(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return out


class StreamStreamJoinProcessor(Processor[Any, Any]):
    """One side of a stream-stream join; the other side runs the mirror-image processor."""

    def __init__(
        self,
        *,
        left_side: bool,
        windows: JoinWindows,
        joiner: Joiner,
        this_store: str,
        other_store: str,
        outer_store: str | None,
        emit_unmatched_this: bool,
        key_serde: Serde[Any],
        this_serde: Serde[Any],
        other_serde: Serde[Any],
    ) -> None:
        self.left_side = left_side
        self.windows = windows
        self.joiner = joiner
        self.names = (this_store, other_store, outer_store)
        self.emit_unmatched_this = emit_unmatched_this
        self.key_serde = key_serde
        self.this_serde = this_serde
        self.other_serde = other_serde
        # How far the other side's matches reach before and after one of this side's records.
        if left_side:
            self.before, self.after = windows.before_ms, windows.after_ms
        else:
            self.before, self.after = windows.after_ms, windows.before_ms

    def init(self, context: Any) -> None:
        super().init(context)
        this_store, other_store, outer_store = self.names
        self.this_store = context.get_state_store(this_store)
        self.other_store = context.get_state_store(other_store)
        self.outer = None if outer_store is None else context.get_state_store(outer_store)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None or record.value is None:
            log.debug("stream-stream join skips record with null key or value")
            self.context.metrics.increment(DROPPED_RECORDS)
            return
        ts = record.timestamp_ms
        stream_time = self.context.current_stream_time_ms()
        if ts + self.after + self.windows.grace_ms < stream_time:
            log.debug("dropping late join record at %d (stream time %d)", ts, stream_time)
            self.context.metrics.increment(DROPPED_RECORDS)
            return
        if self.outer is not None:
            # Older waiting records first: their windows closed before this record's time.
            self._emit_unmatched(stream_time)
        key_bytes = self.key_serde.serialize(None, record.key)
        value_bytes = self.this_serde.serialize(None, record.value)
        assert key_bytes is not None and value_bytes is not None
        self.this_store.put(key_bytes, value_bytes, ts, ts)
        matched = False
        time_from, time_to = max(0, ts - self.before), max(0, ts + self.after)
        for other_ts, other_bytes in list(
            self.other_store.fetch_range(key_bytes, time_from, time_to)
        ):
            matched = True
            other = self.other_serde.deserialize(None, other_bytes)
            self._forward(record, record.value, other, max(ts, other_ts))
            if self.outer is not None:
                # The partner waited for a match and got one: it must never be emitted alone.
                side = RIGHT if self.left_side else LEFT
                self.outer.put(outer_key(other_ts, side, key_bytes), None, ts)
        if not matched and self.emit_unmatched_this:
            assert self.outer is not None
            side = LEFT if self.left_side else RIGHT
            waiting_key = outer_key(ts, side, key_bytes)
            waiting = self.outer.get(waiting_key)
            values = ([] if waiting is None else unpack_values(waiting)) + [value_bytes]
            self.outer.put(waiting_key, pack_values(values), ts)

    def _forward(self, record: Record[Any, Any], this: Any, other: Any, ts: int) -> None:
        left, right = (this, other) if self.left_side else (other, this)
        value = self.joiner(record.key, left, right)
        self.context.forward(Record(record.key, value, ts, list(record.headers)))

    def _emit_unmatched(self, stream_time: int) -> None:
        """Emit waiting records whose join window has closed, oldest first, then forget them."""
        assert self.outer is not None
        grace = self.windows.grace_ms
        left_after, right_after = self.windows.after_ms, self.windows.before_ms
        newest_closed = stream_time - grace - min(left_after, right_after) - 1
        if newest_closed < 0:
            return
        upper = _LONG.pack(newest_closed) + b"\xff"
        for store_key, data in list(self.outer.range(None, upper)):
            ts = _LONG.unpack_from(store_key)[0]
            side = store_key[8:9]
            after = left_after if side == LEFT else right_after
            if ts + after + grace >= stream_time:
                continue  # this side's window is still open
            key = self.key_serde.deserialize(None, store_key[9:])
            left_serde = self.this_serde if self.left_side else self.other_serde
            right_serde = self.other_serde if self.left_side else self.this_serde
            for value_bytes in unpack_values(data):
                if side == LEFT:
                    value = self.joiner(key, left_serde.deserialize(None, value_bytes), None)
                else:
                    value = self.joiner(key, None, right_serde.deserialize(None, value_bytes))
                self.context.forward(Record(key, value, ts))
            self.outer.put(store_key, None, ts)
