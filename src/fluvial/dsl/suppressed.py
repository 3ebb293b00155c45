"""``Suppressed`` and ``EmitStrategy``: when revisions leave a table.

By default every update is emitted at once (completeness without waiting). These settings hold
updates back: until a window closes (one final result), or for a time limit, bounded by a
buffer whose overflow either emits early or stops the application.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from fluvial.config import to_millis

EMIT_EARLY = "emit_early"
SHUT_DOWN = "shut_down"


@dataclass(frozen=True)
class BufferConfig:
    """Limits of a suppression buffer and what to do when it is full."""

    record_limit: int | None = None
    byte_limit: int | None = None
    when_full: str = EMIT_EARLY

    @staticmethod
    def unbounded() -> BufferConfig:
        """No limit (memory permitting): the only config that never emits early or fails."""
        return BufferConfig(None, None, SHUT_DOWN)

    @staticmethod
    def max_records(limit: int) -> BufferConfig:
        """At most ``limit`` buffered keys; emits early when full unless told to shut down."""
        return BufferConfig(record_limit=_positive(limit, "max_records"))

    @staticmethod
    def max_bytes(limit: int) -> BufferConfig:
        """At most ``limit`` bytes of serialized keys and values."""
        return BufferConfig(byte_limit=_positive(limit, "max_bytes"))

    def with_max_records(self, limit: int) -> BufferConfig:
        """A copy that also holds at most ``limit`` keys.

        :param limit: the number of buffered keys (positive).
        :returns: a copy with that limit and the other settings kept.
        """
        return replace(self, record_limit=_positive(limit, "max_records"))

    def with_max_bytes(self, limit: int) -> BufferConfig:
        """A copy that also holds at most ``limit`` bytes of serialized keys and values.

        :param limit: the byte limit (positive).
        :returns: a copy with that limit and the other settings kept.
        """
        return replace(self, byte_limit=_positive(limit, "max_bytes"))

    def emit_early_when_full(self) -> BufferConfig:
        """When full, emit the oldest buffered results before their time."""
        return replace(self, when_full=EMIT_EARLY)

    def shut_down_when_full(self) -> BufferConfig:
        """When full, stop the application with a BufferFullError rather than emit early."""
        return replace(self, when_full=SHUT_DOWN)

    @property
    def bounded(self) -> bool:
        """Whether a record or byte limit is set."""
        return self.record_limit is not None or self.byte_limit is not None


@dataclass(frozen=True)
class Suppressed:
    """Argument of ``KTable.suppress``."""

    kind: str  # "window_close" | "time_limit"
    buffer: BufferConfig
    time_limit_ms: int = 0
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer: BufferConfig | None = None) -> Suppressed:
        """One final result per window, once stream time reaches ``window end + grace``.

        The buffer must not emit early (that would not be final): use ``BufferConfig.unbounded()``
        or a bounded config with ``shut_down_when_full()``.
        """
        buffer = buffer or BufferConfig.unbounded()
        if buffer.when_full == EMIT_EARLY and buffer.bounded:
            raise ValueError(
                "until_window_closes promises final results, so its buffer cannot emit early: "
                "use BufferConfig.unbounded() or .shut_down_when_full(), or until_time_limit(...)"
            )
        return Suppressed("window_close", buffer)

    @staticmethod
    def until_time_limit(
        time_limit: int | timedelta, buffer: BufferConfig | None = None
    ) -> Suppressed:
        """Hold each key's updates until ``time_limit`` of stream time after its first update."""
        return Suppressed(
            "time_limit", buffer or BufferConfig.unbounded(), to_millis(time_limit, "time limit")
        )

    def with_name(self, name: str) -> Suppressed:
        """A copy whose suppression processor has this name, and its buffer store ``<name>-store``.

        :param name: the name, instead of a generated one.
        :returns: a copy with that name.
        """
        return replace(self, name=name)


# So that ``Suppressed.BufferConfig.max_records(...)`` reads as in Kafka Streams.
Suppressed.BufferConfig = BufferConfig  # type: ignore[attr-defined]


@dataclass(frozen=True)
class EmitStrategy:
    """When a windowed aggregation emits: on every update (default) or once, at window close."""

    on_close: bool

    @staticmethod
    def on_window_update() -> EmitStrategy:
        """Emit a revision of a window's result on every record (the default).

        :returns: the strategy, for ``TimeWindowedKStream.emit_strategy``.
        """
        return EmitStrategy(False)

    @staticmethod
    def on_window_close() -> EmitStrategy:
        """Emit one final result per window, once stream time passes its end plus grace.

        ```python
        (grouped.windowed_by(TimeWindows.of_size_and_grace(60_000, 5_000))
            .emit_strategy(EmitStrategy.on_window_close())
            .count())
        ```

        :returns: the strategy, for ``TimeWindowedKStream.emit_strategy``.
        """
        return EmitStrategy(True)


def _positive(n: int, what: str) -> int:
    if n <= 0:
        raise ValueError(f"{what} must be positive, got {n}")
    return n
