"""Shared plumbing of the DSL classes: serde fallbacks, store specs and repartition topics."""

from __future__ import annotations

from typing import Any

from fluvial import serdes
from fluvial.dsl.options import Materialized
from fluvial.dsl.stateless import PassThroughProcessor, RepartitionFilterProcessor
from fluvial.serdes import Serde
from fluvial.topology.builder import InternalTopologyBuilder
from fluvial.topology.nodes import (
    TIMESTAMPED_KEY_VALUE,
    VERSIONED_KEY_VALUE,
    SinkNode,
    SourceNode,
    StoreSpec,
)

SOURCE = "KSTREAM-SOURCE-"
SINK = "KSTREAM-SINK-"
FILTER = "KSTREAM-FILTER-"


def internal_serde(serde: Serde[Any] | None) -> Serde[Any]:
    """The serde for bytes only fluvial reads (repartition topics, stores): JSON when unknown.

    JSON carries str, int, float, bool, None, lists and dicts; pass serdes explicitly (Grouped,
    Materialized) for other keys or values.
    """
    return serde if serde is not None else serdes.json()


def repartition_key_serde(
    itb: InternalTopologyBuilder, topic: str, key_serde: Serde[Any] | None
) -> Serde[Any]:
    """The key serde a repartition topic is written with for now.

    A known serde is kept. An unknown one is JSON unless the topic turns out to feed a join or
    a co-grouping, where it takes the other side's key serde when the DSL builds (see
    :mod:`fluvial.dsl.copartition`): equal keys must be equal bytes on both sides.
    """
    from fluvial.dsl.copartition import DECLARED, INFERRED, mark_key_format

    mark_key_format(itb, topic, DECLARED if key_serde is not None else INFERRED, key_serde)
    return internal_serde(key_serde)


def store_name(itb: InternalTopologyBuilder, materialized: Materialized | None, prefix: str) -> str:
    """The user's store name, or a generated ``PREFIX-STATE-STORE-000000000N``."""
    if materialized is not None and materialized.store_name:
        return materialized.store_name
    return itb.new_store_name(prefix)


def kv_store_spec(
    name: str,
    materialized: Materialized | None,
    key_serde: Serde[Any],
    value_serde: Serde[Any],
) -> StoreSpec:
    """A table's store: timestamped key-value, or versioned when the user asked for history."""
    m = materialized or Materialized()
    return StoreSpec(
        name=name,
        kind=VERSIONED_KEY_VALUE if m.versioned else TIMESTAMPED_KEY_VALUE,
        key_serde=key_serde,
        value_serde=value_serde,
        store_type=m.store_type,
        caching_enabled=m.caching_enabled and not m.versioned,
        logging_enabled=m.logging_enabled,
        history_retention_ms=m.history_retention_ms,
        internal_format=True,
    )


def source_nodes(itb: InternalTopologyBuilder, node: str) -> list[str]:
    """The source nodes ``node`` reads from, directly or through other processors."""
    found: list[str] = []
    seen: set[str] = set()
    stack = [node]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        current = itb.nodes[name]
        if isinstance(current, SourceNode):
            found.append(name)
        else:
            stack.extend(current.parents)
    return sorted(found)


def copartition(itb: InternalTopologyBuilder, *nodes: str) -> None:
    """Require the topics feeding ``nodes`` to have equal partition counts (a join's inputs)."""
    sources = sorted({s for node in nodes for s in source_nodes(itb, node)})
    if len(sources) > 1:
        itb.copartition(*sources)


def add_repartition(
    itb: InternalTopologyBuilder,
    parent: str,
    topic_prefix: str,
    user_named: bool,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    num_partitions: int | None = None,
) -> str:
    """Null-key filter → sink → ``<prefix>-repartition`` → source; return the source's name.

    Records are re-keyed upstream; writing them through a topic partitioned by the new key is
    what puts all records of a key into the same task. Null keys are dropped, unless a left or
    outer join downstream still emits them (see :func:`resolve_null_key_filters`).
    """
    topic = f"{topic_prefix}-repartition"
    if user_named:
        sink, filter_, source = (f"{topic}-sink", f"{topic}-filter", f"{topic}-source")
    else:  # Kafka Streams' order of generated names: sink, filter, source
        sink = itb.new_processor_name(SINK)
        filter_ = itb.new_processor_name(FILTER)
        source = itb.new_processor_name(SOURCE)
    k, v = repartition_key_serde(itb, topic, key_serde), internal_serde(value_serde)
    itb.add_repartition_topic(topic, num_partitions)
    policy = NullKeyPolicy()
    itb.repartition_filters[filter_] = policy
    itb.add_processor(filter_, lambda: RepartitionFilterProcessor(policy), [parent])
    itb.add_sink(sink, topic, [filter_], k, v)
    itb.add_source(source, [topic], k, v)
    return source


def pass_through() -> PassThroughProcessor:
    """Supplier of merge nodes: where two processors' outputs continue as one stream."""
    return PassThroughProcessor()


class NullKeyPolicy:
    """Whether one repartition filter lets null keys through; settled when the DSL builds."""

    keep_null_keys = False


def null_key_join(itb: InternalTopologyBuilder, node: str) -> None:
    """Mark ``node`` as a join that emits records with null keys: a left/outer stream-stream
    join, or a left stream-table or stream-GlobalKTable join (as in Kafka Streams 3.7+)."""
    itb.null_key_joins.add(node)


def resolve_null_key_filters(itb: InternalTopologyBuilder) -> None:
    """A repartition keeps null keys exactly when such a join lies downstream of it, through
    any path and any further repartition topics, as Kafka Streams decides it."""
    readers: dict[str, list[str]] = {}
    for node in itb.nodes.values():
        if isinstance(node, SourceNode):
            for topic in node.topics:
                readers.setdefault(topic, []).append(node.name)
    for name, policy in itb.repartition_filters.items():
        seen, stack = set(), [name]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            node = itb.nodes[current]
            stack.extend(node.children)
            if isinstance(node, SinkNode):
                stack.extend(readers.get(node.topic, []))
        policy.keep_null_keys = bool(seen & itb.null_key_joins)
