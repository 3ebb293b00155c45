"""Wiring of joins into the topology: which nodes, stores and co-partitioning each join adds.

The processors live in :mod:`~fluvial.dsl.stream_table_join`,
:mod:`~fluvial.dsl.stream_stream_join` and :mod:`~fluvial.dsl.table_table_join`; this module
connects them. Joined inputs must be co-partitioned: their source topics are registered as a
co-partition group, which the runtime checks (and repartition topics follow) before it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluvial.dsl import graph
from fluvial.dsl.getters import store_getter
from fluvial.dsl.old_values import OldValues
from fluvial.dsl.options import Materialized
from fluvial.dsl.stream_stream_join import JoinTimes, StreamStreamJoinProcessor
from fluvial.dsl.stream_table_join import StreamTableJoinProcessor, value_joiner
from fluvial.dsl.table_ops import TableSourceProcessor
from fluvial.dsl.table_table_join import INNER, LEFT, OUTER, TableTableJoinProcessor, join_getter
from fluvial.dsl.windows import JoinWindows
from fluvial.serdes import Serde
from fluvial.topology.nodes import KEY_VALUE, WINDOW, StoreSpec

if TYPE_CHECKING:
    from fluvial.dsl.global_table import GlobalKTable
    from fluvial.dsl.kstream import KStream
    from fluvial.dsl.ktable import KTable

JOIN_KINDS = (INNER, LEFT, OUTER)


def stream_table(
    stream: KStream,
    table: KTable,
    joiner: Callable[..., Any],
    left: bool,
    name: str | None,
    with_key: bool,
    key_serde: Serde[Any] | None = None,
    value_serde: Serde[Any] | None = None,
) -> KStream:
    from fluvial.dsl.kstream import KStream

    itb = stream._itb
    name = name or itb.new_processor_name("KSTREAM-JOIN-")
    parent = stream._repartition_if_required(None, name, key_serde, value_serde)
    getter = table._value_getter()
    # After the getter: it may have materialized the table behind a new node.
    table_node, table_name = table.node, f"store {', '.join(getter.stores)}"
    itb.add_processor(
        name,
        lambda: StreamTableJoinProcessor(getter, value_joiner(joiner, with_key), left,
                                         table_node=table_node, table_name=table_name),
        [parent],
        getter.stores,
    )  # fmt: skip
    if left:
        graph.null_key_join(itb, name)
    graph.copartition(itb, parent, table.node)
    # The joined records carry the table's keys: equal keys, written alike on both sides.
    out_key_serde = key_serde or stream.key_serde or table.key_serde
    return KStream(stream._builder, name, out_key_serde, None, False)


def stream_global(
    stream: KStream,
    table: GlobalKTable,
    key_selector: Callable[[Any, Any], Any],
    joiner: Callable[..., Any],
    left: bool,
    name: str | None,
    with_key: bool,
) -> KStream:
    """No repartition and no co-partitioning: every task holds the whole global table."""
    from fluvial.dsl.kstream import KStream

    itb = stream._itb
    name = name or itb.new_processor_name("KSTREAM-JOIN-")
    getter = table._getter
    itb.add_processor(
        name,
        lambda: StreamTableJoinProcessor(
            getter, value_joiner(joiner, with_key), left, key_selector
        ),
        [stream.node],
        getter.stores,
    )
    if left:
        graph.null_key_join(itb, name)
    return KStream(stream._builder, name, stream.key_serde, None, stream.repartition_required)


def stream_stream(
    left: KStream,
    right: KStream,
    joiner: Callable[..., Any],
    windows: JoinWindows,
    kind: str,
    name: str | None,
    store_name: str | None,
    with_key: bool,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    other_value_serde: Serde[Any] | None,
) -> KStream:
    """Two join processors, one per side, sharing both window stores; a merge node after them."""
    from fluvial.dsl.kstream import KStream

    if not isinstance(windows, JoinWindows):
        raise TypeError(
            "a stream-stream join needs JoinWindows, e.g. "
            "JoinWindows.of_time_difference_and_grace(5000, 1000)"
        )
    itb = left._itb
    tag = {INNER: "", LEFT: "LEFT", OUTER: "OUTER"}[kind]
    this_name = itb.new_processor_name(f"KSTREAM-{tag}JOINTHIS-")
    other_name = itb.new_processor_name(f"KSTREAM-{tag}JOINOTHER-")
    merge_name = name or itb.new_processor_name("KSTREAM-MERGE-")
    prefix = store_name or name
    this_store = f"{prefix}-this-join-store" if prefix else f"{this_name}-store"
    other_store = f"{prefix}-other-join-store" if prefix else f"{other_name}-store"
    outer_store = None
    if kind != INNER:
        outer_store = (
            f"{prefix}-outer-shared-join-store"
            if prefix
            else f"{itb.new_processor_name('KSTREAM-OUTERSHARED-')}-store"
        )
    # Both repartition topics (of sides re-keyed before the join) take the join's key serde.
    left_parent = left._repartition_if_required(
        None, f"{prefix or this_name}-left", key_serde, value_serde
    )
    right_parent = right._repartition_if_required(
        None, f"{prefix or other_name}-right", key_serde, other_value_serde
    )
    k = graph.internal_serde(key_serde or left.key_serde or right.key_serde)
    lv = graph.internal_serde(value_serde or left.value_serde)
    rv = graph.internal_serde(other_value_serde or right.value_serde)
    stores = (this_store, other_store) + ((outer_store,) if outer_store else ())
    fn = value_joiner(joiner, with_key)
    times = JoinTimes()  # the two sides of a task share their join's stream time

    def side(is_left: bool) -> StreamStreamJoinProcessor:
        return StreamStreamJoinProcessor(
            left_side=is_left,
            windows=windows,
            joiner=fn,
            this_store=this_store if is_left else other_store,
            other_store=other_store if is_left else this_store,
            outer_store=outer_store,
            emit_unmatched_this=kind == OUTER or (kind == LEFT and is_left),
            key_serde=k,
            this_serde=lv if is_left else rv,
            other_serde=rv if is_left else lv,
            times=times,
        )

    itb.add_processor(this_name, lambda: side(True), [left_parent], stores)
    itb.add_processor(other_name, lambda: side(False), [right_parent], stores)
    # As in Kafka Streams: a record stays joinable for the window's size plus grace, measured
    # from the newest record of its own side.
    size = max(1, windows.size_ms)
    retention = max(size, windows.size_ms + windows.grace_ms)
    for store, value_serde_ in ((this_store, lv), (other_store, rv)):
        itb.add_store(
            StoreSpec(
                name=store, kind=WINDOW, key_serde=k, value_serde=value_serde_,
                caching_enabled=False, retention_ms=retention, window_size_ms=size,
                retain_duplicates=True, internal_format=True,
            )
        )  # fmt: skip
    if outer_store is not None:
        itb.add_store(
            StoreSpec(
                name=outer_store, kind=KEY_VALUE, key_serde=k, value_serde=None,
                caching_enabled=False, internal_format=True,
            )
        )  # fmt: skip
    itb.add_processor(merge_name, graph.pass_through, [this_name, other_name])
    if kind != INNER:
        graph.null_key_join(itb, merge_name)
    graph.copartition(itb, left_parent, right_parent)
    return KStream(left._builder, merge_name, left.key_serde, None, False)


def table_table(
    left: KTable,
    right: KTable,
    joiner: Callable[..., Any],
    kind: str,
    name: str | None,
    materialized: Materialized | None,
    with_key: bool,
) -> KTable:
    from fluvial.dsl.ktable import KTable

    itb = left._itb
    tag = {INNER: "", LEFT: "LEFT", OUTER: "OUTER"}[kind]
    this_name = itb.new_processor_name(f"KTABLE-{tag}JOINTHIS-")
    other_name = itb.new_processor_name(f"KTABLE-{tag}JOINOTHER-")
    merge_name = name or itb.new_processor_name("KTABLE-MERGE-")
    if kind in (LEFT, OUTER):
        left._old_values.enable(True)
    if kind == OUTER:
        right._old_values.enable(True)
    lg, rg = left._value_getter(), right._value_getter()
    fn = value_joiner(joiner, with_key)
    itb.add_processor(
        this_name, lambda: TableTableJoinProcessor(kind, fn, True, rg), [left.node], rg.stores
    )
    itb.add_processor(
        other_name, lambda: TableTableJoinProcessor(kind, fn, False, lg), [right.node], lg.stores
    )
    itb.add_processor(merge_name, graph.pass_through, [this_name, other_name])
    graph.copartition(itb, left.node, right.node)
    result = KTable(
        left._builder, merge_name, left.key_serde, None,
        getter=join_getter(kind, fn, lg, rg),
        old_values=OldValues(left._old_values, right._old_values),
    )  # fmt: skip
    return materialize(result, materialized) if materialized is not None else result


def materialize(
    table: KTable, materialized: Materialized, prefix: str = "KTABLE-", filtered: bool = False
) -> KTable:
    """Write a table's changes into a store of its own, then continue from that store.

    ``filtered``: the table is a filter's, queryable: deletions of rows the store lacks are
    dropped where the filter sends old values, as in Kafka Streams' filter with a store.
    """
    from fluvial.dsl.ktable import KTable

    itb = table._itb
    m = materialized
    store = graph.store_name(itb, m, prefix)
    name = itb.new_processor_name("KTABLE-MATERIALIZE-")
    key_serde = m.key_serde or table.key_serde
    value_serde = m.value_serde or table.value_serde
    k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
    skip = table._old_values if filtered else None
    itb.add_processor(
        name,
        lambda: TableSourceProcessor(store, k, v, input_is_change=True, filtered=skip),
        [table.node],
    )
    itb.add_store(graph.kv_store_spec(store, m, k, v), name)
    return KTable(
        table._builder, name, key_serde, value_serde, store_name=store,
        getter=store_getter(store, k, v, m.versioned),
        old_values=table._old_values,  # the materialized table is the same table
    )  # fmt: skip
