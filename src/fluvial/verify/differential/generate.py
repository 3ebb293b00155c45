"""Seeded generation of differential cases: a topology drawn from a grammar over the DSL, and the
input records it runs on.

``generate_case(seed, index)`` always returns the same case. Each case is built around one
*feature* (a stateful operator family), surrounded by random stateless chains, key changes with
the repartitions they imply, branches and merges; every dangling stream or table ends in a sink.
Inputs mix in-order records with disorder within and beyond grace, duplicates, tombstones, null
keys and null values.

A case is plain JSON (see :mod:`.build` for the node vocabulary):

``{"id", "feature", "store_type", "nodes": [{"id", "op", "in", "k", "v", ...}],
"inputs": [[topic, key, value, timestamp], ...]}``
"""

from __future__ import annotations

import random
from typing import Any

from fluvial.verify.differential import functions as f

FEATURES = (
    "stateless",
    "aggregate",
    "windowed",
    "suppress",
    "table",
    "stream_stream_join",
    "stream_table_join",
    "table_table_join",
    "foreign_key_join",
    "global_join",
    "cogroup",
)
BASE_MS = 1_000_000
# Parts of the grammar where differences with Kafka Streams are still open (docs/semantics.md,
# "Differences still open"). ``generate_case(..., settled=True)`` leaves them out, so that a
# run over the rest must show no difference at all; remove an area here once it is fixed.
OPEN_AREAS: frozenset[str] = frozenset()
WINDOW_SIZES = (100, 200, 500)
# Longer than the time any case's input spans (at most 60 records, 80 ms apart).
EMIT_ON_CLOSE_RETENTION_MARGIN = 10_000


class _Graph:
    """The case's nodes as they are drawn, and which of them still lack a consumer."""

    def __init__(self, rng: random.Random, excluded: frozenset[str] = frozenset()) -> None:
        self.rng = rng
        self.excluded = excluded
        self.nodes: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.consumed: set[str] = set()
        self.topics: dict[str, str] = {}  # input topic -> how it is read

    def add(
        self, op: str, ins: list[str], shape: str, k: str = "s", v: str = "s", **fields: Any
    ) -> str:
        node_id = f"n{len(self.nodes)}"
        node = {"id": node_id, "op": op, "in": ins, "shape": shape, "k": k, "v": v, **fields}
        self.nodes.append(node)
        self.by_id[node_id] = node
        self.consumed.update(ins)
        return node_id

    def node(self, node_id: str) -> dict[str, Any]:
        return self.by_id[node_id]

    def source(self, op: str, **fields: Any) -> str:
        topic = f"in{len(self.topics)}"
        self.topics[topic] = op
        shape = {"stream": "stream", "table": "table", "global_table": "global"}[op]
        return self.add(op, [], shape, topic=topic, **fields)

    def store(self, probability: float = 0.7) -> str | None:
        return f"store{len(self.nodes)}" if self.rng.random() < probability else None


def _pick(rng: random.Random, table: dict[str, Any]) -> str:
    return rng.choice(sorted(table))


def _stateless(g: _Graph, s: str, steps: int) -> str:
    """Up to ``steps`` stateless operators after stream ``s``."""
    rng = g.rng
    for _ in range(steps):
        v = g.node(s)["v"]
        roll = rng.random()
        if roll < 0.18:
            s = g.add(
                "filter",
                [s],
                "stream",
                v=v,
                fn=_pick(rng, f.PREDICATES),
                **_negated(rng),
            )
        elif roll < 0.34:
            out = v if rng.random() < 0.8 else rng.choice("sl")
            s = g.add("map_values", [s], "stream", v=out, fn=_pick(rng, f.VALUE_MAPPERS))
        elif roll < 0.44:
            s = g.add("map", [s], "stream", v=v, fn=_pick(rng, f.MAPPERS))
        elif roll < 0.54:
            s = g.add("select_key", [s], "stream", v=v, fn=_pick(rng, f.KEY_SELECTORS))
        elif roll < 0.61:
            s = g.add("flat_map", [s], "stream", v=v, fn=_pick(rng, f.FLAT_MAPPERS))
        elif roll < 0.68:
            s = g.add("flat_map_values", [s], "stream", v=v, fn=_pick(rng, f.FLAT_VALUE_MAPPERS))
        elif roll < 0.73:
            s = g.add("peek", [s], "stream", v=v)
        elif roll < 0.80:
            s = g.add("repartition", [s], "stream", v=v)
        elif roll < 0.92:
            s = _split_merge(g, s)
        else:
            pass  # no operator this step: chains have varied lengths
    return s


