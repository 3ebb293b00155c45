"""Session-window aggregation: one window per burst of a key's activity.

A record at ``t`` joins every session of its key that ends no earlier than ``t - gap`` and starts
no later than ``t + gap``. All of them, and the record, become one session: its aggregate merges
the old aggregates (``merger``) and then adds the record (``aggregator``). Sessions that the merge
replaces are deleted, and each deletion is forwarded as a tombstone for that session's key, so
downstream tables drop them. A merged session is accepted while its (inclusive) end is at least
``stream_time - grace``; otherwise the record is dropped and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluvial import serdes
from fluvial.dsl import graph
from fluvial.dsl.change import Change
from fluvial.dsl.forwarding import emit
from fluvial.dsl.kstream import NamedArg, named_value
from fluvial.dsl.options import Materialized
from fluvial.dsl.windows import SessionWindows
from fluvial.processor.metrics import LATE, NULL_KEY, dropped
from fluvial.processor.stores import is_cached
from fluvial.processor_api import Processor
from fluvial.records import Record, Window, Windowed
from fluvial.serdes import Serde
from fluvial.topology.nodes import SESSION, StoreSpec

if TYPE_CHECKING:
    from fluvial.dsl.grouped import KGroupedStream
    from fluvial.dsl.ktable import KTable

log = logging.getLogger(__name__)

Merger = Callable[[Any, Any, Any], Any]  # (key, aggregate one, aggregate two) -> aggregate


class SessionWindowAggregateProcessor(Processor[Any, Any]):
    """count/reduce/aggregate per session; ``initializer`` None means reduce."""

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Merger,
    ) -> None:
        self.store_name = store_name
        self.windows = windows
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self._observed = context.input_stream_time_ms()
        # With a record cache, a session's rewrites fold until the cache flushes (at commit or
        # eviction), and only then go downstream: a session merged away before its first flush
        # never appears, as in Kafka Streams.
        self._cached = is_cached(self.store)
        if self._cached:
            self.store.set_flush_listener(self._on_flush)

    def _on_flush(
        self, key: bytes, start: int, end: int, new: bytes | None, old: bytes | None, ts: int
    ) -> None:
        emit(
            self.context,
            Windowed(self.key_serde.deserialize(None, key), Window(start, end)),
            Change(
                None if new is None else self.value_serde.deserialize(None, new),
                None if old is None else self.value_serde.deserialize(None, old),
            ),
            ts,
        )

    def _merge(self, key: Any, aggregate: Any, session_value: Any) -> Any:
        if self.initializer is None and aggregate is None:
            return session_value  # reduce: the first session's aggregate is the start
        return self.merger(key, aggregate, session_value)

    def _add(self, key: Any, value: Any, aggregate: Any) -> Any:
        if self.initializer is None and aggregate is None:
            return value  # reduce: the first value is the aggregate
        return self.aggregator(key, value, aggregate)

    def process(self, record: Record[Any, Any]) -> None:
        # As in Kafka Streams: null values are aggregated, only null keys are dropped; a
        # session stays open for late records until its end is more than gap + grace behind
        # the stream time this operator has seen.
        if record.key is None:
            dropped(self.context, NULL_KEY)
            return
        t, gap = record.timestamp_ms, self.windows.inactivity_gap_ms
        self._observed = max(self._observed, t)
        close_time = self._observed - self.windows.grace_ms - gap
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        overlapping = list(self.store.find_sessions(key_bytes, t - gap, t + gap))
        start = min([t] + [s.start_ms for s in overlapping])
        end = max([t] + [s.end_ms for s in overlapping])
        if end < close_time:
            log.debug("dropping record at %d: its session [%d, %d] is closed", t, start, end)
            dropped(self.context, LATE)
            return
        aggregate = None if self.initializer is None else self.initializer()
        values = []
        for session in overlapping:
            value = self.value_serde.deserialize(None, session.value)
            values.append(value)
            aggregate = self._merge(record.key, aggregate, value)
        if (start, end) != (t, t):
            # Every merged session is replaced, even one whose bounds the result keeps.
            for session, value in zip(overlapping, values, strict=True):
                self.store.remove(key_bytes, session.start_ms, session.end_ms)
                if not self._cached:
                    replaced = Windowed(record.key, Window(session.start_ms, session.end_ms))
                    emit(self.context, replaced, Change(None, value), session.end_ms)
        aggregate = self._add(record.key, record.value, aggregate)
        self.store.put(key_bytes, start, end, self.value_serde.serialize(None, aggregate), end)
        if not self._cached:
            merged = Windowed(record.key, Window(start, end))
            emit(self.context, merged, Change(aggregate, None), end)


class SessionWindowedKStream:
    """A grouped stream cut into sessions; aggregations return a table keyed by ``Windowed``
    session keys (both window bounds inclusive)."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows) -> None:
        self._grouped = grouped
        self._windows = windows

    def count(self, named: NamedArg = None, materialized: Materialized | None = None) -> KTable:
        """Count the records of each key in each session.

        ```python
        (builder.stream("clicks").group_by_key()
            .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(30 * 60_000))
            .count())
        ```

        :param named: name of the aggregation's processor (a ``str`` or :class:`~fluvial.Named`).
        :param materialized: the session store's name, serdes, caching and retention (at least
            inactivity gap + grace); counts are 8-byte longs unless its value serde says otherwise.
        :returns: a table of ``Windowed(key, session) -> count``, where the session's window spans
            its first to its last record, both inclusive. A record that bridges two sessions merges
            them: the table deletes both (tombstones) and emits the merged session's count.
        """
        m = materialized or Materialized()
        return self._aggregate(
            lambda: 0, lambda k, v, n: n + 1, lambda k, a, b: a + b, named, m,
            m.value_serde or serdes.long(),
        )  # fmt: skip

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Combine the values of each key in each session into one of the same type.

        :param reducer: ``reducer(aggregate, value) -> new aggregate``; a session's first value
            is its aggregate, and merging sessions calls ``reducer(older, newer)`` on theirs.
        :param named: name of the aggregation's processor.
        :param materialized: the session store's name, serdes, caching and retention; the value
            serde defaults to the stream's.
        :returns: a table of ``Windowed(key, session) -> aggregate``.
        """
        m = materialized or Materialized()
        return self._aggregate(
            None, lambda k, v, agg: reducer(agg, v), lambda k, a, b: reducer(a, b), named, m,
            m.value_serde or self._grouped._stream.value_serde,
        )  # fmt: skip

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Merger,
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Fold the values of each key in each session into an aggregate of any type.

        ```python
        sessions.aggregate(
            lambda: 0,
            lambda key, value, total: total + value,
            lambda key, left, right: left + right,
            materialized=Materialized.with_(serdes.string(), serdes.long()),
        )
        ```

        :param initializer: ``initializer() -> aggregate``, a new session's aggregate before its
            first record.
        :param aggregator: ``aggregator(key, value, aggregate) -> new aggregate``: the record's
            key and value first, the session's aggregate so far last.
        :param merger: ``merger(key, merged_so_far, session_aggregate) -> merged``: when a
            record falls within the gap of existing sessions, they become one session whose
            aggregate starts from ``initializer()`` and merges each of theirs in turn (oldest
            first); then the record is added with ``aggregator``.
        :param named: name of the aggregation's processor.
        :param materialized: the session store's name, serdes, caching and retention.
        :returns: a table of ``Windowed(key, session) -> aggregate``; merged sessions are
            deleted (tombstones) and the merged one emitted.
        """
        m = materialized or Materialized()
        return self._aggregate(initializer, aggregator, merger, named, m, m.value_serde)

    def _aggregate(
        self,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Merger,
        named: NamedArg,
        m: Materialized,
        value_serde: Serde[Any] | None,
    ) -> KTable:
        from fluvial.dsl.ktable import KTable

        stream = self._grouped._stream
        itb = stream._itb
        windows = self._windows
        prefix = "KSTREAM-AGGREGATE-" if initializer is not None else "KSTREAM-REDUCE-"
        store = graph.store_name(itb, m, prefix)
        name = named_value(named) or itb.new_processor_name(prefix)
        parent = stream._repartition_if_required(self._grouped._grouped_name, store)
        key_serde = m.key_serde or stream.key_serde
        k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
        itb.add_processor(
            name,
            lambda: SessionWindowAggregateProcessor(
                store, windows, k, v, initializer, aggregator, merger
            ),
            [parent],
        )
        itb.add_store(session_store_spec(itb, store, windows, m, k, v, caching=True), name)
        windowed_key = None if key_serde is None else serdes.session_windowed(key_serde)
        return KTable(
            stream._builder, name, windowed_key, value_serde, store_name=store,
            windows=windows, inner_key_serde=key_serde,
        )  # fmt: skip


def session_store_spec(
    itb: Any,
    store: str,
    windows: SessionWindows,
    m: Materialized,
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    *,
    caching: bool = False,
) -> StoreSpec:
    """Sessions are kept while a late record could still merge into them: gap + grace.
    ``caching``: a record cache when ``m`` allows one (a session aggregation's own store; a
    cogrouped one, written by several processors, has none)."""
    minimum = windows.inactivity_gap_ms + windows.grace_ms
    retention = m.retention_ms if m.retention_ms is not None else minimum
    if retention < minimum:
        itb._problems.append(
            f"store {store!r}: retention {retention} ms is shorter than inactivity gap + grace "
            f"({minimum} ms); sessions would vanish while still mergeable: raise with_retention"
        )
        retention = minimum
    return StoreSpec(
        name=store, kind=SESSION, key_serde=key_serde, value_serde=value_serde,
        store_type=m.store_type, caching_enabled=caching and m.caching_enabled,
        logging_enabled=m.logging_enabled,
        # As Kafka Streams' store, a session expires when its end is *at* stream time - retention
        # (its stream time being the latest session end written).
        retention_ms=retention, internal_format=True,
    )  # fmt: skip
