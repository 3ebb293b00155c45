"""Sliding-window aggregation: windows ``[start, start + d]`` (both inclusive) placed by records.

Only windows whose contents differ are kept: for each record at ``t`` its *left* window
``[t - d, t]`` (ending at the record) and, when later records exist within ``d + 1`` of it, its
*right* window ``[t + 1, t + 1 + d]`` (starting just after it). Records before ``d`` share
one window ``[0, d]`` instead of left windows with negative starts, as in Kafka Streams.

Records are not stored, only window aggregates, so a new window must take its aggregate from an
existing window that holds exactly the same records:

- a new left window copies the window with the latest start before ``t - d``, when that window
  holds a record no older than ``t - d`` (it then holds exactly the records of ``[t - d, t)``);
- a new right window (out-of-order record) copies the latest-starting window that contains
  ``t`` without ending at it, taken before ``t`` is added, when it holds a record after ``t``;
- the previous record's right window, if missing, holds only the new record.

A record reads the windows starting up to ``2 * d`` before it, latest first, exactly as Kafka
Streams does: the same windows are found, created and revised in the same order.

The end is inclusive, so a window stays open while ``end >= stream_time - grace`` (a record at
``end`` may still arrive then). A record updates only open windows; a record none of whose
windows is open is dropped and counted.
"""

from __future__ import annotations

import logging
from typing import Any

from fluvial.dsl.aggregate import WindowedAggregateProcessor
from fluvial.processor.metrics import LATE, NULL_KEY, dropped
from fluvial.records import Record, Window
from fluvial.state.value_format import from_timestamped_bytes, to_timestamped_bytes

log = logging.getLogger(__name__)

Aggregate = tuple[bytes, int]  # (aggregate bytes, timestamp of the window's newest record)


class SlidingWindowAggregateProcessor(WindowedAggregateProcessor):
    """``windowed_by(SlidingWindows...)``: count/reduce/aggregate, store values timestamped."""

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None or record.value is None:
            dropped(self.context, NULL_KEY)
            return
        d = self.windows.size_ms
        self._observed = max(self._observed, record.timestamp_ms)
        stream_time = self._observed
        self.close_time = stream_time - self.windows.grace_ms
        t = record.timestamp_ms
        if t + d < self.close_time:
            log.debug("dropping record at %d: every window containing it closed", t)
            dropped(self.context, LATE)
            return
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        self.record = record
        self.key_bytes = key_bytes
        if t < d:
            self._process_early(t, d)  # as in Kafka Streams, no final results are emitted here
            return
        if self.emit_on_close:
            # Before this record's writes, which may expire closed windows from the store.
            self._emit_closed(stream_time)
        self._process_regular(t, d)

    def _process_regular(self, t: int, d: int) -> None:
        """Windows are visited latest start first, as Kafka Streams does, so revisions of
        existing windows come out in that order."""
        starts: set[int] = set()
        left_exists = right_exists = False
        before_left: Aggregate | None = None  # latest-starting window ending before t
        containing: Aggregate | None = None  # latest-starting window containing t, not ending there
        previous: int | None = None  # timestamp of the latest record before t, when known
        windows: list[tuple[int, bytes]] = list(
            self.store.fetch_range(self.key_bytes, max(0, t - 2 * d), t + 1)
        )
        for start, raw in reversed(windows):
            starts.add(start)
            found = from_timestamped_bytes(raw)
            end = start + d
            if start == t + 1:
                right_exists = True
            elif end > t:
                if containing is None:
                    containing = found
                self._add(start, found)
            elif end == t:
                left_exists = True
                self._add(start, found)
                if found[1] >= t:
                    return  # a record at t came before: every window it needs exists
                previous = found[1]
            else:
                before_left = found
                previous = found[1]
                break
        # Kafka Streams' order of new windows (and so of their revisions): the previous
        # record's right window, this record's left window, then its right window.
        if previous is not None and previous + 1 not in starts and previous + 1 + d >= t:
            self._add(previous + 1, None)  # the previous record's right window: only t so far
        if not left_exists:
            if before_left is not None and previous is not None and previous >= t - d:
                self._add(t - d, (before_left[0], t))
            else:
                self._add(t - d, None)
        if not right_exists and containing is not None and containing[1] > t:
            self._copy(t + 1, containing)

    def _process_early(self, t: int, d: int) -> None:
        """Records up to ``d`` all share ``[0, d]``; their right windows work as usual."""
        combined: Aggregate | None = None
        containing: Aggregate | None = None
        right_exists = False
        previous: int | None = None
        starts = set()
        for start, raw in list(self.store.fetch_range(self.key_bytes, 0, t + 1)):
            starts.add(start)
            found = from_timestamped_bytes(raw)
            if start == 0:
                combined = found
                if found[1] < t:
                    previous = found[1]
            elif start <= t:
                containing = found
                self._add(start, found)
            elif start == t + 1:
                right_exists = True
        if containing is None and combined is not None and combined[1] > t:
            # No window starts between 0 and t, so nothing lies before t: [0, d] holds
            # exactly the records after t that the new right window needs.
            containing = combined
        if not right_exists and containing is not None and containing[1] > t:
            self._copy(t + 1, containing)
        if previous is not None and previous + 1 not in starts:
            self._add(previous + 1, None)
        self._add(0, combined)

    # -- window writes ----------------------------------------------------------------------
    def _open(self, start: int) -> bool:
        return start + self.windows.size_ms >= self.close_time

    def _last_closed_start(self, stream_time: int) -> int:
        # Inclusive ends: a window closes once its end is *before* stream time - grace.
        return super()._last_closed_start(stream_time) - 1

    def _add(self, start: int, existing: Aggregate | None) -> None:
        """Add the current record to the window at ``start`` (``existing`` None: a new window)."""
        if not self._open(start):
            return
        record = self.record
        old = None if existing is None else self.value_serde.deserialize(None, existing[0])
        if existing is None and self.initializer is None:
            new = record.value  # reduce: the first value is the aggregate
        else:
            old = old if existing is not None else self.initializer()  # type: ignore[misc]
            new = self.aggregator(record.key, record.value, old)
        timestamp = (
            record.timestamp_ms if existing is None else max(existing[1], record.timestamp_ms)
        )
        self._write(
            start,
            self.value_serde.serialize(None, new),
            timestamp,
            new,
            old,
        )

    def _copy(self, start: int, source: Aggregate) -> None:
        """Create a window holding the same records as ``source`` (none of them the current)."""
        if not self._open(start):
            return
        value = self.value_serde.deserialize(None, source[0])
        self._write(start, source[0], source[1], value, None)

    def _write(
        self, start: int, agg_bytes: bytes | None, timestamp: int, new: Any, old: Any
    ) -> None:
        assert agg_bytes is not None
        self.store.put(self.key_bytes, to_timestamped_bytes(agg_bytes, timestamp), start, timestamp)
        window = Window(start, start + self.windows.size_ms)
        self.forwarder.maybe_forward(self.record.key, window, new, old, timestamp)