def _negated(rng: random.Random) -> dict[str, Any]:
    """A filter's ``not`` field (a Python keyword, so passed as a dict): ``filter_not`` about
    a third of the time."""
    return {"not": rng.random() < 0.3}


def _split_merge(g: _Graph, s: str) -> str:
    """``split`` into branches; one branch continues, another is merged back or left to a sink."""
    rng = g.rng
    v = g.node(s)["v"]
    split = f"split{len(g.nodes)}"
    preds = rng.sample(sorted(f.PREDICATES), rng.randint(1, 2))
    branches = [
        g.add("branch", [s], "stream", v=v, split=split, preds=preds, index=i)
        for i in range(len(preds) + 1)
    ]
    first = _stateless(g, branches[0], 1)
    if rng.random() < 0.6:
        return g.add("merge", [first, branches[1]], "stream", v=v)
    return first


def _to_plain_key(g: _Graph, s: str) -> str:
    """A windowed stream's keys as strings again (``unwindow``), or the stream unchanged."""
    if g.node(s)["k"] == "s":
        return s
    return g.add("unwindow", [s], "stream", v=g.node(s)["v"])


def _group(g: _Graph, s: str, named: bool = False) -> str:
    """``group_by`` or ``group_by_key``; ``named`` names the grouping (and so its repartition
    topic): a cogroup of several repartitioned streams needs that in Kafka Streams, which would
    otherwise give both repartition topics the store's name and reject the topology."""
    rng = g.rng
    v = g.node(s)["v"]
    name = {"name": f"group{len(g.nodes)}"} if named else {}
    if rng.random() < 0.35:
        return g.add("group_by", [s], "grouped", v=v, fn=_pick(rng, f.KEY_SELECTORS), **name)
    return g.add("group_by_key", [s], "grouped", v=v, **name)


