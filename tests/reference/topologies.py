"""fluvial twins of the reference app's topologies, and the seeded inputs they run on.

Each ``build_*`` function mirrors the Java method of the same name in
``reference/src/main/java/dev/fluvial/reference/Topologies.java``: same operators, windows and
serdes. Wherever fluvial would otherwise pick its default serde (JSON, for keys and values it
cannot infer after ``map``/``select_key``/``map_values``), the twin names Kafka Streams' serde
explicitly, so that both write the same bytes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluvial import (
    Branched,
    BufferConfig,
    JoinWindows,
    KeyValue,
    KStream,
    KTable,
    Materialized,
    Named,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    serdes,
)
from tests.event_times import event_time_base_ms
from tests.runtime.harness import generate_views

WINDOW_MS, GRACE_MS = 5000, 2000
JOIN_DIFFERENCE_MS, JOIN_GRACE_MS = 2000, 1000

STRING = serdes.string()
LONG = serdes.long()
WINDOWED_STRING = serdes.time_windowed(STRING, WINDOW_MS)

Record = tuple[str, str | None, int]  # key, value (None: tombstone), timestamp


# -- page views: figure2, suppress, repartition-aggregate ------------------------------------


def _windowed_counts(builder: StreamsBuilder, input_topic: str) -> KTable:
    return (
        builder.stream(input_topic, key_serde=STRING, value_serde=serdes.json())
        .filter(lambda user, view: view["period"] >= 30000)
        .map(lambda user, view: KeyValue(view["category"], view))
        # The key changed: the grouping repartitions, with explicit serdes on both engines.
        .group_by_key(key_serde=STRING, value_serde=serdes.json())
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count(materialized=Materialized.with_(STRING, LONG))
    )


def build_figure2(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
    _windowed_counts(builder, input_topic).to_stream().to(
        output_topic, key_serde=WINDOWED_STRING, value_serde=LONG
    )


def build_suppress(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
    (
        _windowed_counts(builder, input_topic)
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .to(output_topic, key_serde=WINDOWED_STRING, value_serde=LONG)
    )


def build_repartition_aggregate(
    builder: StreamsBuilder, input_topic: str, output_topic: str
) -> None:
    (
        builder.stream(input_topic, key_serde=STRING, value_serde=serdes.json())
        .select_key(lambda user, view: view["category"])
        .group_by_key(key_serde=STRING, value_serde=serdes.json())
        .aggregate(
            lambda: 0,
            lambda category, view, seconds: seconds + view["period"] // 1000,
            materialized=Materialized.with_(STRING, LONG),
        )
        .to_stream()
        .to(output_topic, key_serde=STRING, value_serde=LONG)
    )


# -- tables: table-aggregate, table-reduce ---------------------------------------------------


def build_table_aggregate(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
    (
        builder.table(input_topic, key_serde=STRING, value_serde=serdes.json())
        .group_by(
            lambda user, view: KeyValue(view["category"], view["period"]),
            key_serde=STRING,
            value_serde=LONG,
        )
        .aggregate(
            lambda: 0,
            lambda category, period, total: total + period,
            lambda category, period, total: total - period,
            materialized=Materialized.with_(STRING, LONG),
        )
        .to_stream()
        .to(output_topic, key_serde=STRING, value_serde=LONG)
    )


def build_table_reduce(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
    (
        builder.table(input_topic, key_serde=STRING, value_serde=serdes.json())
        .group_by(
            lambda user, view: KeyValue(view["category"], str(view["period"])),
            key_serde=STRING,
            value_serde=STRING,
        )
        .reduce(
            lambda total, period: str(int(total) + int(period)),
            lambda total, period: str(int(total) - int(period)),
            materialized=Materialized.with_(STRING, STRING),
        )
        .to_stream()
        .to(output_topic, key_serde=STRING, value_serde=STRING)
    )


# -- joins -----------------------------------------------------------------------------------


def _payload(marked: str) -> str | None:
    payload = marked[2:]
    return None if payload == "-" else payload


def joined(left: str | None, right: str | None) -> str:
    """The joiner of every join topology; Java prints a missing side as ``null``."""
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


def _sides(builder: StreamsBuilder, input_topic: str) -> tuple[KStream, KStream]:
    branches = (
        builder.stream(input_topic, key_serde=STRING, value_serde=STRING)
        .split(Named.as_("side-"))
        .branch(lambda k, v: v is not None and v.startswith("L:"), Branched.as_("left"))
        .branch(lambda k, v: v is not None and v.startswith("R:"), Branched.as_("right"))
        .no_default_branch()
    )
    return (
        branches["side-left"].map_values(_payload),
        branches["side-right"].map_values(_payload),
    )


def build_stream_stream(kind: str) -> Callable[[StreamsBuilder, str, str], None]:
    def build(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
        left, right = _sides(builder, input_topic)
        # Deletions mean nothing to a stream join: keep them out, as the Java twin does.
        left = left.filter(lambda k, v: v is not None)
        right = right.filter(lambda k, v: v is not None)
        windows = JoinWindows.of_time_difference_and_grace(JOIN_DIFFERENCE_MS, JOIN_GRACE_MS)
        join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
        result = join(
            right, joined, windows, key_serde=STRING, value_serde=STRING, other_value_serde=STRING
        )
        result.to(output_topic, key_serde=STRING, value_serde=STRING)

    return build


def build_stream_table(left_join: bool) -> Callable[[StreamsBuilder, str, str], None]:
    def build(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
        left, right = _sides(builder, input_topic)
        stream = left.filter(lambda k, v: v is not None)
        table = right.to_table(materialized=Materialized.with_(STRING, STRING))
        result = stream.left_join(table, joined) if left_join else stream.join(table, joined)
        result.to(output_topic, key_serde=STRING, value_serde=STRING)

    return build


def build_table_table(kind: str) -> Callable[[StreamsBuilder, str, str], None]:
    def build(builder: StreamsBuilder, input_topic: str, output_topic: str) -> None:
        left_stream, right_stream = _sides(builder, input_topic)
        left = left_stream.to_table(materialized=Materialized.with_(STRING, STRING))
        right = right_stream.to_table(materialized=Materialized.with_(STRING, STRING))
        join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
        join(right, joined).to_stream().to(output_topic, key_serde=STRING, value_serde=STRING)

    return build


# -- seeded inputs ---------------------------------------------------------------------------
# Event times start near the wall clock (tests/event_times.py): the broker deletes the window
# stores' changelogs by record timestamp.


def page_views(seed: int, count: int) -> list[Record]:
    """Figure 2's views: repeated users, out-of-order timestamps, some later than grace."""
    return [(v.key, v.value().decode(), v.timestamp_ms) for v in generate_views(seed, count)]


