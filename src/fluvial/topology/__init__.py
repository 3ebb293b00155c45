"""Topologies: the processor graph the DSL builds and the runtime runs, task by task."""

from fluvial.topology.builder import InternalTopologyBuilder
from fluvial.topology.describe import TopologyDescription
from fluvial.topology.nodes import ProcessorNode, SinkNode, SourceNode, StoreSpec
from fluvial.topology.topology import InternalTopic, Subtopology, Topology

__all__ = [
    "InternalTopic",
    "InternalTopologyBuilder",
    "ProcessorNode",
    "SinkNode",
    "SourceNode",
    "StoreSpec",
    "Subtopology",
    "Topology",
    "TopologyDescription",
]
