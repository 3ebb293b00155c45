"""Tables: (new, old) changes, regrouping that subtracts then adds, tombstones, to_table."""

from __future__ import annotations

from fluvial import Grouped, KeyValue, Materialized, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver


def users_per_region(store_type_materialized=None):
    """user -> region table, regrouped by region, counting and listing users per region."""
    builder = StreamsBuilder()
    users = builder.table("user-regions", key_serde=serdes.string(), value_serde=serdes.string())
    by_region = users.group_by(
        lambda user, region: KeyValue(region, user), Grouped.as_("by-region")
    )
    by_region.count(materialized=Materialized.as_("region-counts")).to_stream().to(
        "region-counts", value_serde=serdes.long()
    )
    return builder.build()


def test_key_moving_between_groups_is_subtracted_then_added(store_type):
    with TopologyTestDriver(users_per_region(), store_type=store_type) as driver:
        inp = driver.create_input_topic("user-regions", serdes.string(), serdes.string())
        out = driver.create_output_topic("region-counts", serdes.string(), serdes.long())
        transcript = [
            (("alice", "A", 1), [("A", 1)]),
            (("bob", "A", 2), [("A", 2)]),
            (("alice", "B", 3), [("A", 1), ("B", 1)]),  # subtract from A first, then add to B
            (("alice", "B", 4), [("B", 1)]),  # same group: one change, subtract and add at once
            (("bob", None, 5), [("A", 0)]),  # tombstone removes bob's contribution
            (("carol", None, 6), []),  # deleting an absent key changes nothing
        ]
        for (user, region, ts), expected in transcript:
            inp.pipe_input(user, region, timestamp_ms=ts)
            got = out.read_key_values()
            assert got == expected, (user, region)
        store = driver.get_key_value_store("region-counts")
        assert store.to_dict() == {"A": 0, "B": 1}


def test_table_aggregate_with_adder_and_subtractor(store_type):
    builder = StreamsBuilder()
    (
        builder.table("salaries", key_serde=serdes.string(), value_serde=serdes.json())
        .group_by(lambda name, row: (row["dept"], row["salary"]))
        .aggregate(
            lambda: 0,
            lambda dept, salary, total: total + salary,
            lambda dept, salary, total: total - salary,
            materialized=Materialized.as_("payroll").with_value_serde(serdes.long()),
        )
        .to_stream()
        .to("payroll", value_serde=serdes.long())
    )
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        inp = driver.create_input_topic("salaries", serdes.string(), serdes.json())
        out = driver.create_output_topic("payroll", serdes.string(), serdes.long())
        inp.pipe_input("ann", {"dept": "eng", "salary": 100}, timestamp_ms=1)
        inp.pipe_input("bo", {"dept": "eng", "salary": 50}, timestamp_ms=2)
        inp.pipe_input("ann", {"dept": "ops", "salary": 120}, timestamp_ms=3)
        inp.pipe_input("bo", None, timestamp_ms=4)
        assert out.read_key_values() == [
            ("eng", 100),
            ("eng", 150),
            ("eng", 50),
            ("ops", 120),
            ("eng", 0),
        ]
        assert driver.get_key_value_store("payroll").to_dict() == {"eng": 0, "ops": 120}


def test_table_reduce_and_filter_and_map_values():
    builder = StreamsBuilder()
    (
        builder.table("scores", key_serde=serdes.string(), value_serde=serdes.long())
        .filter(lambda k, v: v >= 10)
        .map_values(lambda v: v * 2)
        .group_by(lambda k, v: ("all", v), value_serde=serdes.long())
        .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v)
        .to_stream()
        .to("total", value_serde=serdes.long())
    )
    with TopologyTestDriver(builder.build()) as driver:
        inp = driver.create_input_topic("scores", serdes.string(), serdes.long())
        out = driver.create_output_topic("total", serdes.string(), serdes.long())
        inp.pipe_input("x", 10, timestamp_ms=1)  # passes: +20
        inp.pipe_input("y", 5, timestamp_ms=2)  # filtered out: nothing
        inp.pipe_input("x", 3, timestamp_ms=3)  # x leaves the filtered table: -20
        inp.pipe_input("y", 30, timestamp_ms=4)  # +60
        assert out.read_key_values() == [("all", 20), ("all", 0), ("all", 60)]


def test_table_updates_carry_old_values_to_stream_as_upserts():
    builder = StreamsBuilder()
    builder.table("t", key_serde=serdes.string(), value_serde=serdes.string()).to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        inp = driver.create_input_topic("t", serdes.string(), serdes.string())
        out = driver.create_output_topic("out", serdes.string(), serdes.string())
        inp.pipe_key_value_list([("k", "v1"), ("k", "v2"), ("k", None), ("j", "w")], timestamp_ms=1)
        assert out.read_key_values() == [("k", "v1"), ("k", "v2"), ("k", None), ("j", "w")]


def test_to_table_after_key_change_repartitions_and_keeps_latest():
    builder = StreamsBuilder()
    (
        builder.stream("clicks", key_serde=serdes.string(), value_serde=serdes.string())
        .select_key(lambda k, v: v)
        .to_table(materialized=Materialized.as_("latest"))
        .to_stream()
        .to("out")
    )
    topology = builder.build()
    assert topology.subtopology_count == 2
    with TopologyTestDriver(topology) as driver:
        inp = driver.create_input_topic("clicks", serdes.string(), serdes.string())
        inp.pipe_key_value_list([("u1", "p1"), ("u2", "p1"), ("u3", "p2")], timestamp_ms=5)
        store = driver.get_key_value_store("latest")
        assert store.to_dict() == {"p1": "p1", "p2": "p2"}
        assert store.get_with_timestamp("p1").timestamp_ms == 5
