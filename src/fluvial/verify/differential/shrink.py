"""Shrinking a failing case to a minimal one: fewer input records, fewer operators.

Each round proposes a batch of smaller variants of the case, runs them all (one JVM for the Kafka
Streams side), and keeps the first that still differs. Rounds repeat until no variant does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Case = dict[str, Any]
# Given variants, says which still show a difference.
Oracle = Callable[[list[Case]], list[bool]]

# Operators that pass records of their input's shape and types on: removable by rewiring their
# readers to their input.
PASS_THROUGH = {
    "filter", "map_values", "map", "select_key", "flat_map", "flat_map_values", "peek",
    "repartition", "branch", "merge", "table_filter", "table_map_values", "suppress",
}  # fmt: skip


def _prune(case: Case) -> Case:
    """Drop nodes no sink depends on, and input records of topics nothing reads."""
    nodes = {n["id"]: n for n in case["nodes"]}
    live: set[str] = set()
    stack = [n["id"] for n in case["nodes"] if n["op"] == "to"]
    while stack:
        node_id = stack.pop()
        if node_id in live:
            continue
        live.add(node_id)
        stack.extend(nodes[node_id].get("in", []))
    kept = [n for n in case["nodes"] if n["id"] in live]
    topics = {n["topic"] for n in kept if n["op"] in ("stream", "table", "global_table")}
    return {
        **case,
        "nodes": kept,
        "inputs": [r for r in case["inputs"] if r[0] in topics],
    }


def _without_node(case: Case, node_id: str) -> Case | None:
    nodes = case["nodes"]
    node = next(n for n in nodes if n["id"] == node_id)
    if node["op"] not in PASS_THROUGH or not node.get("in"):
        return None
    source = next(n for n in nodes if n["id"] == node["in"][0])
    if (source["k"], source["v"], source["shape"]) != (node["k"], node["v"], node["shape"]):
        return None
    if node["op"] == "suppress" and source["op"] == "windowed_by":
        return None
    variant = copy.deepcopy(case)
    variant["nodes"] = [n for n in variant["nodes"] if n["id"] != node_id]
    for n in variant["nodes"]:
        n["in"] = [source["id"] if i == node_id else i for i in n.get("in", [])]
        if n["op"] == "merge" and n["in"][0] == n["in"][1]:
            return None
    return _prune(variant)


def _without_sink(case: Case, node_id: str) -> Case | None:
    if sum(1 for n in case["nodes"] if n["op"] == "to") < 2:
        return None
    variant = copy.deepcopy(case)
    variant["nodes"] = [n for n in variant["nodes"] if n["id"] != node_id]
    return _prune(variant)


def _topology_variants(case: Case) -> list[Case]:
    variants = []
    for node in case["nodes"]:
        make = _without_sink if node["op"] == "to" else _without_node
        variant = make(case, node["id"])
        if variant is not None:
            variants.append(variant)
    return variants


def _input_variants(case: Case, chunks: int) -> list[Case]:
    inputs = case["inputs"]
    size = max(1, len(inputs) // chunks)
    return [
        {**case, "inputs": inputs[:start] + inputs[start + size :]}
        for start in range(0, len(inputs), size)
    ]


def _first_failing(variants: list[Case], oracle: Oracle) -> Case | None:
    if not variants:
        return None
    for variant, fails in zip(variants, oracle(variants), strict=True):
        if fails:
            return variant
    return None


def shrink(case: Case, oracle: Oracle, *, max_rounds: int = 60) -> Case:
    """The smallest variant of ``case`` found that ``oracle`` still reports as differing."""
    current = _prune(case)
    for _ in range(max_rounds):
        smaller = _first_failing(_topology_variants(current), oracle)
        if smaller is None:
            chunks = 2
            while chunks <= 2 * max(1, len(current["inputs"])):
                smaller = _first_failing(_input_variants(current, chunks), oracle)
                if smaller is not None or len(current["inputs"]) <= 1:
                    break
                chunks *= 2
        if smaller is None:
            return current
        current = smaller
    return current
