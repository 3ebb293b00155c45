"""The stateful layout of a topology: what holds state, and how to know it again under a new name.

A deployment's committed state lives in two kinds of internal topics: each logged store's
changelog, and each repartition topic's records not consumed yet. Both are named after the
store or operator, and a name the DSL generates carries the operator's position in the topology
(``KSTREAM-AGGREGATE-STATE-STORE-0000000004``): an operator added in front of it shifts the
number, and the next deployment would open new, empty topics. :func:`layout_of` describes each
such resource with a *signature* that leaves names out: its kind and serdes, and the landmarks
that feed it (user topics, stateful operators by their stores' kinds, repartition hops), with
stateless operators looked through. Two deployments' resources with equal signatures hold the
same kind of state fed the same way, so a moved generated name can be recognised
(:mod:`fluvial.runtime.deployments`), and two alike resources are told apart by nothing, so a
match between them is refused, never guessed.

Pure: no Kafka here.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from fluvial.topology.nodes import ProcessorNode, SinkNode, SourceNode, StoreSpec
from fluvial.topology.topology import Topology

STORE = "store"
REPARTITION = "repartition"

#: A name the DSL generated: an operator prefix and the 10-digit position counter.
_GENERATED = re.compile(r"^((?:KSTREAM|KTABLE)-[A-Z-]+?)-?\d{10}")


def generated_prefix(name: str) -> str | None:
    """``KSTREAM-AGGREGATE-STATE-STORE`` of ``KSTREAM-AGGREGATE-STATE-STORE-0000000004[...]``;
    ``None`` for a name the user gave."""
    match = _GENERATED.match(name)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Resource:
    """One place where a deployment keeps state in Kafka.

    ``name`` is the store's name, or the repartition topic's name without the application id;
    ``topic`` is the internal topic that holds it, without the application id (the changelog
    ``<store>-changelog``, or the repartition topic itself), which differs from the default when
    ``fluvial upgrade`` carried an older deployment's topic over.
    """

    kind: str  # STORE or REPARTITION
    name: str
    topic: str
    signature: str
    detail: str  # for people: what it is, in a few words

    @property
    def generated(self) -> bool:
        return generated_prefix(self.name) is not None

    @property
    def operator(self) -> str:
        """The generated name's operator prefix, or "" for a name the user gave."""
        return generated_prefix(self.name) or ""

    def describe(self) -> str:
        what = "store" if self.kind == STORE else "repartition topic"
        return f"{what} {self.name} ({self.detail})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resource:
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            topic=str(data["topic"]),
            signature=str(data["signature"]),
            detail=str(data.get("detail", "")),
        )


def default_topic(kind: str, name: str) -> str:
    return f"{name}-changelog" if kind == STORE else name


def naming_hint(resource: Resource) -> str:
    """The DSL option that names the operator behind ``resource``."""
    if resource.kind == REPARTITION:
        return "Grouped.as_(...) on the grouping (Repartitioned.as_ or Named on repartition())"
    if "JOIN" in resource.operator:
        return "StreamJoined.as_(...) on the join"
    return "Materialized.as_(...) on the operator"


