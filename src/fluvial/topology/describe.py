"""A readable picture of a topology, in the layout of Kafka Streams' ``TopologyDescription``.

The text form is for people; :meth:`TopologyDescription.to_dict` is for tools (``fluvial
describe --format`` and tests), so nobody has to parse the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fluvial.topology.nodes import ProcessorNode, SinkNode, SourceNode

if TYPE_CHECKING:
    from fluvial.topology.topology import Topology


@dataclass(frozen=True)
class NodeDescription:
    kind: str  # "source" | "processor" | "sink"
    name: str
    topics: tuple[str, ...]
    stores: tuple[str, ...]
    predecessors: tuple[str, ...]
    successors: tuple[str, ...]


@dataclass(frozen=True)
class SubtopologyDescription:
    id: int
    nodes: tuple[NodeDescription, ...]
    is_global: bool = False


def _describe(topology: Topology, name: str, show: Any) -> NodeDescription:
    node = topology.nodes[name]
    topics: tuple[str, ...]
    stores: tuple[str, ...]
    if isinstance(node, SourceNode):
        kind, topics, stores = "source", tuple(show(t) for t in node.topics), ()
    elif isinstance(node, SinkNode):
        kind, topics, stores = "sink", (show(node.topic),), ()
    else:
        assert isinstance(node, ProcessorNode)
        kind, topics, stores = "processor", (), tuple(node.stores)
    return NodeDescription(kind, name, topics, stores, tuple(node.parents), tuple(node.children))


@dataclass(frozen=True)
class TopologyDescription:
    subtopologies: tuple[SubtopologyDescription, ...]

    @classmethod
    def of(cls, topology: Topology, application_id: str | None) -> TopologyDescription:
        subs = []
        for sub_id in range(topology.subtopology_count):
            sub = topology.subtopology(sub_id, application_id or "")

            def show(topic: str, sub: Any = sub) -> str:
                return sub.resolve(topic) if application_id else topic

            nodes = [_describe(topology, name, show) for name in sub.node_names]
            subs.append(SubtopologyDescription(sub_id, tuple(nodes)))
        global_sub = topology.global_subtopology(application_id or "")
        if global_sub is not None:
            # Kafka Streams numbers the global stores' sub-topology after the others.
            nodes = [_describe(topology, name, lambda t: t) for name in global_sub.node_names]
            subs.append(SubtopologyDescription(len(subs), tuple(nodes), is_global=True))
        return cls(tuple(subs))

    def to_dict(self) -> dict[str, Any]:
        return {
            "subtopologies": [
                {
                    "id": s.id,
                    "global": s.is_global,
                    "nodes": [
                        {
                            "kind": n.kind,
                            "name": n.name,
                            "topics": list(n.topics),
                            "stores": list(n.stores),
                            "predecessors": list(n.predecessors),
                            "successors": list(n.successors),
                        }
                        for n in s.nodes
                    ],
                }
                for s in self.subtopologies
            ]
        }

    def __str__(self) -> str:
        lines = ["Topologies:"]
        for sub in self.subtopologies:
            suffix = " for global store (will not generate tasks)" if sub.is_global else ""
            lines.append(f"   Sub-topology: {sub.id}{suffix}")
            for n in sub.nodes:
                if n.kind == "source":
                    lines.append(f"    Source: {n.name} (topics: [{', '.join(n.topics)}])")
                elif n.kind == "sink":
                    lines.append(f"    Sink: {n.name} (topic: {n.topics[0]})")
                else:
                    lines.append(f"    Processor: {n.name} (stores: [{', '.join(n.stores)}])")
                if n.kind != "sink":
                    lines.append(f"      --> {', '.join(n.successors) or 'none'}")
                if n.kind != "source":
                    lines.append(f"      <-- {', '.join(n.predecessors) or 'none'}")
            lines.append("")
        return "\n".join(lines)

    __repr__ = __str__
