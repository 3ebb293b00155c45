"""``cogroup``: several grouped streams aggregated into one table, each with its own aggregator.

Every input stream gets its own aggregation processor, all writing the same store, and their
revisions meet in one merge node. This costs one store and one changelog instead of one per
stream plus a join of the results. The inputs share a store, so they are co-partitioned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluvial.dsl import graph
from fluvial.dsl.aggregate import StreamAggregateProcessor, WindowedAggregateProcessor
from fluvial.dsl.getters import store_getter
from fluvial.dsl.kstream import NamedArg, named_value
from fluvial.dsl.options import Materialized
from fluvial.dsl.session import Merger, SessionWindowAggregateProcessor, session_store_spec
from fluvial.dsl.sliding import SlidingWindowAggregateProcessor
from fluvial.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from fluvial.processor_api import Processor
from fluvial.topology.nodes import WINDOW, StoreSpec

if TYPE_CHECKING:
    from fluvial.dsl.grouped import KGroupedStream
    from fluvial.dsl.ktable import KTable

Aggregator = Callable[[Any, Any, Any], Any]
PREFIX = "COGROUPKSTREAM-AGGREGATE-"


class CogroupedKStream:
    """Made by ``grouped.cogroup(aggregator)``; add more with ``.cogroup(other, aggregator)``."""

    def __init__(
        self,
        first: KGroupedStream,
        inputs: tuple[tuple[KGroupedStream, Aggregator], ...] = (),
        windows: TimeWindows | SlidingWindows | SessionWindows | None = None,
    ) -> None:
        self._first = first
        self._inputs = inputs
        self._windows = windows

    def cogroup(self, grouped: KGroupedStream, aggregator: Aggregator) -> CogroupedKStream:
        """Also aggregate ``grouped``'s records, with ``aggregator(key, value, aggregate)``."""
        if any(g is grouped for g, _ in self._inputs):
            raise ValueError("this grouped stream is already part of the cogroup")
        return CogroupedKStream(self._first, self._inputs + ((grouped, aggregator),))

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> CogroupedKStream:
        """Aggregate per window; session windows need a ``merger`` in ``aggregate``."""
        return CogroupedKStream(self._first, self._inputs, windows)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        merger: Merger | None = None,
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Aggregate every cogrouped stream into one table, each record with its own stream's
        aggregator.

        ```python
        clicks = builder.stream("clicks").group_by_key()
        views = builder.stream("views").group_by_key()
        totals = (clicks.cogroup(lambda key, click, agg: {**agg, "clicks": agg["clicks"] + 1})
                  .cogroup(views, lambda key, view, agg: {**agg, "views": agg["views"] + 1})
                  .aggregate(lambda: {"clicks": 0, "views": 0},
                             materialized=Materialized.with_(serdes.string(), serdes.json())))
        ```

        :param initializer: ``initializer() -> aggregate``, a key's (or window's) aggregate
            before its first record from any of the streams.
        :param merger: session windows only: ``merger(key, merged_so_far, session_aggregate) ->
            merged`` when a record joins sessions (see ``SessionWindowedKStream.aggregate``).
        :param named: name of the merge processor the aggregations meet in.
        :param materialized: the one store's name, serdes, caching and retention; give the
            aggregate's value serde here, since the streams' value types differ.
        :returns: a table of ``key -> aggregate`` (``Windowed(key, window) -> aggregate`` after
            ``windowed_by``). The streams share one store, so they must be co-partitioned; a stream
            whose key changed is repartitioned first.
        """
        from fluvial.dsl.ktable import KTable

        windows = self._windows
        if isinstance(windows, SessionWindows) and merger is None:
            raise TypeError("session-windowed cogroup needs merger(key, agg1, agg2)")
        m = materialized or Materialized()
        stream = self._first._stream
        itb = stream._itb
        store = graph.store_name(itb, m, PREFIX)
        key_serde = m.key_serde or stream.key_serde
        k, v = graph.internal_serde(key_serde), graph.internal_serde(m.value_serde)
        names, parents = [], []
        for i, (grouped, aggregator) in enumerate(self._inputs):
            parent = grouped._stream._repartition_if_required(grouped._grouped_name, f"{store}-{i}")
            name = itb.new_processor_name(PREFIX)

            def make(agg: Aggregator = aggregator) -> Processor[Any, Any]:
                if isinstance(windows, SessionWindows):
                    assert merger is not None
                    return SessionWindowAggregateProcessor(
                        store, windows, k, v, initializer, agg, merger
                    )
                if isinstance(windows, SlidingWindows):
                    return SlidingWindowAggregateProcessor(
                        store, windows, k, v, initializer, agg, False
                    )
                if isinstance(windows, TimeWindows):
                    return WindowedAggregateProcessor(store, windows, k, v, initializer, agg, False)
                return StreamAggregateProcessor(store, k, v, initializer, agg)

            itb.add_processor(name, make, [parent])
            names.append(name)
            parents.append(parent)
        itb.add_store(self._store_spec(store, m, k, v), *names)
        merge = named_value(named) or itb.new_processor_name("COGROUPKSTREAM-MERGE-")
        itb.add_processor(merge, graph.pass_through, names)
        graph.copartition(itb, *parents)
        if windows is None:
            return KTable(
                stream._builder, merge, key_serde, m.value_serde, store_name=store,
                getter=store_getter(store, k, v),
            )  # fmt: skip
        windowed_key = None if key_serde is None else windows.windowed_key_serde(key_serde)
        return KTable(
            stream._builder, merge, windowed_key, m.value_serde, store_name=store,
            windows=windows, inner_key_serde=key_serde,
        )  # fmt: skip

    def _store_spec(self, store: str, m: Materialized, k: Any, v: Any) -> StoreSpec:
        from fluvial.dsl.grouped import window_retention

        windows = self._windows
        itb = self._first._stream._itb
        if windows is None:
            return graph.kv_store_spec(store, m, k, v)
        if isinstance(windows, SessionWindows):
            return session_store_spec(itb, store, windows, m, k, v)
        return StoreSpec(
            name=store, kind=WINDOW, key_serde=k, value_serde=v, store_type=m.store_type,
            caching_enabled=m.caching_enabled, logging_enabled=m.logging_enabled,
            retention_ms=window_retention(itb, store, windows, m),
            window_size_ms=windows.size_ms, internal_format=True,
        )  # fmt: skip
