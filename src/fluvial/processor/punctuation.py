"""Punctuation schedules: callbacks driven by stream time or by the wall clock.

A schedule fires at most once per check, then moves to the next multiple of its interval after
the current time, so a big jump in time gives one punctuation rather than a burst of catch-ups.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from fluvial.processor_api import PunctuationType, Punctuator


@dataclass(order=True)
class PunctuationSchedule:
    next_time_ms: int
    seq: int
    interval_ms: int = field(compare=False)
    type: PunctuationType = field(compare=False)
    callback: Punctuator = field(compare=False)
    node_name: str = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now_ms: int) -> None:
        """Move past ``now_ms`` along the grid ``first + k * interval``."""
        nxt = self.next_time_ms + self.interval_ms
        if now_ms >= nxt:  # missed some: skip to the next grid point after now
            nxt = now_ms - ((now_ms - self.next_time_ms) % self.interval_ms) + self.interval_ms
        self.next_time_ms = nxt


class PunctuationQueue:
    """Schedules of one type, ordered by when they are due."""

    def __init__(self) -> None:
        self._heap: list[PunctuationSchedule] = []
        self._seq = itertools.count()

    def add(
        self,
        first_time_ms: int,
        interval_ms: int,
        type_: PunctuationType,
        callback: Punctuator,
        node_name: str,
    ) -> PunctuationSchedule:
        if interval_ms < 1:
            raise ValueError(f"punctuation interval must be at least 1 ms, got {interval_ms}")
        schedule = PunctuationSchedule(
            first_time_ms, next(self._seq), interval_ms, type_, callback, node_name
        )
        heapq.heappush(self._heap, schedule)
        return schedule

    def shift(self, offset_ms: int) -> None:
        """Move every schedule by ``offset_ms`` (the same for all, so the heap stays ordered)."""
        for schedule in self._heap:
            schedule.next_time_ms += offset_ms

    def due(self, now_ms: int) -> bool:
        """Whether some schedule is due at ``now_ms`` (a cheap look before :meth:`fire_due`)."""
        heap = self._heap
        return bool(heap) and heap[0].next_time_ms <= now_ms

    def fire_due(self, now_ms: int, run: Callable[[PunctuationSchedule, int], None]) -> bool:
        """Run every schedule due at ``now_ms`` once; return whether any ran."""
        fired: list[PunctuationSchedule] = []
        while self._heap and self._heap[0].next_time_ms <= now_ms:
            schedule = heapq.heappop(self._heap)
            if schedule.cancelled:
                continue
            run(schedule, now_ms)
            schedule.advance(now_ms)
            fired.append(schedule)
        for schedule in fired:
            # A callback may cancel its own schedule; drop it then.
            if not schedule.cancelled:
                heapq.heappush(self._heap, schedule)
        return bool(fired)
