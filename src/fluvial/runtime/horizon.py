"""Which part of a window or session changelog a store still needs.

A window store holds a window until the store's stream time passes the window's start by the
store's retention; its changelog must hold the latest record of every window it still holds.
The broker may delete a time-retained changelog's oldest records (by retention, or by an
operator's DeleteRecords). A restore that starts above records the store still needs would come
back short in silence, so every commit records, with the input offsets, the lowest changelog
offset the store may still need (``needed_from``). Restoration checks it against the log start.

Offsets are tracked per commit span, not per record: every record a span wrote belongs to a
window that starts no later than the task's stream time at the span's commit (plus one, for
the right-hand windows sliding windows create). Once the newest timestamp written to the
changelog is a full ``margin`` (retention + window size) past that bound, the store holds none
of the span's windows any more and the span is no longer needed. A span is kept a little longer
than necessary, never shorter: the check may refuse a restore it could have allowed, never the
other way round.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# At most about this many spans per margin: older spans are merged into their successors.
SPANS_PER_MARGIN = 32
NO_TIME = -(2**63)


@dataclass
class _Span:
    start: int  # the first changelog offset the span may hold
    newest_start: int  # no window written in the span starts later than this


@dataclass(frozen=True)
class Needed:
    """What a commit records of one time-retained changelog partition."""

    needed_from: int  # the lowest changelog offset the store may still need
    newest_start: int  # no window at or above needed_from starts later than this
    newest_written: int  # the newest record timestamp written to the changelog so far


class ChangelogHorizon:
    """The lowest offset of one changelog partition that its store may still need."""

    def __init__(self, margin_ms: int, end: int) -> None:
        self.margin_ms = max(1, margin_ms)
        self._spans: deque[_Span] = deque()
        self._end = end  # every record written from now on lands at or above this offset
        self.newest_written = NO_TIME

    def resume(self, needed: Needed) -> None:
        """Start from what the last commit recorded: everything from its offset is needed."""
        self.newest_written = max(self.newest_written, needed.newest_written)
        if needed.needed_from < self._end:
            self._spans.appendleft(_Span(needed.needed_from, needed.newest_start))

    def committed(self, end: int, stream_time: int, newest_written: int) -> None:
        """A commit made records below ``end`` durable, written while stream time <= stream_time."""
        self.newest_written = max(self.newest_written, newest_written)
        if end > self._end:
            bound = stream_time + 1
            last = self._spans[-1] if self._spans else None
            if last is not None and bound - last.newest_start < self.margin_ms // SPANS_PER_MARGIN:
                last.newest_start = max(last.newest_start, bound)  # merge: later, never earlier
            else:
                self._spans.append(_Span(self._end, bound))
            self._end = end
        while self._spans and self._spans[0].newest_start + self.margin_ms <= self.newest_written:
            self._spans.popleft()

    def needed(self) -> Needed:
        if self._spans:
            first = self._spans[0]
            newest_start = max(s.newest_start for s in self._spans)
            return Needed(first.start, newest_start, self.newest_written)
        return Needed(self._end, NO_TIME, self.newest_written)
