"""``KTable`` and ``KGroupedTable``: tables as streams of revisions.

A table operator receives ``Change(new, old)`` for each update; ``to_stream`` turns the table
back into its stream of new values. ``suppress`` holds revisions back until windows close or a
time limit passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluvial import serdes
from fluvial.dsl import graph, joins
from fluvial.dsl.change import change_serde
from fluvial.dsl.getters import GetterSupplier, store_getter, transform_getter
from fluvial.dsl.kstream import KStream, NamedArg, named_value
from fluvial.dsl.old_values import DerivedOldValues, OldValues, PassThroughOldValues
from fluvial.dsl.options import Grouped, Materialized
from fluvial.dsl.suppress import SuppressProcessor
from fluvial.dsl.suppressed import Suppressed
from fluvial.dsl.table_ops import (
    TableAggregateProcessor,
    TableFilterProcessor,
    TableMapValuesProcessor,
    TableSelectProcessor,
    TableToStreamProcessor,
)
from fluvial.dsl.table_table_join import INNER, LEFT, OUTER
from fluvial.dsl.windows import AnyWindows, SessionWindows
from fluvial.processor_api import ProcessorSupplier
from fluvial.serdes import Serde
from fluvial.topology.nodes import KEY_VALUE, StoreSpec

if TYPE_CHECKING:
    from fluvial.dsl.builder import StreamsBuilder


class KTable:
    """A changelog stream read as a table: the latest value per key.

    ``store_name`` is set when the table is materialized in a store of its own; ``windows`` when
    it is the result of a windowed aggregation (its keys are then ``Windowed``). ``getter``
    says how a join looks a key up in this table (see :mod:`fluvial.dsl.getters`).
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        store_name: str | None = None,
        windows: AnyWindows | None = None,
        inner_key_serde: Serde[Any] | None = None,
        getter: GetterSupplier | None = None,
        old_values: OldValues | None = None,
    ) -> None:
        self._builder = builder
        self._itb = builder._itb
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.store_name = store_name
        self.windows = windows
        self._inner_key_serde = inner_key_serde
        self._getter = getter
        self._old_values = old_values or OldValues()

    @property
    def queryable_store_name(self) -> str | None:
        """The name of the store that holds this table, for interactive queries and
        ``TopologyTestDriver.get_key_value_store``; None when the table is not materialized."""
        return self.store_name

    def _derive(
        self,
        prefix: str,
        supplier: ProcessorSupplier,
        named: NamedArg,
        value_serde: Serde[Any] | None,
        getter: GetterSupplier | None = None,
        materialized: Materialized | None = None,
        old_values: OldValues | None = None,
        filtered: bool = False,
    ) -> KTable:
        name = named_value(named) or self._itb.new_processor_name(prefix)
        self._itb.add_processor(name, supplier, [self.node])
        table = KTable(
            self._builder, name, self.key_serde, value_serde,
            windows=self.windows, inner_key_serde=self._inner_key_serde, getter=getter,
            old_values=old_values,
        )  # fmt: skip
        if materialized is None:
            return table
        return joins.materialize(table, materialized, filtered=filtered)

    def _internal_key_serde(self) -> Serde[Any]:
        if self.windows is not None:
            inner = graph.internal_serde(self._inner_key_serde)
            return self.windows.windowed_key_serde(inner)
        return graph.internal_serde(self.key_serde)

    def _value_getter(self) -> GetterSupplier:
        """How joins read this table; a table without one is materialized into a store first."""
        self._old_values.getter_requested()
        if self._getter is None:
            if self.windows is not None:
                raise TypeError(
                    f"{self.node}: joins on windowed tables are not supported; join the "
                    "tables before windowing, or use to_stream() and a stream join"
                )
            materialized = joins.materialize(self, Materialized().with_caching_disabled())
            self.node = materialized.node
            self.store_name = materialized.store_name
            self._getter = materialized._getter
        assert self._getter is not None
        return self._getter

    def filter(
        self,
        predicate: Callable[[Any, Any], bool],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Rows for which ``predicate(key, value)`` holds; a row that stops matching is deleted."""
        return self._filter(predicate, False, named, materialized)

    def filter_not(
        self,
        predicate: Callable[[Any, Any], bool],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Rows for which ``predicate(key, value)`` does not hold: the opposite of :meth:`filter`.

        ```python
        active = users.filter_not(lambda user_id, user: user["deleted"])
        ```

        :param predicate: ``predicate(key, value) -> bool``; a row for which it holds is deleted
            downstream (a tombstone), so a row that starts to match disappears from the result.
        :param named: name of the filter's processor.
        :param materialized: materialize the result in a store of this name (queryable); by default
            it is computed from the parent's store when read.
        :returns: the filtered table.
        """
        return self._filter(predicate, True, named, materialized)

    def _filter(
        self,
        predicate: Callable[[Any, Any], bool],
        negate: bool,
        named: NamedArg,
        materialized: Materialized | None,
    ) -> KTable:
        def keep(key: Any, value: Any) -> Any:
            return value if bool(predicate(key, value)) != negate else None

        queryable = _queryable(materialized)
        old_values = DerivedOldValues(self._old_values, queryable, ask_parent=True)
        return self._derive(
            "KTABLE-FILTER-",
            lambda: TableFilterProcessor(predicate, negate, old_values, queryable), named,
            self.value_serde, transform_getter(self._getter, keep), materialized, old_values,
            filtered=queryable,
        )  # fmt: skip

    def map_values(
        self,
        mapper: Callable[..., Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
        *,
        with_key: bool = False,
    ) -> KTable:
        """Replace each row's value; ``mapper`` sees new and old values alike.
        :param mapper: ``mapper(value) -> new_value``, or ``mapper(key, value)`` with
            ``with_key=True``; it should be a pure function, since old values are mapped again.
        :param named: name of the processor.
        :param materialized: materialize the result in a store of this name (queryable); by default
            it is computed from the parent's store when read.
        :param with_key: pass the key to ``mapper`` too.
        :returns: the mapped table.
        """

        def apply(key: Any, value: Any) -> Any:
            return mapper(key, value) if with_key else mapper(value)

        old_values = DerivedOldValues(self._old_values, _queryable(materialized), ask_parent=False)
        return self._derive(
            "KTABLE-MAPVALUES-", lambda: TableMapValuesProcessor(mapper, with_key), named, None,
            transform_getter(self._getter, apply), materialized, old_values,
        )  # fmt: skip

    # -- joins ------------------------------------------------------------------------------
    def join(
        self,
        other: KTable,
        joiner: Callable[..., Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
        *,
        foreign_key_extractor: Callable[[Any], Any] | None = None,
        with_key: bool = False,
    ) -> KTable:
        """Rows present in both tables, ``joiner(left, right)``; revised as either side changes.

        With ``foreign_key_extractor(left_value)``, each left row joins the right row whose key
        is its foreign key (tables need not be co-partitioned).

        ```python
        orders.join(customers, lambda order, customer: {**order, "name": customer["name"]},
                    foreign_key_extractor=lambda order: order["customer_id"])
        ```

        :param other: the other table (co-partitioned, unless joined by foreign key).
        :param joiner: ``joiner(value, other_value) -> result``, or
            ``joiner(key, value, other_value)`` with ``with_key=True``.
        :param named: name of the join's processors.
        :param materialized: the result's store name, serdes and caching.
        :param foreign_key_extractor: ``foreign_key_extractor(value) -> other table's key``.
        :param with_key: pass the key to ``joiner`` first.
        :returns: the joined table, keyed as this table.
        """
        return self._join(
            other, joiner, INNER, named, materialized, foreign_key_extractor, with_key
        )

    def left_join(
        self,
        other: KTable,
        joiner: Callable[..., Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
        *,
        foreign_key_extractor: Callable[[Any], Any] | None = None,
        with_key: bool = False,
    ) -> KTable:
        """Every row of this table, with the other table's row for its key or ``None``.
        :param other: the other table (co-partitioned, unless joined by foreign key).
        :param joiner: ``joiner(value, other_value_or_None) -> result``, or
            ``joiner(key, value, other_value_or_None)`` with ``with_key=True``.
        :param named: name of the join's processors.
        :param materialized: the result's store name, serdes and caching.
        :param foreign_key_extractor: ``foreign_key_extractor(value) -> other table's key``: join
            each row with the other table's row of that key.
        :param with_key: pass the key to ``joiner`` first.
        :returns: the joined table, revised as either side changes.
        """
        return self._join(other, joiner, LEFT, named, materialized, foreign_key_extractor, with_key)

    def outer_join(
        self,
        other: KTable,
        joiner: Callable[..., Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
        *,
        with_key: bool = False,
    ) -> KTable:
        """Rows of either table, the missing side ``None``; revised as either side changes.
        :param other: the other table (co-partitioned).
        :param joiner: ``joiner(value_or_None, other_value_or_None) -> result``, or with the key
            first when ``with_key=True``.
        :param named: name of the join's processors.
        :param materialized: the result's store name, serdes and caching.
        :param with_key: pass the key to ``joiner`` first.
        :returns: the joined table.
        """
        return self._join(other, joiner, OUTER, named, materialized, None, with_key)

    def _join(
        self,
        other: KTable,
        joiner: Callable[..., Any],
        kind: str,
        named: NamedArg,
        materialized: Materialized | None,
        foreign_key_extractor: Callable[[Any], Any] | None,
        with_key: bool,
    ) -> KTable:
        if not isinstance(other, KTable):
            raise TypeError(
                f"KTable joins take another KTable, got {type(other).__name__}; to join a "
                "stream with a table call stream.join(table, ...)"
            )
        if foreign_key_extractor is not None:
            from fluvial.dsl.fk_join import foreign_key_join

            return foreign_key_join(
                self, other, foreign_key_extractor, joiner, kind == LEFT,
                named_value(named), materialized, with_key,
            )  # fmt: skip
        return joins.table_table(
            self, other, joiner, kind, named_value(named), materialized, with_key
        )

    def to_stream(self, named: NamedArg = None) -> KStream:
        """The table's updates as a stream of ``(key, new value)``; deletes are ``None`` values."""
        name = named_value(named) or self._itb.new_processor_name("KTABLE-TOSTREAM-")
        self._itb.add_processor(name, TableToStreamProcessor, [self.node])
        return KStream(self._builder, name, self.key_serde, self.value_serde, False)

    def suppress(self, suppressed: Suppressed) -> KTable:
        """Hold revisions back: see :class:`~fluvial.Suppressed`."""
        itb = self._itb
        if suppressed.name:
            name, store = suppressed.name, f"{suppressed.name}-store"
        else:
            name = itb.new_processor_name("KTABLE-SUPPRESS-")
            store = itb.new_store_name("KTABLE-SUPPRESS-")
        self._old_values.enable(True)
        grace = None
        if suppressed.kind == "window_close":
            if self.windows is None:
                itb._problems.append(
                    f"{name}: suppress(until_window_closes) needs a windowed table upstream "
                    "(groupBy...windowed_by(...).count()/aggregate()); for other tables use "
                    "Suppressed.until_time_limit(...)"
                )
                grace = 0
            elif isinstance(self.windows, SessionWindows):
                # A session may still grow (and so change its end) for one gap after its last
                # record: Kafka Streams waits gap + grace before its final result.
                grace = self.windows.inactivity_gap_ms + self.windows.grace_ms
            else:
                grace = self.windows.grace_ms
        k = self._internal_key_serde()
        v = graph.internal_serde(self.value_serde)
        itb.add_processor(
            name, lambda: SuppressProcessor(name, store, suppressed, k, v, grace), [self.node]
        )
        itb.add_store(
            StoreSpec(
                name=store, kind=KEY_VALUE, key_serde=k, value_serde=v,
                caching_enabled=False, internal_format=True,
            ),
            name,
        )  # fmt: skip
        return KTable(
            self._builder, name, self.key_serde, self.value_serde,
            windows=self.windows, inner_key_serde=self._inner_key_serde,
            old_values=PassThroughOldValues(self._old_values),
        )  # fmt: skip

    def group_by(
        self,
        selector: Callable[[Any, Any], Any],
        grouped: Grouped | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> KGroupedTable:
        """Regroup the table's rows by a new key, for ``count``, ``reduce`` or ``aggregate``.

        :param selector: ``selector(key, value) -> (new_key, new_value)`` (a tuple or a
            :class:`~fluvial.KeyValue`); a None key or value leaves the row out of every group.
        :param grouped: the repartition topic's name and serdes (:class:`~fluvial.Grouped`).
        :param key_serde: serde of the new key, when it is not the table's.
        :param value_serde: serde of the new value, when it is not the table's.
        :returns: a :class:`KGroupedTable`. It always writes a repartition topic, carrying each
            change's old and new value so the aggregation can subtract the one and add the other.
        """
        g = grouped or Grouped()
        self._old_values.enable(True)  # the subtractor needs each row's old value
        name = self._itb.new_processor_name("KTABLE-SELECT-")
        self._itb.add_processor(name, lambda: TableSelectProcessor(selector), [self.node])
        return KGroupedTable(
            self._builder, name, key_serde or g.key_serde, value_serde or g.value_serde, g.name
        )

    def __repr__(self) -> str:
        return f"KTable({self.node})"


def _queryable(materialized: Materialized | None) -> bool:
    """Kafka Streams materializes a filtered or mapped table only under a store name."""
    return materialized is not None and materialized.store_name is not None


class KGroupedTable:
    """A table regrouped by a new key; its aggregations subtract old values and add new ones."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        grouped_name: str | None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._grouped_name = grouped_name

    def count(self, named: NamedArg = None, materialized: Materialized | None = None) -> KTable:
        """Count the rows of each new key (of ``group_by``), kept right as rows change.

        A row that moves to another group is subtracted from its old group's count and added to the
        new one's; a deleted row is subtracted. A group whose count falls to 0 keeps a row of 0.

        ```python
        users_per_region = users.group_by(lambda user_id, user: (user["region"], user)).count()
        ```

        :param named: name of the aggregation's processor.
        :param materialized: the store's name, serdes and caching; counts are 8-byte longs unless
            its value serde says otherwise.
        :returns: a table of ``new key -> number of rows``.
        """
        m = materialized or Materialized()
        return self._aggregate(
            "KTABLE-AGGREGATE-", lambda: 0,
            lambda k, v, agg: agg + 1, lambda k, v, agg: agg - 1,
            named, m, m.value_serde or serdes.long(),
        )  # fmt: skip

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Combine the rows of each new key into a value of the same type, kept right as rows
        change: a row's old value is subtracted from its old group, then its new value added.

        ```python
        (accounts.group_by(lambda account_id, acc: (acc["branch"], acc["balance"]))
            .reduce(lambda total, balance: total + balance,
                    lambda total, balance: total - balance))
        ```

        :param adder: ``adder(aggregate, value) -> new aggregate``, for a row added to the group
            (a group's first value is its aggregate).
        :param subtractor: ``subtractor(aggregate, old_value) -> new aggregate``, for a row that
            left the group (changed, moved to another group, or deleted).
        :param named: name of the aggregation's processor.
        :param materialized: the store's name, serdes and caching; the value serde defaults to
            the grouped values'.
        :returns: a table of ``new key -> aggregate``.
        """
        m = materialized or Materialized()
        return self._aggregate(
            "KTABLE-REDUCE-", None,
            lambda k, v, agg: adder(agg, v), lambda k, v, agg: subtractor(agg, v),
            named, m, m.value_serde or self._value_serde,
        )  # fmt: skip

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        named: NamedArg = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """Fold the rows of each new key into an aggregate of any type, kept right as rows
        change: a row's old value is subtracted from its old group, then its new value added.

        ```python
        (users.group_by(lambda user_id, user: (user["region"], user["age"]))
            .aggregate(lambda: {"n": 0, "ages": 0},
                       lambda region, age, agg: {"n": agg["n"] + 1, "ages": agg["ages"] + age},
                       lambda region, age, agg: {"n": agg["n"] - 1, "ages": agg["ages"] - age},
                       materialized=Materialized.with_(serdes.string(), serdes.json())))
        ```

        :param initializer: ``initializer() -> aggregate``, a group's aggregate before its first
            row.
        :param adder: ``adder(key, value, aggregate) -> new aggregate`` for a row that joins the
            group (or its new value): the group's key and the row's value first, the aggregate
            last, as ``KGroupedStream.aggregate``'s aggregator.
        :param subtractor: ``subtractor(key, old_value, aggregate) -> new aggregate`` for a row
            that leaves the group (or its old value), in the same order.
        :param named: name of the aggregation's processor.
        :param materialized: the store's name, serdes and caching; give a value serde when the
            aggregate is not the grouped value type.
        :returns: a table of ``new key -> aggregate``.
        """
        m = materialized or Materialized()
        return self._aggregate(
            "KTABLE-AGGREGATE-", initializer, adder, subtractor, named, m, m.value_serde
        )

    def _aggregate(
        self,
        prefix: str,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        named: NamedArg,
        m: Materialized,
        agg_serde: Serde[Any] | None,
    ) -> KTable:
        itb = self._builder._itb
        store = graph.store_name(itb, m, prefix)
        # Kafka Streams' order of generated names: store, sink, source, aggregate.
        topic = f"{self._grouped_name or store}-repartition"
        if self._grouped_name:
            sink, source = f"{topic}-sink", f"{topic}-source"
        else:
            sink = itb.new_processor_name(graph.SINK)
            source = itb.new_processor_name(graph.SOURCE)
        name = named_value(named) or itb.new_processor_name(prefix)
        k = graph.repartition_key_serde(itb, topic, m.key_serde or self._key_serde)
        changes = change_serde(graph.internal_serde(self._value_serde))
        itb.add_repartition_topic(topic)
        itb.add_sink(sink, topic, [self._node], k, changes)
        itb.add_source(source, [topic], k, changes)
        a = graph.internal_serde(agg_serde)
        old_values = OldValues()
        itb.add_processor(
            name,
            lambda: TableAggregateProcessor(
                store, k, a, initializer, adder, subtractor, old_values
            ),
            [source],
        )
        itb.add_store(graph.kv_store_spec(store, m, k, a), name)
        return KTable(
            self._builder, name, m.key_serde or self._key_serde, agg_serde, store_name=store,
            getter=store_getter(store, k, a), old_values=old_values,
        )  # fmt: skip
