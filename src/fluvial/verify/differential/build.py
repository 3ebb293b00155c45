"""A generated case's topology, built with fluvial's DSL.

The case lists nodes in an order where every input comes first. Each node names its operator,
its inputs, its named functions (:mod:`.functions`) and the key and value forms of its output,
from which every serde is chosen explicitly, as the Java twin
(``reference/.../differential/CaseBuilder.java``) does.
"""

from __future__ import annotations

from typing import Any

from fluvial import (
    Branched,
    BufferConfig,
    EmitStrategy,
    Grouped,
    JoinWindows,
    Materialized,
    Named,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    serdes,
)
from fluvial.serdes import Serde
from fluvial.topology import Topology
from fluvial.verify.differential import functions as f

STRING = serdes.string()
LONG = serdes.long()


def value_serde(rep: str) -> Serde[Any]:
    return STRING if rep == "s" else LONG


def key_serde(key_type: str) -> Serde[Any]:
    """``"s"`` string keys, ``"tw:<size>"`` time-windowed, ``"sw"`` session-windowed."""
    if key_type == "s":
        return STRING
    if key_type == "sw":
        return serdes.session_windowed(STRING)
    assert key_type.startswith("tw:"), key_type
    return serdes.time_windowed(STRING, int(key_type[3:]))


def windows_of(spec: dict[str, Any]) -> Any:
    kind = spec["type"]
    if kind == "tumbling":
        return TimeWindows.of_size_and_grace(spec["size"], spec["grace"])
    if kind == "hopping":
        return TimeWindows.of_size_and_grace(spec["size"], spec["grace"]).advance_by(
            spec["advance"]
        )
    if kind == "sliding":
        return SlidingWindows.of_time_difference_and_grace(spec["diff"], spec["grace"])
    if kind == "session":
        return SessionWindows.of_inactivity_gap_and_grace(spec["gap"], spec["grace"])
    raise ValueError(f"unknown windows {kind!r}")


def _materialized(node: dict[str, Any], key_type: str = "s") -> Materialized:
    m = Materialized.as_(node["store"]) if node.get("store") else Materialized()
    if node.get("retention") is not None:
        m = m.with_retention(node["retention"])
    return m.with_key_serde(key_serde(key_type)).with_value_serde(value_serde(node["v"]))


def _grouped(node: dict[str, Any]) -> Grouped:
    grouped = Grouped.as_(node["name"]) if node.get("name") else Grouped()
    return grouped.with_key_serde(STRING).with_value_serde(value_serde(node["v"]))


def _table_materialized(node: dict[str, Any]) -> Materialized | None:
    """A derived table's store: named, anonymous (serdes only), or none at all."""
    return _materialized(node) if node.get("store") or node.get("materialize") else None


def build_topology(case: dict[str, Any]) -> Topology:
    builder = StreamsBuilder()
    built: dict[str, Any] = {}
    splits: dict[str, dict[str, Any]] = {}
    nodes = {n["id"]: n for n in case["nodes"]}
    for node in case["nodes"]:
        ins = [built[i] for i in node.get("in", [])]
        built[node["id"]] = _build(builder, node, ins, nodes, splits)
    return builder.build()