def _windows(g: _Graph) -> dict[str, Any]:
    rng = g.rng
    kinds = [k for k in ("tumbling", "hopping", "sliding", "session") if k not in g.excluded]
    kind = rng.choice(kinds)
    grace = rng.choice((0, 50, 200))
    if kind == "tumbling":
        return {"type": kind, "size": rng.choice(WINDOW_SIZES), "grace": grace}
    if kind == "hopping":
        size = rng.choice(WINDOW_SIZES)
        return {"type": kind, "size": size, "advance": size // rng.choice((2, 4)), "grace": grace}
    if kind == "sliding":
        return {"type": kind, "diff": rng.choice((50, 100, 300)), "grace": grace}
    return {"type": kind, "gap": rng.choice((50, 100, 300)), "grace": grace}


def _window_key(windows: dict[str, Any]) -> str:
    if windows["type"] == "session":
        return "sw"
    size = windows["diff"] if windows["type"] == "sliding" else windows["size"]
    return f"tw:{size}"


def _aggregate(g: _Graph, grouped: str, windows: dict[str, Any] | None) -> str:
    """count, reduce or aggregate of a grouped (maybe windowed) stream: a table."""
    rng = g.rng
    v_in = g.node(grouped)["v"]
    k = "s" if windows is None else _window_key(windows)
    store_kind = (
        "kv" if windows is None else ("session" if windows["type"] == "session" else "window")
    )
    store = g.store()
    extra: dict[str, Any] = {"store": store, "store_kind": store_kind}
    op = rng.choice(("count", "reduce", "aggregate"))
    if op == "count":
        return g.add("count", [grouped], "table", k=k, v="l", **extra)
    if op == "reduce":
        fn = rng.choice(("sum", "max"))
        return g.add("reduce", [grouped], "table", k=k, v=v_in, fn=fn, **extra)
    fields = {"init": _pick(rng, f.INITIALIZERS), "fn": rng.choice(("agg_sum", "agg_mix"))}
    if windows is not None and windows["type"] == "session":
        fields["merger"] = "merge_sum"
    return g.add("aggregate", [grouped], "table", k=k, v=rng.choice("sl"), **fields, **extra)


def _windowed_table(g: _Graph, s: str) -> tuple[str, dict[str, Any]]:
    rng = g.rng
    windows = _windows(g)
    grouped = _group(g, s)
    on_close = windows["type"] != "session" and rng.random() < 0.3
    on_close = on_close and "emit_on_close" not in g.excluded
    windowed = g.add(
        "windowed_by", [grouped], "windowed", v=g.node(grouped)["v"], windows=windows,
        emit_on_close=on_close,
    )  # fmt: skip
    table = _aggregate(g, windowed, windows)
    if on_close:
        # Kafka Streams emits closed windows after the record's own writes, which may already
        # have expired them from its store: their final results are lost. fluvial emits every
        # window once (docs/semantics.md, "Emit on window close: no final result is lost").
        # A retention longer than any case's time span keeps both sides clear of that edge.
        g.node(table)["retention"] = _retention_floor(windows) + EMIT_ON_CLOSE_RETENTION_MARGIN
    return table, windows


def _retention_floor(windows: dict[str, Any]) -> int:
    """The shortest retention the window store accepts: Kafka Streams' default."""
    if windows["type"] == "sliding":
        return 2 * windows["diff"] + windows["grace"]
    return windows["size"] + windows["grace"]


def _table_ops(g: _Graph, t: str, steps: int) -> str:
    rng = g.rng
    for _ in range(steps):
        v = g.node(t)["v"]
        roll = rng.random()
        if roll < 0.4 and "table_filter" not in g.excluded:
            t = g.add(
                "table_filter", [t], "table", v=v, fn=_pick(rng, f.PREDICATES),
                store=g.store(0.3), store_kind="kv", **_negated(rng),
            )  # fmt: skip
        elif roll < 0.8:
            t = g.add(
                "table_map_values", [t], "table", v=rng.choice("sl"),
                fn=_pick(rng, f.VALUE_MAPPERS), store=g.store(0.3), store_kind="kv",
            )  # fmt: skip
    return t


def _table_regroup(g: _Graph, t: str) -> str:
    rng = g.rng
    v = g.node(t)["v"]
    grouped = g.add("table_group_by", [t], "grouped_table", v=v, fn=_pick(rng, f.REGROUPERS))
    store: dict[str, Any] = {"store": g.store(), "store_kind": "kv"}
    op = rng.choice(("table_count", "table_reduce", "table_aggregate"))
    if op == "table_count":
        return g.add(op, [grouped], "table", v="l", **store)
    if op == "table_reduce":
        return g.add(op, [grouped], "table", v=v, fn="sum", fn2="sub", **store)
    fn, fn2 = rng.choice((("agg_sum", "agg_sub"), ("agg_mix", "agg_unmix")))
    return g.add(
        op, [grouped], "table", v=rng.choice("sl"), init=_pick(rng, f.INITIALIZERS),
        fn=fn, fn2=fn2, **store,
    )  # fmt: skip


def _source_table(g: _Graph, versioned: bool = False) -> str:
    if versioned:
        return g.source(
            "table", store=f"store{len(g.nodes)}", store_kind="versioned",
            versioned=g.rng.choice((100, 500, 5000)),
        )  # fmt: skip
    return g.source("table", store=g.store(0.5), store_kind="kv")


def _some_table(g: _Graph) -> str:
    """A table from a topic, from a stream (``to_table``), or derived by table operators."""
    rng = g.rng
    roll = rng.random()
    if roll < 0.6:
        return _table_ops(g, _source_table(g), rng.randint(0, 1))
    s = _stateless(g, g.source("stream"), rng.randint(0, 2))
    return g.add("to_table", [s], "table", v=g.node(s)["v"], store=g.store(0.5), store_kind="kv")


def _materialize(g: _Graph, t: str) -> str:
    node = g.node(t)
    if node["op"] in ("table_filter", "table_map_values") and not node.get("store"):
        node["materialize"] = True
    return t


def _feature(g: _Graph, feature: str) -> None:  # noqa: C901, PLR0912 - one recipe per feature
    rng = g.rng
    if feature == "stateless":
        _stateless(g, g.source("stream"), rng.randint(2, 6))
    elif feature == "aggregate":
        s = _stateless(g, g.source("stream"), rng.randint(0, 3))
        t = _aggregate(g, _group(g, s), None)
        t = _table_ops(g, t, rng.randint(0, 1))
        _stateless(g, g.add("to_stream", [t], "stream", v=g.node(t)["v"]), rng.randint(0, 2))
    elif feature in ("windowed", "suppress"):
        s = _stateless(g, g.source("stream"), rng.randint(0, 3))
        if feature == "suppress" and rng.random() < 0.3 and "suppress_time_limit" not in g.excluded:
            t = _aggregate(g, _group(g, s), None)
            limit = rng.choice((0, 50, 200))
            max_records = rng.choice((None, None, 1, 3))
            t = g.add("suppress", [t], "table", v=g.node(t)["v"], until="time_limit",
                      limit_ms=limit, max_records=max_records)  # fmt: skip
        else:
            t, windows = _windowed_table(g, s)
            if feature == "suppress":
                k, v = g.node(t)["k"], g.node(t)["v"]
                if rng.random() < 0.7 or "suppress_time_limit" in g.excluded:
                    t = g.add("suppress", [t], "table", k=k, v=v, until="window_close")
                else:
                    t = g.add("suppress", [t], "table", k=k, v=v, until="time_limit",
                              limit_ms=rng.choice((0, 50, 200)),
                              max_records=rng.choice((None, 2)))  # fmt: skip
        out = g.add("to_stream", [t], "stream", k=g.node(t)["k"], v=g.node(t)["v"])
        if rng.random() < 0.4:
            _stateless(g, _to_plain_key(g, out), rng.randint(0, 2))
    elif feature == "table":
        t = _table_ops(g, _source_table(g), rng.randint(0, 3))
        if rng.random() < 0.75:
            t = _table_regroup(g, t)
        g.add("to_stream", [t], "stream", v=g.node(t)["v"])
    elif feature == "stream_stream_join":
        left = _stateless(g, g.source("stream"), rng.randint(0, 2))
        right = _stateless(g, g.source("stream"), rng.randint(0, 2))
        kinds = ("inner", "left") if "ss_outer_join" in g.excluded else ("inner", "left", "outer")
        kind = rng.choice(kinds)
        joined = g.add(
            "ss_join", [left, right], "stream", v=rng.choice("sl"), kind=kind, fn="jn",
            diff=rng.choice((50, 100, 300)), grace=rng.choice((0, 50, 100)),
        )  # fmt: skip
        _stateless(g, joined, rng.randint(0, 2))
    elif feature == "stream_table_join":
        s = _stateless(g, g.source("stream"), rng.randint(0, 2))
        versioned = rng.random() < 0.3
        t = _source_table(g, versioned=True) if versioned else _some_table(g)
        kind = rng.choice(("inner", "left"))
        joined = g.add("st_join", [s, t], "stream", v=rng.choice("sl"), kind=kind, fn="jn")
        _stateless(g, joined, rng.randint(0, 2))
    elif feature == "table_table_join":
        left, right = _some_table(g), _some_table(g)
        kind = rng.choice(("inner", "left", "outer"))
        t = g.add("tt_join", [left, right], "table", v=rng.choice("sl"), kind=kind, fn="jn",
                  store=g.store(0.4), store_kind="kv")  # fmt: skip
        t = _table_ops(g, t, rng.randint(0, 1))
        g.add("to_stream", [t], "stream", v=g.node(t)["v"])
    elif feature == "foreign_key_join":
        # Materialized with serdes: Kafka Streams needs both tables' serdes for the join's topics.
        left, right = _materialize(g, _some_table(g)), _materialize(g, _some_table(g))
        kind = "inner" if "fk_left_join" in g.excluded else rng.choice(("inner", "left"))
        t = g.add("fk_join", [left, right], "table", v=rng.choice("sl"), kind=kind, fn="jn",
                  fk="fk_v", store=g.store(0.4), store_kind="kv")  # fmt: skip
        g.add("to_stream", [t], "stream", v=g.node(t)["v"])
    elif feature == "global_join":
        s = _stateless(g, g.source("stream"), rng.randint(0, 2))
        # Named: Kafka Streams needs a store name for a global table materialized with serdes.
        table = g.source("global_table", store=f"store{len(g.nodes)}", store_kind="kv")
        kind = rng.choice(("inner", "left"))
        joined = g.add("sg_join", [s, table], "stream", v=rng.choice("sl"), kind=kind, fn="jn",
                       key=_pick(rng, f.GLOBAL_KEYS))  # fmt: skip
        _stateless(g, joined, rng.randint(0, 2))
    elif feature == "cogroup":
        groups = []
        for _ in range(rng.randint(2, 3) if rng.random() < 0.3 else 2):
            s = _stateless(g, g.source("stream"), rng.randint(0, 2))
            groups.append(_group(g, s, named=True))
        cogroup_windows = _windows(g) if rng.random() < 0.5 else None
        fields: dict[str, Any] = {
            "fns": [rng.choice(("agg_sum", "agg_mix")) for _ in groups],
            "init": _pick(rng, f.INITIALIZERS),
            "windows": cogroup_windows,
        }
        store_kind = "kv"
        k = "s"
        if cogroup_windows is not None:
            k = _window_key(cogroup_windows)
            store_kind = "session" if cogroup_windows["type"] == "session" else "window"
            if cogroup_windows["type"] == "session":
                fields["merger"] = "merge_sum"
        t = g.add("cogroup", groups, "table", k=k, v=rng.choice("sl"), store=g.store(),
                  store_kind=store_kind, **fields)  # fmt: skip
        g.add("to_stream", [t], "stream", k=k, v=g.node(t)["v"])
    else:
        raise ValueError(f"unknown feature {feature!r}; features: {', '.join(FEATURES)}")


def _sinks(g: _Graph) -> None:
    """Every stream or table nobody reads goes to an output topic."""
    for node in list(g.nodes):
        if node["id"] in g.consumed or node["shape"] not in ("stream", "table"):
            continue
        s = node["id"]
        if node["shape"] == "table":
            s = g.add("to_stream", [s], "stream", k=node["k"], v=node["v"])
        topic = f"out{sum(1 for n in g.nodes if n['op'] == 'to')}"
        g.add("to", [s], "sink", k=node["k"], v=node["v"], topic=topic)


def _inputs(rng: random.Random, topics: dict[str, str], base_ms: int) -> list[list[Any]]:
    """Records for every input topic, interleaved; disorder, duplicates, tombstones and nulls."""
    count = rng.randint(10, 60)
    keys = [f"k{i}" for i in range(rng.choice((3, 5, 8)))]
    clock = base_ms
    records: list[list[Any]] = []
    names = sorted(topics)
    for _ in range(count):
        if records and rng.random() < 0.06:
            records.append(list(rng.choice(records)))  # an exact duplicate
            continue
        clock += rng.choice((0, 0, 5, 10, 20, 40, 80))
        roll = rng.random()
        if roll < 0.15:
            timestamp = clock - rng.randint(1, 150)  # late, mostly within grace
        elif roll < 0.2:
            timestamp = clock - rng.randint(150, 1500)  # late, mostly beyond grace
        else:
            timestamp = clock
        key = None if rng.random() < 0.04 else rng.choice(keys)
        value = None if rng.random() < 0.08 else str(rng.randint(0, 999))
        records.append([rng.choice(names), key, value, max(timestamp, 0)])
    return records


def generate_case(seed: int, index: int, *, feature: str | None = None,
                  base_ms: int = BASE_MS, settled: bool = False) -> dict[str, Any]:  # fmt: skip
    """Case ``index`` of ``seed``: the same arguments always give the same case.

    ``settled`` leaves out the :data:`OPEN_AREAS` of the grammar.
    """
    rng = random.Random(f"fluvial-differential:{seed}:{index}")
    feature = feature or FEATURES[index % len(FEATURES)]
    g = _Graph(rng, OPEN_AREAS if settled else frozenset())
    _feature(g, feature)
    _sinks(g)
    store_type = rng.choice(("rocksdb", "in_memory"))
    if any(node["op"] == "ss_join" for node in g.nodes):
        # Kafka Streams' in-memory join stores let a null value move their retention, its
        # RocksDB ones do not; fluvial follows RocksDB, its default (docs/semantics.md).
        store_type = "rocksdb"
    return {
        "id": f"{seed}-{index}",
        "feature": feature,
        "store_type": store_type,
        "nodes": g.nodes,
        "inputs": _inputs(rng, g.topics, base_ms),
    }


def feature_tags(case: dict[str, Any]) -> list[str]:
    """What a case exercises, for the per-feature table: its operators, join kinds, windows."""
    tags = {f"feature:{case['feature']}"}
    for node in case["nodes"]:
        op = node["op"]
        if op in ("stream", "table", "global_table", "to", "branch", "in"):
            if op == "table" and node.get("versioned") is not None:
                tags.add("versioned_table")
            continue
        if op in ("ss_join", "st_join", "tt_join", "fk_join", "sg_join"):
            tags.add(f"{op}:{node['kind']}")
        elif op == "windowed_by":
            tags.add(f"windows:{node['windows']['type']}")
            if node.get("emit_on_close"):
                tags.add("emit_on_window_close")
        elif op == "suppress":
            tags.add(f"suppress:{node['until']}")
        elif op == "cogroup" and node.get("windows"):
            tags.add(f"cogroup:{node['windows']['type']}")
        elif op == "filter" and node.get("not"):
            tags.add("filter_not")
        else:
            tags.add(op)
    if any(r[2] is None for r in case["inputs"]):
        tags.add("input:tombstones")
    if any(r[1] is None for r in case["inputs"]):
        tags.add("input:null_keys")
    return sorted(tags)


# -- cases for real Kafka with several partitions ------------------------------------------------
#
# On a real cluster with several partitions, the order in which a task sees records of one key
# can depend on timing: records re-keyed by different upstream tasks meet in a repartition topic
# in whatever order those tasks wrote them. Partitioned cases are drawn so that what is compared
# does not depend on that order (see :mod:`.cluster`):
#
# - aggregates are commutative (count, sum, max), so a key's (and window's) final result is
#   fixed by the set of records, whatever their order;
# - grace periods outlast every case's input, so no record is late and none is dropped;
# - tables and global tables are written and consumed before any stream record, so a stream
#   record's join result does not depend on when it is processed;
# - a stream's records are each fixed by their input (stateless operators, joins), compared as
#   a multiset per key; a table's output is compared as its final value per key.

PARTITIONED_FEATURES = (
    "aggregate",
    "windowed",
    "session",
    "stream_table_join",
    "stream_stream_join",
    "table_table_join",
    "foreign_key_join",
    "table_aggregate",
    "cogroup",
    "global_join",
    "stateless",
)
# Longer than any partitioned case's input takes to write and process: nothing is ever late.
PARTITIONED_GRACE_MS = 300_000
# Longer than any partitioned case's stream input spans (at most 50 records 80 ms apart).
PARTITIONED_OUTER_JOIN_MS = 10_000
# Input modes: everything at once (a backlog) or spread over a few seconds (live traffic).
INPUT_MODES = ("backlog", "paced")


def _rekey(g: _Graph, s: str) -> str:
    """A key change in front of a join or an aggregate: ``select_key``, ``map``, or none (the
    caller's ``group_by`` being the third kind)."""
    rng = g.rng
    v = g.node(s)["v"]
    roll = rng.random()
    if roll < 0.4:
        return g.add("select_key", [s], "stream", v=v, fn=_pick(rng, f.KEY_SELECTORS))
    if roll < 0.7:
        return g.add("map", [s], "stream", v=v, fn="rekey_inc")
    return s


def _commutative_aggregate(g: _Graph, grouped: str, windows: dict[str, Any] | None) -> str:
    rng = g.rng
    v_in = g.node(grouped)["v"]
    k = "s" if windows is None else _window_key(windows)
    store_kind = (
        "kv" if windows is None else ("session" if windows["type"] == "session" else "window")
    )
    extra: dict[str, Any] = {"store": g.store(), "store_kind": store_kind}
    # No session reduce: a session a null value opens alone has a null aggregate and is not
    # kept, so whether it bridges two sessions depends on whether its neighbours came first,
    # and with several partitions that order depends on timing (in Kafka Streams as well).
    ops = ("count", "aggregate") if store_kind == "session" else ("count", "reduce", "aggregate")
    op = rng.choice(ops)
    if op == "count":
        return g.add("count", [grouped], "table", k=k, v="l", **extra)
    if op == "reduce":
        return g.add("reduce", [grouped], "table", k=k, v=v_in, fn=rng.choice(("sum", "max")),
                     **extra)  # fmt: skip
    fields: dict[str, Any] = {"init": _pick(rng, f.INITIALIZERS), "fn": "agg_sum"}
    if windows is not None and windows["type"] == "session":
        # Each session starts from the initializer and merged sessions add up: only a zero
        # start keeps the result independent of how sessions formed and merged.
        fields = {"init": "zero", "fn": "agg_sum", "merger": "merge_sum"}
    return g.add("aggregate", [grouped], "table", k=k, v=rng.choice("sl"), **fields, **extra)


def _partitioned_windows(g: _Graph, session: bool) -> dict[str, Any]:
    rng = g.rng
    grace = PARTITIONED_GRACE_MS
    if session:
        return {"type": "session", "gap": rng.choice((50, 100, 300)), "grace": grace}
    kind = rng.choice(("tumbling", "hopping", "sliding"))
    size = rng.choice(WINDOW_SIZES)
    if kind == "tumbling":
        return {"type": kind, "size": size, "grace": grace}
    if kind == "hopping":
        return {"type": kind, "size": size, "advance": size // rng.choice((2, 4)), "grace": grace}
    return {"type": kind, "diff": rng.choice((50, 100, 300)), "grace": grace}


def _grouped_stream(g: _Graph, named: bool = False) -> str:
    """A stream from a topic, its stateless chain, a re-key, then ``group_by``/``group_by_key``."""
    s = _stateless(g, g.source("stream"), g.rng.randint(0, 2))
    return _group(g, _rekey(g, s), named=named)


def _partitioned_table(g: _Graph) -> str:
    """A table from a topic (maybe filtered or mapped), or re-keyed by a table ``group_by`` into
    a commutative aggregate."""
    rng = g.rng
    t = _table_ops(g, _source_table(g), rng.randint(0, 1))
    if rng.random() < 0.4:
        v = g.node(t)["v"]
        grouped = g.add("table_group_by", [t], "grouped_table", v=v, fn=_pick(rng, f.REGROUPERS))
        store: dict[str, Any] = {"store": g.store(), "store_kind": "kv"}
        op = rng.choice(("table_count", "table_reduce", "table_aggregate"))
        if op == "table_count":
            t = g.add(op, [grouped], "table", v="l", **store)
        elif op == "table_reduce":
            t = g.add(op, [grouped], "table", v=v, fn="sum", fn2="sub", **store)
        else:
            t = g.add(op, [grouped], "table", v=rng.choice("sl"), init=_pick(rng, f.INITIALIZERS),
                      fn="agg_sum", fn2="agg_sub", **store)  # fmt: skip
    return t


def _partitioned_feature(g: _Graph, feature: str) -> None:  # noqa: C901, PLR0912 - one recipe each
    rng = g.rng
    if feature == "stateless":
        _stateless(g, g.source("stream"), rng.randint(2, 6))
    elif feature in ("aggregate", "windowed", "session"):
        grouped = _grouped_stream(g)
        windows = None
        if feature != "aggregate":
            windows = _partitioned_windows(g, session=feature == "session")
            grouped = g.add("windowed_by", [grouped], "windowed", v=g.node(grouped)["v"],
                            windows=windows, emit_on_close=False)  # fmt: skip
        t = _commutative_aggregate(g, grouped, windows)
        g.add("to_stream", [t], "stream", k=g.node(t)["k"], v=g.node(t)["v"])
    elif feature == "table_aggregate":
        t = _partitioned_table(g)
        if g.node(t)["op"] not in ("table_count", "table_reduce", "table_aggregate"):
            t = _partitioned_table(g)
        g.add("to_stream", [t], "stream", v=g.node(t)["v"])
    elif feature == "cogroup":
        groups = [_grouped_stream(g, named=True) for _ in range(rng.choice((2, 2, 3)))]
        windows = None
        if rng.random() < 0.5:
            windows = _partitioned_windows(g, session=rng.random() < 0.3)
        fields: dict[str, Any] = {"fns": ["agg_sum"] * len(groups), "init": "zero",
                                  "windows": windows}  # fmt: skip
        k, store_kind = "s", "kv"
        if windows is not None:
            k = _window_key(windows)
            store_kind = "session" if windows["type"] == "session" else "window"
            if windows["type"] == "session":
                fields["merger"] = "merge_sum"
        t = g.add("cogroup", groups, "table", k=k, v=rng.choice("sl"), store=g.store(),
                  store_kind=store_kind, **fields)  # fmt: skip
        g.add("to_stream", [t], "stream", k=k, v=g.node(t)["v"])
    elif feature == "stream_table_join":
        s = _rekey(g, _stateless(g, g.source("stream"), rng.randint(0, 2)))
        t = _partitioned_table(g)
        joined = g.add("st_join", [s, t], "stream", v=rng.choice("sl"),
                       kind=rng.choice(("inner", "left")), fn="jn")  # fmt: skip
        _stateless(g, joined, rng.randint(0, 1))
    elif feature == "stream_stream_join":
        left = _rekey(g, _stateless(g, g.source("stream"), rng.randint(0, 2)))
        right = _rekey(g, _stateless(g, g.source("stream"), rng.randint(0, 1)))
        kind = rng.choice(("inner", "left", "outer"))
        # A left or outer join emits a record with no partner at once when its window ended
        # before the join's stream time reached it, as Kafka Streams does; with several
        # partitions that stream time depends on timing. A window longer than the input's span
        # keeps every record's window open.
        diff = rng.choice((50, 100, 300)) if kind == "inner" else PARTITIONED_OUTER_JOIN_MS
        joined = g.add(
            "ss_join", [left, right], "stream", v=rng.choice("sl"), kind=kind, fn="jn",
            diff=diff, grace=PARTITIONED_GRACE_MS,
        )  # fmt: skip
        _stateless(g, joined, rng.randint(0, 1))
    elif feature == "table_table_join":
        left, right = _partitioned_table(g), _partitioned_table(g)
        t = g.add("tt_join", [left, right], "table", v=rng.choice("sl"),
                  kind=rng.choice(("inner", "left", "outer")), fn="jn", store=g.store(0.4),
                  store_kind="kv")  # fmt: skip
        g.add("to_stream", [t], "stream", v=g.node(t)["v"])
    elif feature == "foreign_key_join":
        left = _materialize(g, _partitioned_table(g))
        right = _materialize(g, _partitioned_table(g))
        t = g.add("fk_join", [left, right], "table", v=rng.choice("sl"),
                  kind=rng.choice(("inner", "left")), fn="jn", fk="fk_v", store=g.store(0.4),
                  store_kind="kv")  # fmt: skip
        g.add("to_stream", [t], "stream", v=g.node(t)["v"])
    elif feature == "global_join":
        s = _rekey(g, _stateless(g, g.source("stream"), rng.randint(0, 2)))
        table = g.source("global_table", store=f"store{len(g.nodes)}", store_kind="kv")
        joined = g.add("sg_join", [s, table], "stream", v=rng.choice("sl"),
                       kind=rng.choice(("inner", "left")), fn="jn",
                       key=_pick(rng, f.GLOBAL_KEYS))  # fmt: skip
        _stateless(g, joined, rng.randint(0, 1))
    else:
        raise ValueError(
            f"unknown partitioned feature {feature!r}; features: {', '.join(PARTITIONED_FEATURES)}"
        )


def _partitioned_inputs(rng: random.Random, topics: dict[str, str]) -> list[list[Any]]:
    """Records for every input topic with timestamps as offsets from the run's start (the run
    moves them next to the wall clock); tables' records come before streams'."""
    keys = [f"k{i}" for i in range(rng.choice((5, 8, 12)))]
    clock = 0
    records: list[list[Any]] = []
    tables = sorted(t for t, op in topics.items() if op != "stream")
    streams = sorted(t for t, op in topics.items() if op == "stream")
    for names in (tables, streams):
        if not names:
            continue
        for _ in range(rng.randint(15, 50)):
            if records and records[-1][0] in names and rng.random() < 0.05:
                records.append(list(records[-1]))  # an exact duplicate
                continue
            clock += rng.choice((0, 5, 10, 20, 40, 80))
            timestamp = clock - rng.randint(1, 150) if rng.random() < 0.2 else clock
            key = None if rng.random() < 0.04 else rng.choice(keys)
            value = None if rng.random() < 0.08 else str(rng.randint(0, 999))
            records.append([rng.choice(names), key, value, max(timestamp, 0)])
    return records


def generate_partitioned_case(
    seed: int, index: int, *, feature: str | None = None
) -> dict[str, Any]:
    """Partitioned case ``index`` of ``seed``, for a run on real Kafka (:mod:`.cluster`); the
    same arguments always give the same case."""
    rng = random.Random(f"fluvial-differential-partitioned:{seed}:{index}")
    feature = feature or PARTITIONED_FEATURES[index % len(PARTITIONED_FEATURES)]
    g = _Graph(rng)
    _partitioned_feature(g, feature)
    _sinks(g)
    store_type = (
        "rocksdb"
        if any(n["op"] == "ss_join" for n in g.nodes)
        else rng.choice(("rocksdb", "in_memory"))
    )
    return {
        "id": f"{seed}-p{index}",
        "feature": feature,
        "store_type": store_type,
        "input_mode": rng.choice(INPUT_MODES),
        "nodes": g.nodes,
        "inputs": _partitioned_inputs(rng, g.topics),
    }
