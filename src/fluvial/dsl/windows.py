"""Window specifications: which windows a record falls into, and how long they accept late records.

- :class:`TimeWindows`: epoch-aligned ``[start, end)`` windows, tumbling or hopping.
- :class:`SlidingWindows`: windows of a fixed time difference whose bounds are both inclusive;
  which windows exist depends on the records themselves (see :mod:`fluvial.dsl.sliding`).
- :class:`SessionWindows`: per-key activity periods separated by an inactivity gap.
- :class:`JoinWindows`: how far apart two records of a stream-stream join may be.

Every one carries a grace period: a window accepts records while
``window_end > stream_time - grace`` (sessions: their inclusive end ``>= stream_time - grace``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fluvial import serdes
from fluvial.config import to_millis
from fluvial.records import Window
from fluvial.serdes import Serde

Duration = int | timedelta


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
        _check_grace(self.grace_ms)

    @staticmethod
    def of_size_with_no_grace(size_ms: Duration) -> TimeWindows:
        """Tumbling windows that close as soon as stream time passes their end."""
        size = to_millis(size_ms, "window size")
        return TimeWindows(size, size, 0)

    @staticmethod
    def of_size_and_grace(size_ms: Duration, grace_ms: Duration) -> TimeWindows:
        """Tumbling windows that still accept records ``grace_ms`` after their end."""
        size = to_millis(size_ms, "window size")
        return TimeWindows(size, size, to_millis(grace_ms, "grace"))

    def advance_by(self, advance_ms: Duration) -> TimeWindows:
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

    def windowed_key_serde(self, inner: Serde[Any]) -> Serde[Any]:
        """Output keys: inner key + 8-byte window start; the end is start + size."""
        return serdes.time_windowed(inner, self.size_ms)


@dataclass(frozen=True)
class SlidingWindows:
    """Windows ``[start, start + time_difference]``, both bounds inclusive, placed by records.

    Two records fall in a common window exactly when their timestamps differ by at most
    ``time_difference_ms``. Output keys are ``Windowed`` with ``end = start + time_difference``.
    """

    time_difference_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.time_difference_ms <= 0:
            raise ValueError(
                f"sliding window time difference must be positive, got {self.time_difference_ms}"
            )
        _check_grace(self.grace_ms)

    @staticmethod
    def of_time_difference_and_grace(
        time_difference_ms: Duration, grace_ms: Duration
    ) -> SlidingWindows:
        """Sliding windows for records at most ``time_difference_ms`` apart, open to late
        records for ``grace_ms``.

        ```python
        grouped.windowed_by(SlidingWindows.of_time_difference_and_grace(10_000, 2_000)).count()
        ```

        :param time_difference_ms: the largest difference of two timestamps that share a window
            (int milliseconds or a ``timedelta``).
        :param grace_ms: how long after a window's end, in stream time, a late record is still
            added; later ones are dropped and counted.
        :returns: the windows, for ``KGroupedStream.windowed_by``.
        """
        return SlidingWindows(
            to_millis(time_difference_ms, "time difference"), to_millis(grace_ms, "grace")
        )

    @staticmethod
    def of_time_difference_with_no_grace(time_difference_ms: Duration) -> SlidingWindows:
        """Sliding windows for records at most ``time_difference_ms`` apart, with no grace period.

        :param time_difference_ms: the largest difference of two timestamps that share a window.
        :returns: the windows, for ``KGroupedStream.windowed_by``.
        """
        return SlidingWindows(to_millis(time_difference_ms, "time difference"), 0)

    @property
    def size_ms(self) -> int:
        """What a window store and a windowed serde call the window size."""
        return self.time_difference_ms

    def windowed_key_serde(self, inner: Serde[Any]) -> Serde[Any]:
        """The serde of output keys: the inner key's bytes + 8-byte window start (as time windows).

        :param inner: the serde of the inner key.
        :returns: a serde of ``Windowed`` keys whose window end is start + time difference.
        """
        return serdes.time_windowed(inner, self.time_difference_ms)


@dataclass(frozen=True)
class SessionWindows:
    """Sessions: a key's records no more than ``inactivity_gap_ms`` apart share a window.

    A session's window is ``[first record, last record]``, both inclusive. A late record that
    falls within the gap of two sessions merges them into one.
    """

    inactivity_gap_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.inactivity_gap_ms <= 0:
            raise ValueError(
                f"session inactivity gap must be positive, got {self.inactivity_gap_ms}"
            )
        _check_grace(self.grace_ms)

    @staticmethod
    def of_inactivity_gap_and_grace(gap_ms: Duration, grace_ms: Duration) -> SessionWindows:
        """Sessions that end after ``gap_ms`` without a record, open to late records for
        ``grace_ms``.

        ```python
        grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(30 * 60_000, 60_000)).count()
        ```

        :param gap_ms: the inactivity gap: records of a key at most this far apart share a session
            (int milliseconds or a ``timedelta``).
        :param grace_ms: how long after a session's end, in stream time, a late record may still
            extend or merge it; later ones are dropped and counted.
        :returns: the windows, for ``KGroupedStream.windowed_by``.
        """
        return SessionWindows(to_millis(gap_ms, "inactivity gap"), to_millis(grace_ms, "grace"))

    @staticmethod
    def of_inactivity_gap_with_no_grace(gap_ms: Duration) -> SessionWindows:
        """Sessions that end after ``gap_ms`` without a record, with no grace period.

        :param gap_ms: the inactivity gap: records of a key at most this far apart share a session.
        :returns: the windows, for ``KGroupedStream.windowed_by``.
        """
        return SessionWindows(to_millis(gap_ms, "inactivity gap"), 0)

    def windowed_key_serde(self, inner: Serde[Any]) -> Serde[Any]:
        """Output keys: inner key + 8-byte end + 8-byte start (Kafka Streams' session keys)."""
        return serdes.session_windowed(inner)


@dataclass(frozen=True)
class JoinWindows:
    """A stream-stream join pairs a left record at ``t`` with right records in
    ``[t - before_ms, t + after_ms]``.

    ``grace_ms`` is how long after that interval closes (in stream time) a late record may still
    join; it is also when left and outer joins give up and emit a record without a partner.
    """

    before_ms: int
    after_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise ValueError(
                f"join window [-{self.before_ms}, +{self.after_ms}] is empty: before + after "
                "must not be negative"
            )
        _check_grace(self.grace_ms)

    @staticmethod
    def of_time_difference_and_grace(
        time_difference_ms: Duration, grace_ms: Duration
    ) -> JoinWindows:
        """Join records whose timestamps differ by at most ``time_difference_ms``, either way.

        ```python
        clicks.join(views, lambda click, view: {**click, **view},
                    JoinWindows.of_time_difference_and_grace(5_000, 1_000))
        ```

        :param time_difference_ms: how far apart (before or after) two records may be and still join
            (int milliseconds or a ``timedelta``); ``before``/``after`` make it asymmetric.
        :param grace_ms: how long after the join window closes, in stream time, a late record may
            still join; left and outer joins emit an unmatched record only then.
        :returns: the windows, for ``KStream.join``, ``left_join`` and ``outer_join``.
        """
        diff = to_millis(time_difference_ms, "time difference")
        return JoinWindows(diff, diff, to_millis(grace_ms, "grace"))

    @staticmethod
    def of_time_difference_without_grace(time_difference_ms: Duration) -> JoinWindows:
        """Join records whose timestamps differ by at most ``time_difference_ms``, with no
        grace period (also named ``of_time_difference_with_no_grace``).

        :param time_difference_ms: how far apart (before or after) two records may be and still
            join.
        :returns: the windows, for ``KStream.join``, ``left_join`` and ``outer_join``.
        """
        diff = to_millis(time_difference_ms, "time difference")
        return JoinWindows(diff, diff, 0)

    of_time_difference_with_no_grace = of_time_difference_without_grace

    def before(self, before_ms: Duration) -> JoinWindows:
        """How much earlier than a left record a right record may be (may be negative)."""
        return JoinWindows(to_millis_signed(before_ms), self.after_ms, self.grace_ms)

    def after(self, after_ms: Duration) -> JoinWindows:
        """How much later than a left record a right record may be (may be negative)."""
        return JoinWindows(self.before_ms, to_millis_signed(after_ms), self.grace_ms)

    @property
    def size_ms(self) -> int:
        """The span of the join window: ``before_ms + after_ms``."""
        return self.before_ms + self.after_ms


def to_millis_signed(value: Duration) -> int:
    if isinstance(value, timedelta):
        return int(value / timedelta(milliseconds=1))
    return int(value)


def _check_grace(grace_ms: int) -> None:
    if grace_ms < 0:
        raise ValueError(f"grace must not be negative, got {grace_ms} ms")


AnyWindows = TimeWindows | SlidingWindows | SessionWindows
