"""Differential cases whose tables' timestamps run ahead of their streams.

A table is often written with the wall clock while the stream that joins it carries older event
times (docs/semantics.md, "Tables and event time"). These cases draw a stream-table or
stream-global-table join, then either stateless operators, a windowed aggregate in the join's own
task (its key unchanged), or a windowed aggregate behind a re-key (a repartition topic), and move
every table and global-table record :data:`TABLE_AHEAD_MS` ahead of the streams' records.

- :func:`generate_table_ahead_case`: one partition, compared through both test drivers. The
  records are piped in their drawn order, so stream records piped before a key's row miss it and
  later ones find it; a versioned table, looked up as of the stream record's time, has no row
  that old at all.
- :func:`generate_partitioned_table_ahead_case`: on a real cluster (:mod:`.cluster`). Tables are
  written and consumed before any stream record, as in every partitioned case, and the drawing
  follows :func:`~.generate.generate_partitioned_case`'s rules (commutative aggregates, grace
  longer than the input), so the results do not depend on timing.
"""

from __future__ import annotations

import random
from typing import Any

from fluvial.verify.differential import functions as f
from fluvial.verify.differential.generate import (
    BASE_MS,
    INPUT_MODES,
    _aggregate,
    _commutative_aggregate,
    _Graph,
    _group,
    _inputs,
    _partitioned_inputs,
    _partitioned_table,
    _partitioned_windows,
    _pick,
    _rekey,
    _sinks,
    _some_table,
    _source_table,
    _stateless,
    _windows,
)

# The gap in the issue that found it: a table stamped now, readings 20 minutes old.
TABLE_AHEAD_MS = 20 * 60_000
TABLE_AHEAD_FEATURES = ("stream_table_join", "global_join")


def _join(g: _Graph, feature: str, partitioned: bool) -> str:
    rng = g.rng
    s = _stateless(g, g.source("stream"), rng.randint(0, 2))
    if partitioned:
        s = _rekey(g, s)
    if feature == "stream_table_join":
        if partitioned:
            t = _partitioned_table(g)
        elif rng.random() < 0.3:
            t = _source_table(g, versioned=True)
        else:
            t = _some_table(g)
        return g.add("st_join", [s, t], "stream", v=rng.choice("sl"),
                     kind=rng.choice(("inner", "left")), fn="jn")  # fmt: skip
    table = g.source("global_table", store=f"store{len(g.nodes)}", store_kind="kv")
    return g.add("sg_join", [s, table], "stream", v=rng.choice("sl"),
                 kind=rng.choice(("inner", "left")), fn="jn",
                 key=_pick(rng, f.GLOBAL_KEYS))  # fmt: skip


def _after_join(g: _Graph, joined: str, partitioned: bool) -> None:
    """Stateless operators, or a windowed aggregate in the join's task or behind a re-key."""
    rng = g.rng
    roll = rng.random()
    if roll < 0.3:
        _stateless(g, joined, rng.randint(0, 2))
        return
    s = joined if roll < 0.6 else g.add("select_key", [joined], "stream",
                                        v=g.node(joined)["v"],
                                        fn=_pick(rng, f.KEY_SELECTORS))  # fmt: skip
    if partitioned:
        windows = _partitioned_windows(g, session=rng.random() < 0.3)
        grouped = g.add("group_by_key", [s], "grouped", v=g.node(s)["v"])
    else:
        windows = _windows(g)
        grouped = _group(g, s)
    windowed = g.add("windowed_by", [grouped], "windowed", v=g.node(grouped)["v"],
                     windows=windows, emit_on_close=False)  # fmt: skip
    aggregate = _commutative_aggregate if partitioned else _aggregate
    t = aggregate(g, windowed, windows)
    g.add("to_stream", [t], "stream", k=g.node(t)["k"], v=g.node(t)["v"])


def _tables_ahead(
    inputs: list[list[Any]], topics: dict[str, str], *, streams_back: bool
) -> list[list[Any]]:
    """Tables :data:`TABLE_AHEAD_MS` ahead of streams: tables moved forward, or, where times
    are offsets from the wall clock (partitioned cases), streams moved back."""
    for record in inputs:
        if (topics[record[0]] == "stream") == streams_back:
            record[3] += -TABLE_AHEAD_MS if streams_back else TABLE_AHEAD_MS
    return inputs


def generate_table_ahead_case(seed: int, index: int) -> dict[str, Any]:
    """Single-partition table-ahead case ``index`` of ``seed`` (the same arguments always give
    the same case), for both test drivers (:mod:`.run`)."""
    return _generate(seed, index, partitioned=False)


def generate_partitioned_table_ahead_case(seed: int, index: int) -> dict[str, Any]:
    """Partitioned table-ahead case ``index`` of ``seed``, for a run on real Kafka."""
    return _generate(seed, index, partitioned=True)


def _generate(seed: int, index: int, *, partitioned: bool) -> dict[str, Any]:
    kind = "partitioned" if partitioned else "single"
    rng = random.Random(f"fluvial-differential-table-ahead-{kind}:{seed}:{index}")
    feature = TABLE_AHEAD_FEATURES[index % len(TABLE_AHEAD_FEATURES)]
    g = _Graph(rng)
    _after_join(g, _join(g, feature, partitioned), partitioned)
    _sinks(g)
    case: dict[str, Any] = {
        "id": f"{seed}-{'p' if partitioned else ''}ta{index}",
        "feature": feature,
        "store_type": rng.choice(("rocksdb", "in_memory")),
    }
    if partitioned:
        case["input_mode"] = rng.choice(INPUT_MODES)
        inputs = _partitioned_inputs(rng, g.topics)
    else:
        inputs = _inputs(rng, g.topics, BASE_MS)
    case["nodes"] = g.nodes
    case["inputs"] = _tables_ahead(inputs, g.topics, streams_back=partitioned)
    return case
