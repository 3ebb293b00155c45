"""``KStream``: an unbounded stream of independent records, and its record-at-a-time operations.

Operations that may change the key (``map``, ``flat_map``, ``select_key``, ``process``) mark the
stream as needing a repartition; a later grouping or ``to_table`` then routes records through a
repartition topic, so each key lands in one task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fluvial.dsl import graph
from fluvial.dsl.options import (
    Consumed,
    Grouped,
    Joined,
    Materialized,
    Named,
    Produced,
    Repartitioned,
    StreamJoined,
)
from fluvial.dsl.stateless import (
    BranchProcessor,
    FilterProcessor,
    FlatMapProcessor,
    FlatMapValuesProcessor,
    MapProcessor,
    MapValuesProcessor,
    PassThroughProcessor,
    PeekProcessor,
    SelectKeyProcessor,
)
from fluvial.dsl.table_table_join import INNER, LEFT, OUTER
from fluvial.dsl.windows import JoinWindows
from fluvial.processor_api import ProcessorSupplier
from fluvial.serdes import Serde

if TYPE_CHECKING:
    from fluvial.dsl.builder import StreamsBuilder
    from fluvial.dsl.global_table import GlobalKTable
    from fluvial.dsl.grouped import KGroupedStream
    from fluvial.dsl.ktable import KTable

NamedArg = Named | str | None


def named_value(named: NamedArg) -> str | None:
    if isinstance(named, Named):
        return named.name
    if named is not None and not isinstance(named, str):
        # Kafka Streams takes Materialized positionally here; fluvial keeps names and stores
        # apart, so say which keyword to use instead of failing later in build().
        kind = type(named).__name__
        raise TypeError(
            f"expected a processor name (str or Named) but got a {kind}: pass it by keyword, "
            f"e.g. {kind.lower()}={kind}.as_(...)"
        )
    return named


class KStream:
    """A record stream. Each method adds a processor and returns the resulting stream.

    Serdes travel with the stream: operations that keep keys or values keep their serdes, so
    ``to()`` usually needs none.
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool = False,
    ) -> None:
        self._builder = builder
        self._itb = builder._itb
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.repartition_required = repartition_required

    def _add(
        self,
        prefix: str,
        supplier: ProcessorSupplier,
        named: NamedArg,
        *,
        key_serde: Serde[Any] | None | str = "same",
        value_serde: Serde[Any] | None | str = "same",
        key_changing: bool = False,
        stores: tuple[str, ...] = (),
    ) -> KStream:
        name = named_value(named) or self._itb.new_processor_name(prefix)
        self._itb.add_processor(name, supplier, [self.node], stores)
        return KStream(
            self._builder,
            name,
            self.key_serde if key_serde == "same" else key_serde,  # type: ignore[arg-type]
            self.value_serde if value_serde == "same" else value_serde,  # type: ignore[arg-type]
            self.repartition_required or key_changing,
        )

    # -- stateless --------------------------------------------------------------------------
    def filter(self, predicate: Callable[[Any, Any], bool], named: NamedArg = None) -> KStream:
        """Keep records for which ``predicate(key, value)`` is true."""
        return self._add("KSTREAM-FILTER-", lambda: FilterProcessor(predicate, False), named)

    def filter_not(self, predicate: Callable[[Any, Any], bool], named: NamedArg = None) -> KStream:
        """Drop records for which ``predicate(key, value)`` is true."""
        return self._add("KSTREAM-FILTER-", lambda: FilterProcessor(predicate, True), named)

    def map(self, mapper: Callable[[Any, Any], Any], named: NamedArg = None) -> KStream:
        """Replace each record's key and value.
        ```python
        clicks.map(lambda user_id, click: (click["page"], click["duration_ms"]))
        ```

        :param mapper: ``mapper(key, value) -> (new_key, new_value)``, a tuple or a
            :class:`~fluvial.KeyValue`.
        :param named: name of the processor.
        :returns: the mapped stream. The key may have changed, so a later grouping or join writes
            through a repartition topic first; use ``map_values`` when only the value changes.
        """
        return self._add(
            "KSTREAM-MAP-", lambda: MapProcessor(mapper), named,
            key_serde=None, value_serde=None, key_changing=True,
        )  # fmt: skip

    def map_values(
        self, mapper: Callable[..., Any], named: NamedArg = None, *, with_key: bool = False
    ) -> KStream:
        """Replace each record's value; the key, and so the partitioning, stay.
        :param mapper: ``mapper(value) -> new_value``, or ``mapper(key, value) -> new_value`` with
            ``with_key=True``.
        :param named: name of the processor.
        :param with_key: pass the key to ``mapper`` too.
        :returns: the mapped stream (its value serde is no longer known: give one downstream).
        """
        return self._add(
            "KSTREAM-MAPVALUES-", lambda: MapValuesProcessor(mapper, with_key), named,
            value_serde=None,
        )  # fmt: skip

    def flat_map(
        self, mapper: Callable[[Any, Any], Iterable[Any]], named: NamedArg = None
    ) -> KStream:
        """Replace each record with zero or more records.
        ```python
        lines.flat_map(lambda _, line: [(word, 1) for word in line.split()])
        ```

        :param mapper: ``mapper(key, value) -> iterable of (key, value)`` (tuples or
            :class:`~fluvial.KeyValue`); an empty iterable drops the record.
        :param named: name of the processor.
        :returns: the new stream; keys may have changed, so a later grouping or join repartitions.
        """
        return self._add(
            "KSTREAM-FLATMAP-", lambda: FlatMapProcessor(mapper), named,
            key_serde=None, value_serde=None, key_changing=True,
        )  # fmt: skip

    def flat_map_values(
        self,
        mapper: Callable[..., Iterable[Any]],
        named: NamedArg = None,
        *,
        with_key: bool = False,
    ) -> KStream:
        """Replace each record's value with zero or more values, each with the record's key.
        :param mapper: ``mapper(value) -> iterable of values``, or ``mapper(key, value)`` with
            ``with_key=True``; an empty iterable drops the record.
        :param named: name of the processor.
        :param with_key: pass the key to ``mapper`` too.
        :returns: the new stream, keyed as before.
        """
        return self._add(
            "KSTREAM-FLATMAPVALUES-", lambda: FlatMapValuesProcessor(mapper, with_key), named,
            value_serde=None,
        )  # fmt: skip

    def select_key(self, mapper: Callable[[Any, Any], Any], named: NamedArg = None) -> KStream:
        """Give each record a new key; the value stays.
        :param mapper: ``mapper(key, value) -> new_key``.
        :param named: name of the processor.
        :returns: the re-keyed stream; a later grouping or join writes through a repartition topic.
        """
        return self._add(
            "KSTREAM-KEY-SELECT-", lambda: SelectKeyProcessor(mapper), named,
            key_serde=None, key_changing=True,
        )  # fmt: skip

    def peek(self, action: Callable[[Any, Any], None], named: NamedArg = None) -> KStream:
        """Call ``action(key, value)`` for its side effect and pass the record on."""
        return self._add("KSTREAM-PEEK-", lambda: PeekProcessor(action, True), named)

    def foreach(self, action: Callable[[Any, Any], None], named: NamedArg = None) -> None:
        """Call ``action(key, value)`` for every record; ends the stream."""
        self._add("KSTREAM-FOREACH-", lambda: PeekProcessor(action, False), named)

    def merge(self, other: KStream, named: NamedArg = None) -> KStream:
        """Both streams' records in one stream (no ordering guarantee between them)."""
        name = named_value(named) or self._itb.new_processor_name("KSTREAM-MERGE-")
        self._itb.add_processor(name, PassThroughProcessor, [self.node, other.node])
        return KStream(
            self._builder,
            name,
            self.key_serde if self.key_serde is other.key_serde else None,
            self.value_serde if self.value_serde is other.value_serde else None,
            self.repartition_required or other.repartition_required,
        )

    def split(self, named: NamedArg = None) -> BranchedKStream:
        """Route each record to the first branch whose predicate matches."""
        name = named_value(named) or self._itb.new_processor_name("KSTREAM-BRANCH-")
        return BranchedKStream(self, name)

    def process(
        self, supplier: ProcessorSupplier, *store_names: str, named: NamedArg = None
    ) -> KStream:
        """Run a Processor API processor on every record.
        ```python
        seen = Stores.key_value_store_builder("seen", serdes.string(), serdes.long())
        builder.add_state_store(seen)
        stream.process(Deduplicate, "seen")   # Deduplicate is a Processor subclass
        ```

        :param supplier: ``supplier() -> Processor``, called once per task (a ``Processor``
            subclass is such a supplier).
        :param store_names: the stores the processor may open with ``context.get_state_store``
            (added with ``StreamsBuilder.add_state_store``).
        :param named: name of the processor.
        :returns: the stream of what the processor forwards (keys may have changed).
        """
        return self._add(
            "KSTREAM-PROCESSOR-", supplier, named,
            key_serde=None, value_serde=None, key_changing=True, stores=store_names,
        )  # fmt: skip

    # -- topics -----------------------------------------------------------------------------
    def to(
        self,
        topic: str,
        produced: Produced | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> None:
        """Write every record to ``topic``; this ends the stream.
        :param topic: the output topic; it must exist before the application starts
            (``fluvial topics create``), or the start is refused.
        :param produced: serdes, partitioner and sink name (:class:`~fluvial.Produced`).
        :param key_serde: serde of the keys; by default the ``produced`` one, else the stream's.
        :param value_serde: serde of the values; by default the ``produced`` one, else the stream's.
        """
        produced = produced or Produced()
        name = produced.name or self._itb.new_processor_name(graph.SINK)
        self._itb.add_sink(
            name,
            topic,
            [self.node],
            key_serde or produced.key_serde or self.key_serde,
            value_serde or produced.value_serde or self.value_serde,
            produced.partitioner,
        )

    def repartition(
        self,
        repartitioned: Repartitioned | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        name: str | None = None,
        num_partitions: int | None = None,
    ) -> KStream:
        """Write the stream through a repartition topic now, and read it back.
        :param repartitioned: the topic's name, serdes and partition count
            (:class:`~fluvial.Repartitioned`).
        :param key_serde: serde of the keys (default: ``repartitioned``'s, else the stream's).
        :param value_serde: serde of the values (default: ``repartitioned``'s, else the stream's).
        :param name: the topic's name, ``<application_id>-<name>-repartition``.
        :param num_partitions: its partition count (default: as its source topics).
        :returns: the stream read from the repartition topic, partitioned by its current key.
        """
        r = repartitioned or Repartitioned()
        key_serde = key_serde or r.key_serde or self.key_serde
        value_serde = value_serde or r.value_serde or self.value_serde
        user_name = name or r.name
        prefix = user_name or self._itb.new_processor_name("KSTREAM-REPARTITION-")
        source = graph.add_repartition(
            self._itb, self.node, prefix, user_name is not None, key_serde, value_serde,
            num_partitions or r.num_partitions,
        )  # fmt: skip
        return KStream(self._builder, source, key_serde, value_serde, False)

    def to_table(self, named: NamedArg = None, materialized: Materialized | None = None) -> KTable:
        """Read the stream as a changelog: the latest value per key, a ``None`` value deleting it.
        :param named: name of the processor.
        :param materialized: the store's name (which makes it queryable), serdes and caching.
        :returns: the table; a stream whose key changed is repartitioned first.
        """
        from fluvial.dsl.getters import store_getter
        from fluvial.dsl.ktable import KTable
        from fluvial.dsl.old_values import SourceOldValues
        from fluvial.dsl.table_ops import TableSourceProcessor

        m = materialized or Materialized()
        name = named_value(named) or self._itb.new_processor_name("KSTREAM-TOTABLE-")
        store = graph.store_name(self._itb, m, "KSTREAM-TOTABLE-")
        parent = self._repartition_if_required(None, store)
        key_serde = m.key_serde or self.key_serde
        value_serde = m.value_serde or self.value_serde
        k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
        self._itb.add_processor(name, lambda: TableSourceProcessor(store, k, v), [parent])
        self._itb.add_store(graph.kv_store_spec(store, m, k, v), name)
        return KTable(
            self._builder, name, key_serde, value_serde, store_name=store,
            getter=store_getter(store, k, v, m.versioned),
            old_values=SourceOldValues(queryable=m.store_name is not None),
        )  # fmt: skip

    def _repartition_if_required(
        self,
        grouped_name: str | None,
        store: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> str:
        """The node to attach a stateful operator to: a repartition source if keys changed.

        ``key_serde``/``value_serde``: an operator's own serdes (a join's), before the stream's.
        """
        if not self.repartition_required:
            return self.node
        return graph.add_repartition(
            self._itb, self.node, grouped_name or store, grouped_name is not None,
            key_serde or self.key_serde, value_serde or self.value_serde,
        )  # fmt: skip

    # -- joins ------------------------------------------------------------------------------
    def join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner: Callable[..., Any],
        windows: JoinWindows | None = None,
        named: NamedArg = None,
        *,
        key_selector: Callable[[Any, Any], Any] | None = None,
        with_key: bool = False,
        store_name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        joined: Joined | StreamJoined | None = None,
    ) -> KStream:
        """Inner join: ``joiner(value, other_value)`` (``joiner(key, v, other)`` with ``with_key``).

        - another ``KStream``: records of both streams within ``windows`` (JoinWindows) of each
          other, by key;
        - a ``KTable``: each stream record with the table's row for its key, looked up when the
          record is processed (as of its timestamp, for a versioned table); table updates
          alone emit nothing;
        - a ``GlobalKTable``: the same, with the row for ``key_selector(key, value)``.

        ``store_name`` names a stream-stream join's stores. ``key_serde`` and ``value_serde`` are
        this stream's (``other_value_serde`` the other side's): they write the repartition topic
        of a stream re-keyed before the join, and a stream-stream join's stores. ``joined``
        (``Joined`` for a table, ``StreamJoined`` for a stream) carries the same settings.
        A re-keyed stream without a key serde takes the other side's, so both sides write equal
        keys as equal bytes; two different known key serdes are refused when the topology builds.

        ```python
        enriched = orders.join(customers, lambda order, customer: {**order, **customer})
        pairs = clicks.join(views, lambda click, view: (click, view),
                            JoinWindows.of_time_difference_and_grace(10_000, 1_000))
        ```

        :param other: a ``KStream``, ``KTable`` or ``GlobalKTable``.
        :param joiner: ``joiner(value, other_value) -> result``, or
            ``joiner(key, value, other_value)`` with ``with_key=True``.
        :param windows: required with a stream: how far apart two records may be.
        :param named: name of the join's processor(s).
        :param key_selector: with a ``GlobalKTable``: ``key_selector(key, value) -> the table's
            key`` to look up.
        :param with_key: pass the key to ``joiner`` first.
        :param store_name: prefix of a stream-stream join's store names.
        :param key_serde: serde of this stream's keys.
        :param value_serde: serde of this stream's values.
        :param other_value_serde: serde of the other side's values.
        :param joined: the same settings as :class:`~fluvial.Joined` or
            :class:`~fluvial.StreamJoined`.
        :returns: the stream of joined results, keyed as this stream.
        """
        return self._join(
            other, joiner, windows, named, INNER, key_selector, with_key, store_name,
            key_serde, value_serde, other_value_serde, joined,
        )  # fmt: skip

    def left_join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner: Callable[..., Any],
        windows: JoinWindows | None = None,
        named: NamedArg = None,
        *,
        key_selector: Callable[[Any, Any], Any] | None = None,
        with_key: bool = False,
        store_name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        joined: Joined | StreamJoined | None = None,
    ) -> KStream:
        """Every record of this stream, with ``None`` for a missing partner.

        With a stream, a record without a partner is emitted only once its join window has
        closed (time difference + grace), so no result is later contradicted.

        :param other: a ``KStream``, ``KTable`` or ``GlobalKTable``.
        :param joiner: ``joiner(value, other_value_or_None) -> result``, or
            ``joiner(key, value, other_value_or_None)`` with ``with_key=True``.
        :param windows: required with a stream (:class:`~fluvial.JoinWindows`).
        :param named: name of the join's processor(s).
        :param key_selector: with a ``GlobalKTable``: ``key_selector(key, value) -> the table's
            key``.
        :param with_key: pass the key to ``joiner`` first.
        :param store_name: prefix of a stream-stream join's store names.
        :param key_serde: serde of this stream's keys.
        :param value_serde: serde of this stream's values.
        :param other_value_serde: serde of the other side's values.
        :param joined: the same settings as :class:`~fluvial.Joined` or
            :class:`~fluvial.StreamJoined`.
        :returns: the stream of joined results, one per record of this stream at least.
        """
        return self._join(
            other, joiner, windows, named, LEFT, key_selector, with_key, store_name,
            key_serde, value_serde, other_value_serde, joined,
        )  # fmt: skip

    def outer_join(
        self,
        other: KStream,
        joiner: Callable[..., Any],
        windows: JoinWindows,
        named: NamedArg = None,
        *,
        with_key: bool = False,
        store_name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        joined: StreamJoined | None = None,
    ) -> KStream:
        """Records of either stream, joined where a partner came within the window.
        A record without a partner is emitted with ``None`` on the missing side once its join
        window has closed (time difference + grace), so no result is later contradicted.

        :param other: the other stream.
        :param joiner: ``joiner(value, other_value) -> result`` (one of them ``None`` for an
            unmatched record), or ``joiner(key, value, other_value)`` with ``with_key=True``.
        :param windows: how far apart two records may be (:class:`~fluvial.JoinWindows`).
        :param named: name of the join's processors.
        :param with_key: pass the key to ``joiner`` first.
        :param store_name: prefix of the join's store names.
        :param key_serde: serde of both streams' keys (for stores and repartition topics).
        :param value_serde: serde of this stream's values.
        :param other_value_serde: serde of the other stream's values.
        :param joined: the same settings as a :class:`~fluvial.StreamJoined`.
        :returns: the stream of joined results.
        """
        if not isinstance(other, KStream):
            raise TypeError("outer_join joins two streams; tables join with KTable.outer_join")
        return self._join(
            other, joiner, windows, named, OUTER, None, with_key, store_name,
            key_serde, value_serde, other_value_serde, joined,
        )  # fmt: skip

    def _join(
        self,
        other: Any,
        joiner: Callable[..., Any],
        windows: JoinWindows | None,
        named: NamedArg,
        kind: str,
        key_selector: Callable[[Any, Any], Any] | None,
        with_key: bool,
        store_name: str | None,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None,
        joined: Joined | StreamJoined | None = None,
    ) -> KStream:
        from fluvial.dsl import joins
        from fluvial.dsl.global_table import GlobalKTable
        from fluvial.dsl.ktable import KTable

        if isinstance(windows, Joined | StreamJoined):  # Kafka Streams' positional spelling
            joined, windows = windows, None
        if isinstance(joined, Joined) and isinstance(other, KStream):
            raise TypeError("a stream-stream join takes StreamJoined, not Joined")
        if isinstance(joined, StreamJoined) and not isinstance(other, KStream):
            raise TypeError("StreamJoined is for stream-stream joins; use Joined with a table")
        if joined is not None:
            key_serde = key_serde or joined.key_serde
            value_serde = value_serde or joined.value_serde
            other_value_serde = other_value_serde or joined.other_value_serde
            named = named or joined.name
            if isinstance(joined, StreamJoined):
                store_name = store_name or joined.store_name
        name = named_value(named)
        if isinstance(other, KStream):
            if windows is None:
                raise TypeError(
                    "a stream-stream join needs JoinWindows: stream.join(other, joiner, "
                    "JoinWindows.of_time_difference_and_grace(diff_ms, grace_ms))"
                )
            return joins.stream_stream(
                self, other, joiner, windows, kind, name, store_name, with_key,
                key_serde, value_serde, other_value_serde,
            )  # fmt: skip
        if windows is not None:
            raise TypeError("JoinWindows apply to stream-stream joins only")
        if isinstance(other, GlobalKTable):
            if key_selector is None:
                raise TypeError(
                    "a GlobalKTable join needs key_selector=lambda key, value: <table key>"
                )
            return joins.stream_global(
                self, other, key_selector, joiner, kind == LEFT, name, with_key
            )
        if isinstance(other, KTable):
            if key_selector is not None:
                raise TypeError(
                    "key_selector is for GlobalKTable joins; re-key the stream with "
                    "select_key(...) before joining a KTable"
                )
            return joins.stream_table(
                self, other, joiner, kind == LEFT, name, with_key, key_serde, value_serde
            )
        raise TypeError(f"cannot join a KStream with {type(other).__name__}")

    # -- grouping ---------------------------------------------------------------------------
    def group_by_key(
        self,
        grouped: Grouped | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KGroupedStream:
        """Group the records by their current key, for ``count``, ``reduce``, ``aggregate``,
        ``windowed_by`` or ``cogroup``.

        :param grouped: the repartition topic's name and serdes (:class:`~fluvial.Grouped`).
        :param key_serde: serde of the keys (default: ``grouped``'s, else the stream's).
        :param value_serde: serde of the values (default: ``grouped``'s, else the stream's).
        :returns: a :class:`KGroupedStream`. If the key changed upstream (``map``,
            ``select_key``...) the aggregation reads through a repartition topic, named after
            ``grouped``.
        """
        from fluvial.dsl.grouped import KGroupedStream

        g = grouped or Grouped()
        stream = KStream(
            self._builder,
            self.node,
            key_serde or g.key_serde or self.key_serde,
            value_serde or g.value_serde or self.value_serde,
            self.repartition_required,
        )
        return KGroupedStream(stream, g.name)

    def group_by(
        self,
        selector: Callable[[Any, Any], Any],
        grouped: Grouped | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KGroupedStream:
        """Group the records by a new key, for aggregations.
        ```python
        views.group_by(lambda user_id, view: view["page"], key_serde=serdes.string()).count()
        ```

        :param selector: ``selector(key, value) -> new_key``.
        :param grouped: the repartition topic's name and serdes (:class:`~fluvial.Grouped`).
        :param key_serde: serde of the new key (needed unless ``grouped`` gives one; a join
            downstream infers it from the other side).
        :param value_serde: serde of the values (default: the stream's).
        :returns: a :class:`KGroupedStream`; the aggregation reads through a repartition topic.
        """
        return self.select_key(selector).group_by_key(
            grouped, key_serde=key_serde, value_serde=value_serde or self.value_serde
        )

    def __repr__(self) -> str:
        return f"KStream({self.node})"


@dataclass(frozen=True)
class Branched:
    """Name of a branch and what to do with it (``with_function`` may return a new stream)."""

    name: str | None = None
    function: Callable[[KStream], KStream | None] | None = None
    consumer: Callable[[KStream], None] | None = None

    @staticmethod
    def as_(name: str) -> Branched:
        """A branch with a name and nothing else: the branch stream itself is in the result.

        :param name: appended to the ``split`` name to name the branch (``split(named="route-")``
            and ``Branched.as_("eu")`` give ``"route-eu"``, the branch's key in the result).
        :returns: the ``Branched`` to pass to ``branch`` or ``default_branch``.
        """
        return Branched(name)

    @staticmethod
    def with_function(fn: Callable[[KStream], KStream | None], name: str | None = None) -> Branched:
        """A branch whose stream is handed to ``fn`` as the topology is built.

        ```python
        def flag(large: KStream) -> KStream:
            return large.map_values(lambda order: {**order, "large": True})

        branches = (orders.split(named="orders-")
                    .branch(lambda k, order: order["total"] > 1000,
                            Branched.with_function(flag, "large"))
                    .default_branch(Branched.as_("small")))
        branches["orders-large"]   # the flagged stream
        ```

        :param fn: ``fn(branch_stream) -> stream or None``; what it returns replaces the branch in
            the result (None leaves the branch out).
        :param name: the branch's name, appended to the ``split`` name; by default its position.
        :returns: the ``Branched`` to pass to ``branch`` or ``default_branch``.
        """
        return Branched(name, function=fn)

    @staticmethod
    def with_consumer(fn: Callable[[KStream], None], name: str | None = None) -> Branched:
        """A branch whose stream is handed to ``fn``, which ends it (``to``, ``foreach``...).

        :param fn: ``fn(branch_stream) -> None``; the branch is then not in the result.
        :param name: the branch's name, appended to the ``split`` name; by default its position.
        :returns: the ``Branched`` to pass to ``branch`` or ``default_branch``.
        """
        return Branched(name, consumer=fn)


class BranchedKStream:
    """Returned by ``split()``: add branches, then finish with ``default_branch`` or ``no_default_branch``."""

    def __init__(self, stream: KStream, name: str) -> None:
        self._stream = stream
        self._name = name
        self._branches: list[tuple[Callable[[Any, Any], bool], str]] = []
        self._default: list[str] = []
        self._result: dict[str, KStream] = {}
        branches, default = self._branches, self._default
        # The supplier runs at task start, when every branch has been added.
        stream._itb.add_processor(
            name,
            lambda: BranchProcessor(list(branches), default[0] if default else None),
            [stream.node],
        )

    def branch(
        self, predicate: Callable[[Any, Any], bool], branched: Branched | None = None
    ) -> BranchedKStream:
        """Add a branch: records for which ``predicate`` holds, and no earlier branch's did.

        ```python
        branches = (stream.split(named="temp-")
                    .branch(lambda k, reading: reading["celsius"] > 40, Branched.as_("hot"))
                    .default_branch(Branched.as_("normal")))
        branches["temp-hot"].to("alerts")
        ```

        :param predicate: ``predicate(key, value) -> bool``; each record goes to the first branch
            whose predicate matches, in the order the branches were added.
        :param branched: the branch's name and what to do with it (:class:`~fluvial.Branched`);
            by default it is named by its position (``"1"``, ``"2"``...) after the ``split`` name.
        :returns: this ``BranchedKStream``, to add more branches and end with ``default_branch``
            or ``no_default_branch``, which return the branches by name.
        """
        child = self._child(branched, str(len(self._branches) + 1))
        self._branches.append((predicate, child))
        return self

    def default_branch(self, branched: Branched | None = None) -> dict[str, KStream]:
        """Records matching no predicate go here; returns every branch by name."""
        self._default.append(self._child(branched, "0"))
        return dict(self._result)

    def no_default_branch(self) -> dict[str, KStream]:
        """Records matching no predicate are dropped; returns every branch by name."""
        return dict(self._result)

    def _child(self, branched: Branched | None, suffix: str) -> str:
        b = branched or Branched()
        child = self._name + (b.name or suffix)
        itb = self._stream._itb
        itb.add_processor(child, PassThroughProcessor, [self._name])
        s = self._stream
        branch = KStream(s._builder, child, s.key_serde, s.value_serde, s.repartition_required)
        if b.consumer is not None:
            b.consumer(branch)
        elif b.function is not None:
            result = b.function(branch)
            if result is not None:
                self._result[child] = result
        else:
            self._result[child] = branch
        return child


__all__ = ["Branched", "BranchedKStream", "Consumed", "KStream"]