def _build(  # noqa: C901, PLR0911, PLR0912 - one branch per operator reads best
    builder: StreamsBuilder,
    node: dict[str, Any],
    ins: list[Any],
    nodes: dict[str, dict[str, Any]],
    splits: dict[str, dict[str, Any]],
) -> Any:
    op, rep = node["op"], node.get("v", "s")
    if op == "stream":
        return builder.stream(node["topic"], key_serde=STRING, value_serde=STRING)
    if op == "table":
        if node.get("versioned") is not None:
            m = Materialized.as_versioned(node["store"], node["versioned"])
            m = m.with_key_serde(STRING).with_value_serde(STRING)
        else:
            m = _materialized(node)
        return builder.table(node["topic"], materialized=m, key_serde=STRING, value_serde=STRING)
    if op == "global_table":
        return builder.global_table(
            node["topic"], materialized=_materialized(node), key_serde=STRING, value_serde=STRING
        )
    # Every other operator reads at least one input: its first is ``src``.
    if not ins:
        raise ValueError(f"node {node['id']} ({op!r}) has no input")
    src, in_node = ins[0], nodes[node["in"][0]]
    if op == "filter":
        pred = f.predicate(node["fn"])
        return src.filter_not(pred) if node.get("not") else src.filter(pred)
    if op == "map_values":
        return src.map_values(f.value_mapper(node["fn"], rep))
    if op == "map":
        return src.map(f.mapper(node["fn"], rep))
    if op == "select_key":
        return src.select_key(f.key_selector(node["fn"]))
    if op == "flat_map":
        return src.flat_map(f.flat_mapper(node["fn"], rep))
    if op == "flat_map_values":
        return src.flat_map_values(f.flat_value_mapper(node["fn"], rep))
    if op == "peek":
        return src.peek(lambda k, v: None)
    if op == "merge":
        return src.merge(ins[1])
    if op == "branch":
        split_id = node["split"]
        if split_id not in splits:
            branched = src.split(Named.as_(f"{split_id}-"))
            for i, name in enumerate(node["preds"]):
                branched = branched.branch(f.predicate(name), Branched.as_(str(i)))
            splits[split_id] = branched.default_branch(Branched.as_("d"))
        index = node["index"]
        return splits[split_id][f"{split_id}-{index if index < len(node['preds']) else 'd'}"]
    if op == "repartition":
        return src.repartition(key_serde=key_serde(node["k"]), value_serde=value_serde(rep))
    if op == "to_table":
        return src.to_table(materialized=_materialized(node))
    if op == "group_by_key":
        return src.group_by_key(_grouped(node))
    if op == "group_by":
        return src.group_by(f.key_selector(node["fn"]), _grouped(node))
    if op == "windowed_by":
        windowed = src.windowed_by(windows_of(node["windows"]))
        if node.get("emit_on_close"):
            windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
        return windowed
    if op in ("count", "reduce", "aggregate"):
        return _aggregate(node, src, in_node)
    if op == "cogroup":
        grouped = [g for g in ins]
        cogrouped = grouped[0].cogroup(f.aggregator(node["fns"][0], rep))
        for g, name in zip(grouped[1:], node["fns"][1:], strict=True):
            cogrouped = cogrouped.cogroup(g, f.aggregator(name, rep))
        if node.get("windows"):
            cogrouped = cogrouped.windowed_by(windows_of(node["windows"]))
        merger = f.merger(node["merger"], rep) if node.get("merger") else None
        return cogrouped.aggregate(
            f.initializer(node["init"], rep), merger, materialized=_materialized(node)
        )
    if op == "to_stream":
        return src.to_stream()
    if op == "unwindow":
        return src.select_key(lambda k, v: f.unwindow(k))
    if op == "suppress":
        buffer = (
            BufferConfig.max_records(node["max_records"]).emit_early_when_full()
            if node.get("max_records")
            else BufferConfig.unbounded()
        )
        if node["until"] == "window_close":
            return src.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        return src.suppress(Suppressed.until_time_limit(node["limit_ms"], buffer))
    if op == "table_filter":
        pred = f.predicate(node["fn"])
        materialized = _table_materialized(node)
        if node.get("not"):
            return src.filter_not(pred, materialized=materialized)
        return src.filter(pred, materialized=materialized)
    if op == "table_map_values":
        return src.map_values(
            f.value_mapper(node["fn"], rep), materialized=_table_materialized(node)
        )
    if op == "table_group_by":
        return src.group_by(
            f.regrouper(node["fn"], rep), key_serde=STRING, value_serde=value_serde(rep)
        )
    if op == "table_count":
        return src.count(materialized=_materialized(node))
    if op == "table_reduce":
        return src.reduce(
            f.reducer(node["fn"], rep), f.reducer(node["fn2"], rep),
            materialized=_materialized(node),
        )  # fmt: skip
    if op == "table_aggregate":
        return src.aggregate(
            f.initializer(node["init"], rep), f.aggregator(node["fn"], rep),
            f.aggregator(node["fn2"], rep), materialized=_materialized(node),
        )  # fmt: skip
    if op == "ss_join":
        left, right = ins
        windows = JoinWindows.of_time_difference_and_grace(node["diff"], node["grace"])
        join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[node["kind"]]
        left_rep, right_rep = (nodes[i]["v"] for i in node["in"])
        return join(
            right, f.joiner(node["fn"], rep), windows, key_serde=STRING,
            value_serde=value_serde(left_rep), other_value_serde=value_serde(right_rep),
        )  # fmt: skip
    if op == "st_join":
        stream, table = ins
        join = stream.left_join if node["kind"] == "left" else stream.join
        return join(table, f.joiner(node["fn"], rep))
    if op == "tt_join":
        left, right = ins
        join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[node["kind"]]
        materialized = _materialized(node) if node.get("store") else None
        return join(right, f.joiner(node["fn"], rep), materialized=materialized)
    if op == "fk_join":
        left, right = ins
        join = left.left_join if node["kind"] == "left" else left.join
        return join(
            right, f.joiner(node["fn"], rep), materialized=_materialized(node),
            foreign_key_extractor=f.foreign_key(node["fk"]),
        )  # fmt: skip
    if op == "sg_join":
        stream, table = ins
        join = stream.left_join if node["kind"] == "left" else stream.join
        return join(table, f.joiner(node["fn"], rep), key_selector=f.global_key(node["key"]))
    if op == "to":
        src.to(node["topic"], key_serde=key_serde(node["k"]), value_serde=value_serde(rep))
        return None
    raise ValueError(f"unknown operator {op!r} in node {node['id']}")


def _aggregate(node: dict[str, Any], src: Any, in_node: dict[str, Any]) -> Any:
    op, rep = node["op"], node["v"]
    windows = in_node.get("windows") if in_node["op"] == "windowed_by" else None
    m = _materialized(node)
    if op == "count":
        return src.count(materialized=m)
    if op == "reduce":
        return src.reduce(f.reducer(node["fn"], rep), materialized=m)
    init, agg = f.initializer(node["init"], rep), f.aggregator(node["fn"], rep)
    if windows is not None and windows["type"] == "session":
        return src.aggregate(init, agg, f.merger(node["merger"], rep), materialized=m)
    return src.aggregate(init, agg, materialized=m)
