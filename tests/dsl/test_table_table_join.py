"""Table-table joins emit revisions as either side changes, tombstones included."""

from __future__ import annotations

import pytest

from fluvial import KeyValue, Materialized, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def join_topology(kind: str):
    builder = StreamsBuilder()
    a = builder.table("A", key_serde=S, value_serde=S)
    b = builder.table("B", key_serde=S, value_serde=S)
    join = {"inner": a.join, "left": a.left_join, "outer": a.outer_join}[kind]
    joined = join(b, lambda x, y: f"{x}/{y}")
    joined.to_stream().to("out", value_serde=S)
    # Rows in the join, counted downstream: only right if old values are right.
    joined.group_by(lambda k, v: KeyValue("rows", v), value_serde=S).count(
        materialized=Materialized.as_("rows")
    )
    return builder.build()


TRANSCRIPT = [
    (("A", "k", "a1", 1), {"inner": [], "left": [("k", "a1/None", 1)]}),
    (("B", "k", "b1", 5), {"all": [("k", "a1/b1", 5)]}),
    (("A", "k", "a2", 3), {"all": [("k", "a2/b1", 5)]}),  # result time: the later row's
    (("B", "k", None, 6), {"inner": [("k", None, 6)], "left": [("k", "a2/None", 6)]}),
    (("B", "j", "c1", 7), {"inner": [], "left": [], "outer": [("j", "None/c1", 7)]}),
    (("A", "k", None, 8), {"inner": [], "left": [("k", None, 8)]}),
    (("A", "j", "a3", 9), {"all": [("j", "a3/c1", 9)]}),
    (("B", "j", "c2", 4), {"all": [("j", "a3/c2", 9)]}),
    (("A", "x", None, 10), {}),  # deleting what was never there changes nothing
]
FINAL_ROWS = {"inner": 1, "left": 1, "outer": 1}


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_table_table_join_transcript(store_type, kind):
    with TopologyTestDriver(join_topology(kind), store_type=store_type) as driver:
        inputs = {t: driver.create_input_topic(t, S, S) for t in ("A", "B")}
        out = driver.create_output_topic("out", S, S)
        for (topic, key, value, ts), expected in TRANSCRIPT:
            inputs[topic].pipe_input(key, value, timestamp_ms=ts)
            want = expected.get("all", expected.get(kind, expected.get("left", [])))
            got = [(r.key, r.value, r.timestamp_ms) for r in out.read_records()]
            assert got == want, (topic, key, value, ts)
        assert driver.get_key_value_store("rows").to_dict() == {"rows": FINAL_ROWS[kind]}


def test_join_of_a_join_reads_both_sides_through_value_getters(store_type):
    builder = StreamsBuilder()
    a = builder.table("A", key_serde=S, value_serde=S)
    b = builder.table("B", key_serde=S, value_serde=S)
    c = builder.table("C", key_serde=S, value_serde=S)
    a.join(b, lambda x, y: x + y).join(c, lambda xy, z: xy + z).to_stream().to("out")
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        inputs = {t: driver.create_input_topic(t, S, S) for t in "ABC"}
        out = driver.create_output_topic("out", S, S)
        inputs["C"].pipe_input("k", "3", timestamp_ms=1)
        inputs["A"].pipe_input("k", "1", timestamp_ms=2)
        assert out.read_values() == []
        inputs["B"].pipe_input("k", "2", timestamp_ms=3)
        inputs["C"].pipe_input("k", "4", timestamp_ms=4)
        assert out.read_values() == ["123", "124"]


def test_materialized_join_result_is_queryable(store_type):
    builder = StreamsBuilder()
    a = builder.table("A", key_serde=S, value_serde=S)
    b = builder.table("B", key_serde=S, value_serde=S)
    a.left_join(b, lambda x, y: f"{x}{y or ''}", materialized=Materialized.as_("joined"))
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        driver.create_input_topic("A", S, S).pipe_input("k", "a", timestamp_ms=1)
        driver.create_input_topic("B", S, S).pipe_input("k", "b", timestamp_ms=2)
        assert driver.get_key_value_store("joined").to_dict() == {"k": "ab"}


def test_table_joins_register_a_copartition_group():
    topology = join_topology("inner")
    assert {"A", "B"} in topology.copartition_groups("app")