def table_rows(seed: int, count: int) -> list[Record]:
    """Updates of a few users' rows (so categories move between groups) and tombstones."""
    rng = random.Random(seed)
    clock, rows = event_time_base_ms(), []
    for _ in range(count):
        clock += rng.randint(0, 200)
        timestamp = clock - rng.randint(0, 3000) if rng.random() < 0.2 else clock
        user = f"user-{rng.randint(0, 14)}"
        if rng.random() < 0.2:
            rows.append((user, None, timestamp))
        else:
            view = {"period": rng.choice([10_000, 35_000, 45_000, 60_000]),
                    "category": rng.choice(["news", "sports", "tech", "travel"])}  # fmt: skip
            rows.append((user, json.dumps(view), timestamp))
    return rows


def join_sides(seed: int, count: int, *, deletes: bool) -> list[Record]:
    """Both sides of a join in one topic (``L:``/``R:`` values), over a few keys.

    Timestamps mostly advance, some go back within the join window and grace, and a few go
    back further than that (too late for a stream-stream join). With ``deletes``, some
    payloads are ``-``, read as a deletion where a side is a table.
    """
    rng = random.Random(seed)
    clock, records = event_time_base_ms(), []
    reach = JOIN_DIFFERENCE_MS + JOIN_GRACE_MS
    for i in range(count):
        clock += rng.randint(0, 600)
        roll = rng.random()
        if roll < 0.15:
            timestamp = clock - rng.randint(1, reach)
        elif roll < 0.2:
            timestamp = clock - rng.randint(reach + 1, 4 * reach)
        else:
            timestamp = clock
        side = rng.choice("LR")
        payload = "-" if deletes and rng.random() < 0.15 else f"{side.lower()}{i}"
        records.append((f"k{rng.randint(0, 5)}", f"{side}:{payload}", timestamp))
    return records


@dataclass(frozen=True)
class Case:
    """One differential case: the reference topology's name, fluvial's twin, its input, and
    how to show output bytes in a failure message."""

    name: str
    build: Callable[[StreamsBuilder, str, str], None]
    make_input: Callable[[int, int], list[Record]]
    show_key: Callable[[bytes], Any]
    show_value: Callable[[bytes], Any]


def _windowed(data: bytes) -> str:
    windowed = WINDOWED_STRING.deserialize("", data)
    return f"{windowed.key}@{windowed.window.start_ms}"


def _string(data: bytes) -> str:
    return STRING.deserialize("", data)


def _long(data: bytes) -> int:
    return LONG.deserialize("", data)


def _joins(seed: int, count: int) -> list[Record]:
    return join_sides(seed, count, deletes=False)


def _table_joins(seed: int, count: int) -> list[Record]:
    return join_sides(seed, count, deletes=True)


CASES = [
    Case("figure2", build_figure2, page_views, _windowed, _long),
    Case("suppress", build_suppress, page_views, _windowed, _long),
    Case("repartition-aggregate", build_repartition_aggregate, page_views, _string, _long),
    Case("table-aggregate", build_table_aggregate, table_rows, _string, _long),
    Case("table-reduce", build_table_reduce, table_rows, _string, _string),
    *(
        Case(f"stream-stream-{kind}", build_stream_stream(kind), _joins, _string, _string)
        for kind in ("inner", "left", "outer")
    ),
    Case("stream-table-inner", build_stream_table(False), _table_joins, _string, _string),
    Case("stream-table-left", build_stream_table(True), _table_joins, _string, _string),
    *(
        Case(f"table-table-{kind}", build_table_table(kind), _table_joins, _string, _string)
        for kind in ("inner", "left", "outer")
    ),
]
