"""Windowed stream-stream joins: inner, left and outer, without spurious results.

Each side keeps its records in a window store (duplicates retained, no cache) for the join
window's size plus grace. A record of the left side at ``t`` joins right records in
``[t - before, t + after]``; a right record at ``t`` joins left records in ``[t - after,
t + before]``. A store only shows records newer than its own latest timestamp minus its
retention, so a record too old for that finds nothing, but it is never dropped as late.

Left and outer joins must also emit records that found no partner, but only once no partner can
arrive any more. Such records wait in an "outer" key-value store, ordered by timestamp, and are
emitted with a ``None`` partner once stream time passes their window's end plus grace. A later
match removes them from the waiting store, so nothing is emitted that is later contradicted. A
record whose window has already ended when it arrives cannot wait: it is emitted unmatched at
once.

The timing of those emissions follows Kafka Streams exactly (the differential tests in
``tests/reference`` compare them): the join keeps its own stream time, shared by both sides;
only a record that advances it (or equals it) checks the waiting store; and the check reuses the
earliest timestamp seen at the previous check to skip scans that cannot emit anything.
"""

from __future__ import annotations

import logging
import struct
import weakref
from dataclasses import dataclass
from typing import Any

from fluvial.dsl.stream_table_join import Joiner
from fluvial.dsl.windows import JoinWindows
from fluvial.processor.metrics import NULL_KEY, dropped
from fluvial.processor_api import Processor
from fluvial.records import Record
from fluvial.serdes import Serde

log = logging.getLogger(__name__)

_LONG = struct.Struct(">q")
_LEN = struct.Struct(">i")
# Kafka Streams' layout of its waiting-store keys: at equal timestamps right records sort (and
# are emitted) before left ones.
RIGHT, LEFT = b"\x00", b"\x01"


def outer_key(timestamp_ms: int, side: bytes, key: bytes) -> bytes:
    """Waiting-store key: 8-byte BE timestamp (records are never negative), side, key bytes."""
    return _LONG.pack(timestamp_ms) + side + key


@dataclass
class JoinTime:
    """Time shared by both sides of one join in one task.

    ``stream_time`` is the largest timestamp either side has received. ``min_time`` is the
    timestamp where the last scan of the waiting store stopped (lowered by records put there
    since); while ``min_time + after + grace`` has not passed stream time, no scan happens.
    ``None`` means unknown: the next check scans.
    """

    stream_time: int = -1
    min_time: int | None = None


class JoinTimes:
    """One :class:`JoinTime` per running task, found through the task's left window store
    (both sides of the join hold the same store object), forgotten with the task."""

    def __init__(self) -> None:
        self._times: weakref.WeakKeyDictionary[Any, JoinTime] = weakref.WeakKeyDictionary()

    def of(self, left_store: Any) -> JoinTime:
        time = self._times.get(left_store)
        if time is None:
            time = self._times[left_store] = JoinTime()
        return time


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
        times: JoinTimes | None = None,
    ) -> None:
        self.times = times or JoinTimes()
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
        self.time = self.times.of(self.this_store if self.left_side else self.other_store)

    def process(self, record: Record[Any, Any]) -> None:
        ts = record.timestamp_ms
        time = self.time
        # Every record moves the join's stream time, even one skipped below.
        time.stream_time = max(time.stream_time, ts)
        if record.key is None and record.value is not None and self.emit_unmatched_this:
            # A keyless record can never match, so a left or outer join emits it at once.
            self._forward(record, record.value, None, ts)
            return
        if record.key is None or record.value is None:
            log.debug("stream-stream join skips record with null key or value")
            dropped(self.context, NULL_KEY)
            return
        if self.outer is not None and ts == time.stream_time:
            # Only a record that advances stream time can close windows.
            self._emit_unmatched()
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
        if matched or not self.emit_unmatched_this:
            return
        assert self.outer is not None
        if time_to < time.stream_time:
            # Its window ended before it arrived: no partner can come, nothing to wait for.
            self._forward(record, record.value, None, ts)
            return
        side = LEFT if self.left_side else RIGHT
        waiting_key = outer_key(ts, side, key_bytes)
        waiting = self.outer.get(waiting_key)
        values = ([] if waiting is None else unpack_values(waiting)) + [value_bytes]
        self.outer.put(waiting_key, pack_values(values), ts)
        time.min_time = ts if time.min_time is None else min(time.min_time, ts)

    def _forward(self, record: Record[Any, Any], this: Any, other: Any, ts: int) -> None:
        left, right = (this, other) if self.left_side else (other, this)
        value = self.joiner(record.key, left, right)
        self.context.forward(Record(record.key, value, ts, list(record.headers)))

    def _emit_unmatched(self) -> None:
        """Emit waiting records whose window has closed, oldest first, then forget them.

        The scan stops once it has seen a still-open record of each side: records after those
        are newer, so their windows are open too. Where it stops is remembered (``min_time``)
        so that the next scan happens only once that record's window may have closed.
        """
        assert self.outer is not None
        time, grace = self.time, self.windows.grace_ms
        if time.min_time is not None and time.min_time + self.after + grace >= time.stream_time:
            return
        time.min_time = None
        left_open = right_open = False
        left_after, right_after = self.windows.after_ms, self.windows.before_ms
        left_serde = self.this_serde if self.left_side else self.other_serde
        right_serde = self.other_serde if self.left_side else self.this_serde
        # Kafka Streams' waiting store holds a list of values per key and its scan visits each
        # value as an entry of its own: the scan's bookkeeping (and where it stops) goes by
        # value, not by key.
        for store_key, data in list(self.outer.range(None, None)):
            ts = _LONG.unpack_from(store_key)[0]
            side = store_key[8:9]
            is_open = ts + (left_after if side == LEFT else right_after) + grace >= time.stream_time
            key = None if is_open else self.key_serde.deserialize(None, store_key[9:])
            for value_bytes in unpack_values(data):
                time.min_time = ts
                if left_open and right_open:
                    return
                if is_open:
                    if side == LEFT:
                        left_open = True
                    else:
                        right_open = True
                    continue
                if side == LEFT:
                    value = self.joiner(key, left_serde.deserialize(None, value_bytes), None)
                else:
                    value = self.joiner(key, None, right_serde.deserialize(None, value_bytes))
                self.context.forward(Record(key, value, ts))
            if not is_open:
                self.outer.put(store_key, None, ts)
