"""Time windows: which windows a timestamp falls into, and how long they accept late records.

``SlidingWindows``, ``SessionWindows`` and ``JoinWindows`` come with the DSL breadth work
(issue 4); they will sit next to :class:`TimeWindows` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from fluvial.config import to_millis
from fluvial.records import Window


@dataclass(frozen=True)
class TimeWindows:
    """Epoch-aligned ``[start, end)`` windows: tumbling, or hopping with ``advance_by``.

    A window accepts records while ``window_end > stream_time - grace``.
    """

    size_ms: int
    advance_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"window size must be positive, got {self.size_ms} ms")
        if not 0 < self.advance_ms <= self.size_ms:
            raise ValueError(
                f"window advance must be in (0, size={self.size_ms}] ms, got {self.advance_ms}: "
                "an advance larger than the size would leave gaps"
            )

    @staticmethod
    def of_size_with_no_grace(size_ms: int | timedelta) -> TimeWindows:
        """Tumbling windows that close as soon as stream time passes their end."""
        size = to_millis(size_ms, "window size")
        return TimeWindows(size, size, 0)

    @staticmethod
    def of_size_and_grace(size_ms: int | timedelta, grace_ms: int | timedelta) -> TimeWindows:
        """Tumbling windows that still accept records ``grace_ms`` after their end."""
        size = to_millis(size_ms, "window size")
        return TimeWindows(size, size, to_millis(grace_ms, "grace"))

    def advance_by(self, advance_ms: int | timedelta) -> TimeWindows:
        """Hopping windows: a new window every ``advance_ms``; a record lands in each it overlaps."""
        return TimeWindows(self.size_ms, to_millis(advance_ms, "advance"), self.grace_ms)

    def windows_for(self, timestamp_ms: int) -> list[Window]:
        """Every window containing ``timestamp_ms``, oldest first."""
        first = max(0, timestamp_ms - self.size_ms + self.advance_ms)
        start = first - first % self.advance_ms
        out = []
        while start <= timestamp_ms:
            out.append(Window(start, start + self.size_ms))
            start += self.advance_ms
        return out