def layout_of(topology: Topology) -> list[Resource]:
    """Every logged store and every repartition topic of ``topology``, with its signature.

    Global stores are left out: their topic is a user topic, read again from the start.
    """
    walker = _Landmarks(topology)
    resources: list[Resource] = []
    for name in sorted(topology.stores):
        spec = topology.stores[name]
        if not spec.logging_enabled or name in topology.global_stores:
            continue
        users = sorted(
            n.name
            for n in topology.nodes.values()
            if isinstance(n, ProcessorNode) and name in n.stores
        )
        upstream = sorted({m for user in users for m in walker.above(user)})
        signature = {
            "kind": spec.kind,
            "key": repr(spec.key_serde),
            "value": repr(spec.value_serde),
            "window_size_ms": spec.window_size_ms,
            "retain_duplicates": spec.retain_duplicates,
            "upstream": upstream,
        }
        topic = spec.changelog_name or default_topic(STORE, name)
        detail = f"{spec.kind.replace('_', '-')} store, key {_serde(spec.key_serde)}, value " + (
            f"{_serde(spec.value_serde)}"
            + (f", windows of {spec.window_size_ms} ms" if spec.window_size_ms else "")
        )
        resources.append(Resource(STORE, name, topic, _canonical(signature), detail))
    for topic_name, physical in sorted(topology.repartition_topics().items()):
        sinks = sorted(
            (n for n in topology.nodes.values() if isinstance(n, SinkNode) and n.topic == physical),
            key=lambda n: n.name,
        )
        readers = sorted(
            n.name
            for n in topology.nodes.values()
            if isinstance(n, SourceNode) and physical in n.topics
        )
        upstream = sorted({m for sink in sinks for m in walker.above(sink.name)})
        downstream = sorted({m for reader in readers for m in walker.below(reader)})
        key = repr(sinks[0].key_serde) if sinks else "None"
        value = repr(sinks[0].value_serde) if sinks else "None"
        signature = {"key": key, "value": value, "upstream": upstream, "downstream": downstream}
        detail = f"key {_serde(sinks[0].key_serde if sinks else None)}, value " + _serde(
            sinks[0].value_serde if sinks else None
        )
        resources.append(Resource(REPARTITION, topic_name, physical, _canonical(signature), detail))
    return resources


def _serde(serde: Any) -> str:
    text = repr(serde)
    return text[len("Serde(") : -1] if text.startswith("Serde(") and text.endswith(")") else text


def _canonical(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


class _Landmarks:
    """Names-free descriptions of what feeds a node, and of what a node feeds."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.internal = set(topology.internal_topic_names())
        self._writers: dict[str, list[str]] = {}
        self._readers: dict[str, list[str]] = {}
        for node in topology.nodes.values():
            if isinstance(node, SinkNode):
                self._writers.setdefault(node.topic, []).append(node.name)
            elif isinstance(node, SourceNode):
                for topic in node.topics:
                    self._readers.setdefault(topic, []).append(node.name)
        self._above: dict[str, frozenset[str]] = {}

    def _stores_of(self, node: ProcessorNode) -> list[StoreSpec]:
        return [self.topology.stores[s] for s in node.stores if s in self.topology.stores]

    def above(self, name: str, visiting: frozenset[str] = frozenset()) -> frozenset[str]:
        """Landmarks feeding ``name`` (not ``name`` itself), looking through stateless nodes."""
        cached = self._above.get(name)
        if cached is not None:
            return cached
        visiting = visiting | {name}
        found: set[str] = set()
        node = self.topology.nodes[name]
        if isinstance(node, SourceNode):
            for topic in node.topics:
                if topic in self.internal:
                    feeding: set[str] = set()
                    for writer in self._writers.get(topic, []):
                        if writer not in visiting:
                            feeding |= self.above(writer, visiting)
                    found.add("via(" + ",".join(sorted(feeding)) + ")")
                else:
                    found.add(f"topic:{topic}")
        for parent in node.parents:
            if parent in visiting:
                continue
            parent_node = self.topology.nodes[parent]
            stores = self._stores_of(parent_node) if isinstance(parent_node, ProcessorNode) else []
            if stores:
                kinds = ",".join(sorted(s.kind for s in stores))
                inner = ",".join(sorted(self.above(parent, visiting)))
                found.add(f"state[{kinds}]({inner})")
            else:
                found |= self.above(parent, visiting)
        result = frozenset(found)
        if len(visiting) == 1:  # only a walk that cut no cycle is the node's own answer
            self._above[name] = result
        return result

    def below(self, name: str) -> frozenset[str]:
        """Kinds of the first stateful operators ``name`` feeds, within its sub-topology."""
        found: set[str] = set()
        seen: set[str] = set()
        stack = list(self.topology.nodes[name].children)
        while stack:
            child = stack.pop()
            if child in seen:
                continue
            seen.add(child)
            node = self.topology.nodes[child]
            stores = self._stores_of(node) if isinstance(node, ProcessorNode) else []
            if stores:
                found.add("state[" + ",".join(sorted(s.kind for s in stores)) + "]")
            else:
                stack.extend(node.children)
        return frozenset(found)
