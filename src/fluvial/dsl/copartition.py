"""Co-partitioning is about bytes: equal keys must be written as equal bytes on every joined topic.

Two topics are co-partitioned only if they have as many partitions (checked when the application
starts) *and* equal keys are serialized to equal bytes, which the partitioner then places alike.
This module settles the second half when the DSL builds:

- a repartition topic whose key serde is unknown (the stream was re-keyed by ``select_key``,
  ``map`` or ``group_by`` without a serde) takes the key serde of the topics it is joined with;
- topics whose key serdes are both known and differ are refused, naming both serdes and the fix;
- a repartition topic joined only with topics of raw bytes (no key serde given anywhere) is
  refused too: fluvial would have to guess how the other side's producer wrote its keys.

Kafka Streams refuses the last two at start as well (it has no default key serde); it has no
inference, so a join there needs the serde spelled out where fluvial can take it from the other
side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluvial.serdes import Serde
from fluvial.topology.builder import InternalTopologyBuilder
from fluvial.topology.nodes import SinkNode, SourceNode

DECLARED = "declared"  # a serde the user gave, or one carried from such a serde
INFERRED = "inferred"  # a repartition topic's key serde, unknown until joined
DEFAULT = "default"  # fluvial's own JSON for an unknown key, fixed when the topology is built


@dataclass(frozen=True)
class KeyFormat:
    """How the keys of one topic are written."""

    kind: str
    serde: Serde[Any] | None


def mark_key_format(
    itb: InternalTopologyBuilder, topic: str, kind: str, serde: Serde[Any] | None
) -> None:
    """Record how fluvial writes the keys of the internal topic ``topic``."""
    itb.key_formats[topic] = KeyFormat(kind, serde)


def same_bytes(a: Serde[Any], b: Serde[Any]) -> bool:
    """Whether two serdes write equal keys as equal bytes, as far as fluvial can tell.

    Built-in serdes compare by name; two different custom serdes (``Serde.of``) are taken to
    agree, since nothing says how they write.
    """
    if a is b:
        return True
    if a.name == "custom" and b.name == "custom":
        return True
    return a.name == b.name


def _groups(itb: InternalTopologyBuilder) -> list[set[str]]:
    """Co-partition groups, with groups that share a source merged into one."""
    merged: list[set[str]] = []
    for group in itb.copartition_groups:
        current = set(group)
        for other in [g for g in merged if g & current]:
            merged.remove(other)
            current |= other
        merged.append(current)
    return merged


def _describe(topic: str, fmt: KeyFormat | None, source: SourceNode) -> str:
    if fmt is None:
        serde = source.key_serde
        shown = f"key serde {serde.name}" if serde is not None else "no key serde (raw bytes)"
        return f"topic {topic!r} ({shown})"
    if fmt.kind == DEFAULT:
        return f"internal topic {topic!r} (key serde json, fluvial's default for an unknown key)"
    if fmt.serde is None:
        return f"repartition topic {topic!r} (no key serde given)"
    return f"repartition topic {topic!r} (key serde {fmt.serde.name})"


def resolve_key_serdes(itb: InternalTopologyBuilder) -> None:
    """Give inferred repartition topics their partners' key serde; record every mismatch."""
    for group in _groups(itb):
        declared: list[tuple[str, Serde[Any], str]] = []  # (topic, serde, description)
        inferred: list[str] = []
        raw: list[str] = []
        fluvial_default = False  # a member whose keys fluvial writes as JSON for want of a serde
        for source_name in sorted(group):
            source = itb.nodes[source_name]
            assert isinstance(source, SourceNode)
            for topic in source.topics:
                fmt = itb.key_formats.get(topic)
                shown = _describe(topic, fmt, source)
                if fmt is not None and fmt.kind == INFERRED:
                    inferred.append(topic)
                elif fmt is not None:
                    assert fmt.serde is not None
                    declared.append((topic, fmt.serde, shown))
                    fluvial_default |= fmt.kind == DEFAULT
                elif source.key_serde is not None:
                    declared.append((topic, source.key_serde, shown))
                else:
                    raw.append(shown)
        first = declared[0] if declared else None
        clash = next((d for d in declared[1:] if not same_bytes(first[1], d[1])), None)  # type: ignore[index]
        if first is not None and clash is not None:
            itb.problem(
                f"{first[2]} and {clash[2]} are joined, but their key serdes differ: equal keys "
                "would be written as different bytes and land on different partitions, so most "
                "matches would be missed. Give both sides the same key serde: key_serde= on "
                "builder.stream/table, on the join, or Grouped/Repartitioned.with_key_serde(...)"
            )
            continue
        if raw and (inferred or fluvial_default):
            needs = ", ".join(repr(t) for t in inferred) or "an internal topic"
            itb.problem(
                f"{raw[0]} is joined with {needs}, whose keys fluvial writes itself: it cannot "
                "know how the other side's producer wrote its keys. Give the key serde: "
                "builder.stream/table(topic, key_serde=...) for the source topic, or "
                "key_serde= on the join (Joined/StreamJoined/Grouped/Repartitioned)"
            )
            continue
        if first is not None:
            for topic in inferred:
                _set_key_serde(itb, topic, first[1])


def _set_key_serde(itb: InternalTopologyBuilder, topic: str, serde: Serde[Any]) -> None:
    """Write and read the repartition topic ``topic`` with ``serde`` for keys."""
    itb.key_formats[topic] = KeyFormat(DECLARED, serde)
    for node in itb.nodes.values():
        if (
            isinstance(node, SinkNode)
            and node.topic == topic
            or isinstance(node, SourceNode)
            and topic in node.topics
        ):
            node.key_serde = serde
