"""Assembles nodes, stores and internal topics into a :class:`~fluvial.topology.Topology`.

The DSL and ``Topology``-level Processor API users both write through this builder. Problems are
collected as they are found and reported together by :meth:`InternalTopologyBuilder.build`, so a
user sees every mistake in one error instead of fixing them one run at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluvial.errors import TopologyError
from fluvial.processor_api import ProcessorSupplier
from fluvial.serdes import Serde
from fluvial.topology.nodes import (
    OFFSET_RESETS,
    Node,
    ProcessorNode,
    SinkNode,
    SourceNode,
    StoreSpec,
    StreamPartitioner,
)
from fluvial.topology.topology import InternalTopic, Topology

REPARTITION = "repartition"


class InternalTopologyBuilder:
    """Collects the processor graph; names generated here follow Kafka Streams' scheme."""

    def __init__(self) -> None:
        self._index = 0
        self.nodes: dict[str, Node] = {}
        self.stores: dict[str, StoreSpec] = {}
        self.internal_topics: dict[str, InternalTopic] = {}
        self.copartition_groups: list[set[str]] = []
        # GlobalKTables: their nodes run outside every task, their stores are shared by all.
        self.global_nodes: set[str] = set()
        self.global_stores: set[str] = set()
        # Source nodes of tables (builder.table): their topics must be partitioned by key.
        self.table_sources: set[str] = set()
        # The DSL's repartition filters and the joins that relax their null-key rule (see
        # fluvial.dsl.graph.resolve_null_key_filters), settled when the DSL builds.
        self.repartition_filters: dict[str, Any] = {}
        self.null_key_joins: set[str] = set()
        # How fluvial writes the keys of its internal topics, by topic (see
        # fluvial.dsl.copartition): a repartition topic's key serde may be inferred at build.
        self.key_formats: dict[str, Any] = {}
        self._problems: list[str] = []

    def problem(self, message: str) -> None:
        """Record a mistake in the topology; :meth:`build` reports all of them together."""
        self._problems.append(message)

    # -- names ------------------------------------------------------------------------------
    def new_processor_name(self, prefix: str) -> str:
        """``PREFIX-0000000007``: one counter for nodes and stores, as in Kafka Streams."""
        name = f"{prefix}{self._index:010d}"
        self._index += 1
        return name

    def new_store_name(self, prefix: str) -> str:
        """``PREFIX-STATE-STORE-0000000003``."""
        return self.new_processor_name(f"{prefix}STATE-STORE-")

    # -- nodes ------------------------------------------------------------------------------
    def add_source(
        self,
        name: str,
        topics: list[str],
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        auto_offset_reset: str = "earliest",
    ) -> None:
        if not topics:
            self._problems.append(f"source {name!r} reads no topic: give at least one topic name")
        for topic in topics:
            for other in self.nodes.values():
                if isinstance(other, SourceNode) and topic in other.topics:
                    self._problems.append(
                        f"topic {topic!r} is read by two sources ({other.name!r} and {name!r}): "
                        "read it once and reuse the stream (merge, or branch with split())"
                    )
        if timestamp_extractor is not None and not callable(timestamp_extractor):
            self._problems.append(
                f"source {name!r}: timestamp_extractor must be a function "
                f"(record, partition_time_ms) -> int milliseconds, got {timestamp_extractor!r}"
            )
        if auto_offset_reset not in OFFSET_RESETS:
            self._problems.append(
                f"source {name!r}: auto_offset_reset must be one of {', '.join(OFFSET_RESETS)}, "
                f"got {auto_offset_reset!r}"
            )
        self._add(
            SourceNode(
                name,
                topics=list(topics),
                key_serde=key_serde,
                value_serde=value_serde,
                timestamp_extractor=timestamp_extractor,
                auto_offset_reset=auto_offset_reset,
            )
        )

    def add_processor(
        self,
        name: str,
        supplier: ProcessorSupplier,
        parents: list[str],
        stores: tuple[str, ...] | list[str] = (),
    ) -> None:
        self._add(ProcessorNode(name, supplier=supplier, stores=list(stores)), parents)

    def add_sink(
        self,
        name: str,
        topic: str,
        parents: list[str],
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        partitioner: StreamPartitioner | None = None,
    ) -> None:
        self._add(
            SinkNode(
                name,
                topic=topic,
                key_serde=key_serde,
                value_serde=value_serde,
                partitioner=partitioner,
            ),
            parents,
        )

    def add_store(self, spec: StoreSpec, *processor_names: str) -> None:
        if spec.name in self.stores:
            self._problems.append(
                f"state store {spec.name!r} is defined twice: give each store a unique name "
                "(Materialized.as_(...))"
            )
            return
        self.stores[spec.name] = spec
        for processor in processor_names:
            self.connect_store(processor, spec.name)

    def connect_store(self, processor_name: str, store_name: str) -> None:
        node = self.nodes.get(processor_name)
        if not isinstance(node, ProcessorNode):
            self._problems.append(
                f"cannot connect store {store_name!r} to {processor_name!r}: no such processor"
            )
            return
        if store_name not in node.stores:
            node.stores.append(store_name)

    def add_global_store(
        self,
        spec: StoreSpec,
        source_name: str,
        topic: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        processor_name: str,
        supplier: ProcessorSupplier,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
    ) -> None:
        """A store filled from every partition of ``topic``, readable by every task.

        The topic is the store's changelog (restoring means re-reading it), so the store has no
        changelog topic of its own.
        """
        self.add_source(
            source_name, [topic], key_serde, value_serde, timestamp_extractor=timestamp_extractor
        )
        self.add_processor(processor_name, supplier, [source_name])
        self.add_store(spec, processor_name)
        self.global_nodes |= {source_name, processor_name}
        self.global_stores.add(spec.name)

    def add_repartition_topic(
        self,
        name: str,
        num_partitions: int | None = None,
        follows: tuple[str, ...] = (),
    ) -> None:
        """Register ``<application_id>-<name>`` as a repartition topic.

        ``follows`` names the topics whose partition count it must take (internal ones
        unprefixed); by default it follows the inputs of the sub-topology writing it.
        """
        if name in self.internal_topics:
            self._problems.append(
                f"repartition topic {name!r} is defined twice: give the groupings or "
                "repartition() calls distinct names"
            )
            return
        self.internal_topics[name] = InternalTopic(
            name=name,
            kind=REPARTITION,
            configs={"cleanup.policy": "delete", "retention.ms": "-1"},
            num_partitions=num_partitions,
            follows=follows,
        )

    def copartition(self, *source_names: str) -> None:
        """Declare that these sources' topics must have equal partition counts (joins)."""
        self.copartition_groups.append(set(source_names))

    def _add(self, node: Node, parents: list[str] | None = None) -> None:
        if node.name in self.nodes:
            self._problems.append(
                f"two processors are named {node.name!r}: names given with Named/Materialized/"
                "Grouped must be unique within a topology"
            )
            return
        for parent in parents or []:
            parent_node = self.nodes.get(parent)
            if parent_node is None:
                self._problems.append(f"{node.name!r} names an unknown parent {parent!r}")
                continue
            if isinstance(parent_node, SinkNode):
                self._problems.append(
                    f"{node.name!r} cannot follow sink {parent!r}: sinks end a path"
                )
                continue
            node.parents.append(parent)
            parent_node.children.append(node.name)
        self.nodes[node.name] = node

    # -- build ------------------------------------------------------------------------------
    def build(self) -> Topology:
        """Validate and freeze the graph; raise :class:`TopologyError` naming every problem."""
        problems = list(self._problems)
        if not any(isinstance(n, SourceNode) for n in self.nodes.values()):
            problems.append(
                "the topology has no source: start it with builder.stream(topic) or "
                "builder.table(topic)"
            )
        for node in self.nodes.values():
            if isinstance(node, ProcessorNode):
                for store in node.stores:
                    if store not in self.stores:
                        problems.append(
                            f"processor {node.name!r} uses state store {store!r}, which was never "
                            "added: register it with builder.add_state_store(...)"
                        )
        for name, topic in self.internal_topics.items():
            readers = [
                n for n in self.nodes.values() if isinstance(n, SourceNode) and name in n.topics
            ]
            writers = [
                n for n in self.nodes.values() if isinstance(n, SinkNode) and n.topic == name
            ]
            if not readers or not writers:
                problems.append(f"internal topic {topic.name!r} lacks a reader or a writer")
        if problems:
            listing = "\n  - ".join(problems)
            raise TopologyError(f"invalid topology:\n  - {listing}")
        return Topology(
            nodes=dict(self.nodes),
            stores=dict(self.stores),
            internal_topics=dict(self.internal_topics),
            copartition_groups=[set(g) for g in self.copartition_groups],
            global_nodes=set(self.global_nodes),
            global_stores=set(self.global_stores),
            table_sources=set(self.table_sources),
        )
