"""``KGroupedStream`` and ``TimeWindowedKStream``: aggregations of a stream, per key or per window.

Each aggregation materializes a state store (named by ``Materialized.as_`` or generated) and
returns a ``KTable`` of revisions. A grouping after a key change inserts a repartition topic
named after the grouping (``Grouped.as_``) or, failing that, after the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from fluvial import serdes
from fluvial.dsl import graph
from fluvial.dsl.aggregate import (
    StreamAggregateProcessor,
    WindowedAggregateProcessor,
    count_aggregator,
)
from fluvial.dsl.getters import store_getter
from fluvial.dsl.kstream import NamedArg, named_value
from fluvial.dsl.old_values import OldValues
from fluvial.dsl.options import Materialized
from fluvial.dsl.sliding import SlidingWindowAggregateProcessor
from fluvial.dsl.suppressed import EmitStrategy
from fluvial.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from fluvial.serdes import Serde
from fluvial.topology.builder import InternalTopologyBuilder
from fluvial.topology.nodes import WINDOW, StoreSpec

if TYPE_CHECKING:
    from fluvial.dsl.cogroup import CogroupedKStream
    from fluvial.dsl.kstream import KStream
    from fluvial.dsl.ktable import KTable
    from fluvial.dsl.session import SessionWindowedKStream

AGGREGATE = "KSTREAM-AGGREGATE-"
REDUCE = "KSTREAM-REDUCE-"


class KGroupedStream:
    """A stream grouped by key, ready for ``count``, ``reduce``, ``aggregate`` or ``windowed_by``."""

    def __init__(self, stream: KStream, grouped_name: str | None) -> None:
        self._stream = stream
        self._grouped_name = grouped_name

    def count(self, named: NamedArg = None, materialized: Materialized | None = None) -> KTable:
        """Count the records of each key.

        :param named: name of the aggregation's processor (a ``str`` or :class:`~fluvial.Named`).
        :param materialized: the store's name, serdes and caching; counts are 8-byte longs
            (``serdes.long()``) unless its value serde says otherwise.
        :returns: a table of ``key -> count``, updated (a revision) on every record.
        """
        m = materialized or Materialized()
        return self._aggregate(
            AGGREGATE, lambda: 0, count_aggregator, named, m, m.value_serde or serdes.long()
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Combine the values of each key into one of the same type.

        ```python
        grouped.reduce(lambda total, amount: total + amount)   # running sum per key
        ```

        :param reducer: ``reducer(aggregate, value) -> new aggregate``; the first value of a key
            is its aggregate, so ``reducer`` is called from the second on.
        :param named: name of the aggregation's processor.
        :param materialized: the store's name, serdes and caching; the value serde defaults to
            the stream's.
        :returns: a table of ``key -> aggregate``, updated on every record.
        """
        m = materialized or Materialized()
        return self._aggregate(
            REDUCE, None, lambda k, v, agg: reducer(agg, v), named, m,
            m.value_serde or self._stream.value_serde,
        )  # fmt: skip

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Fold the values of each key into an aggregate of any type.

        ```python
        grouped.aggregate(
            lambda: {"count": 0, "total": 0},
            lambda key, amount, agg: {"count": agg["count"] + 1, "total": agg["total"] + amount},
            materialized=Materialized.as_("totals").with_value_serde(serdes.json()),
        )
        ```

        :param initializer: ``initializer() -> aggregate``, the aggregate before a key's first
            record.
        :param aggregator: ``aggregator(key, value, aggregate) -> new aggregate``; note the
            order: the record's key and value first, the aggregate so far last.
        :param named: name of the aggregation's processor.
        :param materialized: the store's name, serdes and caching; give a value serde
            (``Materialized.with_(key_serde, value_serde)``) when the aggregate is not the
            stream's value type.
        :returns: a table of ``key -> aggregate``, updated on every record.
        """
        m = materialized or Materialized()
        return self._aggregate(AGGREGATE, initializer, aggregator, named, m, m.value_serde)

    @overload
    def windowed_by(self, windows: TimeWindows | SlidingWindows) -> TimeWindowedKStream: ...

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedKStream | SessionWindowedKStream:
        """Cut each key's records into windows before aggregating.

        ```python
        (grouped.windowed_by(TimeWindows.of_size_and_grace(size_ms=60_000, grace_ms=5_000))
            .count())      # Windowed(key, Window(start_ms, end_ms)) -> count
        ```

        :param windows: :class:`~fluvial.TimeWindows` (tumbling or hopping),
            :class:`~fluvial.SlidingWindows` or :class:`~fluvial.SessionWindows`.
        :returns: a :class:`TimeWindowedKStream` for time and sliding windows, a
            :class:`SessionWindowedKStream` for session windows; their aggregations return a
            table keyed by :class:`~fluvial.Windowed`.
        """
        if isinstance(windows, SessionWindows):
            from fluvial.dsl.session import SessionWindowedKStream

            return SessionWindowedKStream(self, windows)
        if not isinstance(windows, TimeWindows | SlidingWindows):
            raise TypeError(
                f"windowed_by takes TimeWindows, SlidingWindows or SessionWindows, got "
                f"{type(windows).__name__}"
            )
        return TimeWindowedKStream(self, windows, EmitStrategy.on_window_update())

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupedKStream:
        """Start aggregating several grouped streams into one table, one aggregator each.

        :param aggregator: ``aggregator(key, value, aggregate) -> new aggregate`` for this
            stream's records.
        :returns: a :class:`CogroupedKStream`: add more streams with ``.cogroup(other,
            aggregator)``, then call ``.aggregate(initializer)``.
        """
        from fluvial.dsl.cogroup import CogroupedKStream

        return CogroupedKStream(self, ((self, aggregator),))

    def _aggregate(
        self,
        prefix: str,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        named: NamedArg,
        m: Materialized,
        value_serde: Serde[Any] | None,
    ) -> KTable:
        from fluvial.dsl.ktable import KTable

        stream = self._stream
        itb = stream._itb
        store = graph.store_name(itb, m, prefix)
        name = named_value(named) or itb.new_processor_name(prefix)
        parent = stream._repartition_if_required(self._grouped_name, store)
        key_serde = m.key_serde or stream.key_serde
        k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
        old_values = OldValues()
        itb.add_processor(
            name,
            lambda: StreamAggregateProcessor(store, k, v, initializer, aggregator, old_values),
            [parent],
        )
        itb.add_store(graph.kv_store_spec(store, m, k, v), name)
        return KTable(
            stream._builder, name, key_serde, value_serde, store_name=store,
            getter=store_getter(store, k, v), old_values=old_values,
        )  # fmt: skip


class TimeWindowedKStream:
    """A grouped stream cut into time (or sliding) windows; aggregations return a table keyed by
    ``Windowed``."""

    def __init__(
        self,
        grouped: KGroupedStream,
        windows: TimeWindows | SlidingWindows,
        emit_strategy: EmitStrategy,
    ) -> None:
        self._grouped = grouped
        self._windows = windows
        self._emit = emit_strategy

    def emit_strategy(self, strategy: EmitStrategy) -> TimeWindowedKStream:
        """Choose when results come out.

        :param strategy: ``EmitStrategy.on_window_update()`` (the default: a revision on every
            record) or ``EmitStrategy.on_window_close()`` (one final result per window, once
            stream time passes its end plus grace).
        :returns: a copy of this windowed stream with that strategy.
        """
        return TimeWindowedKStream(self._grouped, self._windows, strategy)

    def count(self, named: NamedArg = None, materialized: Materialized | None = None) -> KTable:
        """Count the records of each key in each window.

        ```python
        counts = (builder.stream("clicks").group_by_key()
                  .windowed_by(TimeWindows.of_size_with_no_grace(60_000)).count())
        counts.to_stream().map(lambda wk, n: (wk.key, f"{wk.window.start_ms}: {n}"))
        ```

        :param named: name of the aggregation's processor (a ``str`` or :class:`~fluvial.Named`).
        :param materialized: the window store's name, serdes, caching and retention (at least
            window size + grace); counts are 8-byte longs unless its value serde says otherwise.
        :returns: a table of ``Windowed(key, window) -> count``. A record later than the
            window's grace is dropped and counted as late.
        """
        m = materialized or Materialized()
        return self._aggregate(
            AGGREGATE, lambda: 0, count_aggregator, named, m, m.value_serde or serdes.long()
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Combine the values of each key in each window into one of the same type.

        ```python
        windowed.reduce(lambda biggest, value: max(biggest, value))
        ```

        :param reducer: ``reducer(aggregate, value) -> new aggregate``; a window's first value
            is its aggregate.
        :param named: name of the aggregation's processor.
        :param materialized: the window store's name, serdes, caching and retention; the value
            serde defaults to the stream's.
        :returns: a table of ``Windowed(key, window) -> aggregate``.
        """
        m = materialized or Materialized()
        return self._aggregate(
            REDUCE, None, lambda k, v, agg: reducer(agg, v), named, m,
            m.value_serde or self._grouped._stream.value_serde,
        )  # fmt: skip

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Fold the values of each key in each window into an aggregate of any type.

        ```python
        windowed.aggregate(
            lambda: [],
            lambda key, value, seen: seen + [value],
            materialized=Materialized.with_(serdes.string(), serdes.json()),
        )
        ```

        :param initializer: ``initializer() -> aggregate``, each window's aggregate before its
            first record.
        :param aggregator: ``aggregator(key, value, aggregate) -> new aggregate``: the record's
            key and value first, the window's aggregate so far last.
        :param named: name of the aggregation's processor.
        :param materialized: the window store's name, serdes, caching and retention; give a
            value serde when the aggregate is not the stream's value type.
        :returns: a table of ``Windowed(key, window) -> aggregate``. With hopping windows a
            record updates every window that contains it.
        """
        m = materialized or Materialized()
        return self._aggregate(AGGREGATE, initializer, aggregator, named, m, m.value_serde)

    def _aggregate(
        self,
        prefix: str,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        named: NamedArg,
        m: Materialized,
        value_serde: Serde[Any] | None,
    ) -> KTable:
        from fluvial.dsl.ktable import KTable

        stream = self._grouped._stream
        itb = stream._itb
        windows = self._windows
        store = graph.store_name(itb, m, prefix)
        name = named_value(named) or itb.new_processor_name(prefix)
        parent = stream._repartition_if_required(self._grouped._grouped_name, store)
        key_serde = m.key_serde or stream.key_serde
        k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
        retention = window_retention(itb, store, windows, m)
        on_close = self._emit.on_close
        processor = (
            SlidingWindowAggregateProcessor
            if isinstance(windows, SlidingWindows)
            else WindowedAggregateProcessor
        )
        old_values = OldValues()
        itb.add_processor(
            name,
            lambda: processor(store, windows, k, v, initializer, aggregator, on_close, old_values),
            [parent],
        )
        itb.add_store(
            StoreSpec(
                name=store,
                kind=WINDOW,
                key_serde=k,
                value_serde=v,
                store_type=m.store_type,
                # Emitting on close, the cache still folds a window's updates before they reach
                # the store and its changelog; its flushes forward nothing.
                caching_enabled=m.caching_enabled,
                logging_enabled=m.logging_enabled,
                retention_ms=retention,
                window_size_ms=windows.size_ms,
                internal_format=True,
            ),
            name,
        )
        windowed_key = None if key_serde is None else windows.windowed_key_serde(key_serde)
        return KTable(
            stream._builder, name, windowed_key, value_serde, store_name=store,
            windows=windows, inner_key_serde=key_serde, old_values=old_values,
        )  # fmt: skip


def window_retention(
    itb: InternalTopologyBuilder,
    store: str,
    windows: TimeWindows | SlidingWindows,
    m: Materialized,
) -> int:
    """How long the window store keeps windows: the user's choice, at least size + grace.

    Sliding windows also read neighbouring windows (up to twice the time difference back) to
    build new ones: their store keeps windows for at least 2 * time difference + grace, Kafka
    Streams' default and minimum for them.
    """
    minimum = windows.size_ms + windows.grace_ms
    what = "window size + grace"
    if isinstance(windows, SlidingWindows):
        minimum = 2 * windows.size_ms + windows.grace_ms
        what = "2 * time difference + grace"
    retention = m.retention_ms if m.retention_ms is not None else minimum
    if retention < minimum:
        itb._problems.append(
            f"store {store!r}: retention {retention} ms is shorter than {what} "
            f"({minimum} ms); windows would vanish while still needed: raise with_retention(...)"
        )
        retention = minimum
    return retention
