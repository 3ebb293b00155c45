"""Stream-table and stream-global joins: only stream records trigger, the lookup is at processing."""

from __future__ import annotations

import logging
import uuid

import pytest

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import TopologyError
from fluvial.processor.collector import ConsumedRecord
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def stream_table_topology(left: bool):
    builder = StreamsBuilder()
    clicks = builder.stream("clicks", key_serde=S, value_serde=S)
    regions = builder.table("regions", key_serde=S, value_serde=S)
    join = clicks.left_join if left else clicks.join
    join(regions, lambda click, region: f"{click}@{region}").to("out", value_serde=S)
    return builder.build()


# (topic, key, value, timestamp) in processing order, and what the output must then hold.
TRANSCRIPT = [
    (("clicks", "u1", "c1", 10), {"inner": [], "left": [("u1", "c1@None")]}),
    (("regions", "u1", "eu", 5), {"inner": [], "left": []}),  # table updates never emit
    (("clicks", "u1", "c2", 20), {"inner": [("u1", "c2@eu")], "left": [("u1", "c2@eu")]}),
    # Out of order: the lookup sees the table as it is now (eu), not as it was at t=1.
    (("clicks", "u1", "c3", 1), {"inner": [("u1", "c3@eu")], "left": [("u1", "c3@eu")]}),
    (("regions", "u1", "us", 30), {"inner": [], "left": []}),
    (("clicks", "u1", "c4", 25), {"inner": [("u1", "c4@us")], "left": [("u1", "c4@us")]}),
    (("regions", "u1", None, 40), {"inner": [], "left": []}),  # tombstone: the row is gone
    (("clicks", "u1", "c5", 50), {"inner": [], "left": [("u1", "c5@None")]}),
    (("clicks", "u2", None, 60), {"inner": [], "left": []}),  # null stream values never join
]


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_stream_table_join_transcript(store_type, kind):
    topology = stream_table_topology(left=kind == "left")
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        inputs = {t: driver.create_input_topic(t, S, S) for t in ("clicks", "regions")}
        out = driver.create_output_topic("out", S, S)
        for (topic, key, value, ts), expected in TRANSCRIPT:
            inputs[topic].pipe_input(key, value, timestamp_ms=ts)
            assert out.read_key_values() == expected[kind], (topic, key, value, ts)


def test_stream_table_join_output_keeps_stream_timestamp(store_type):
    with TopologyTestDriver(stream_table_topology(False), store_type=store_type) as driver:
        driver.create_input_topic("regions", S, S).pipe_input("u", "eu", timestamp_ms=100)
        driver.create_input_topic("clicks", S, S).pipe_input("u", "c", timestamp_ms=7)
        (record,) = driver.create_output_topic("out", S, S).read_records()
        assert (record.value, record.timestamp_ms) == ("c@eu", 7)


def test_join_against_filtered_and_mapped_table_uses_value_getters(store_type):
    builder = StreamsBuilder()
    prices = (
        builder.table("prices", key_serde=S, value_serde=serdes.long())
        .filter(lambda k, p: p > 0)
        .map_values(lambda p: p * 100)
    )
    builder.stream("orders", key_serde=S, value_serde=serdes.long()).join(
        prices, lambda qty, cents: qty * cents
    ).to("out", value_serde=serdes.long())
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        p = driver.create_input_topic("prices", S, serdes.long())
        o = driver.create_input_topic("orders", S, serdes.long())
        out = driver.create_output_topic("out", S, serdes.long())
        p.pipe_input("apple", 3, timestamp_ms=1)
        p.pipe_input("pear", 0, timestamp_ms=1)  # filtered out of the joined table
        o.pipe_input("apple", 2, timestamp_ms=2)
        o.pipe_input("pear", 5, timestamp_ms=2)
        assert out.read_key_values() == [("apple", 600)]


def test_stream_after_key_change_is_repartitioned_and_copartitioned_with_the_table():
    builder = StreamsBuilder()
    table = builder.table("users", key_serde=S, value_serde=S)
    (
        builder.stream("events", key_serde=S, value_serde=S)
        .select_key(lambda k, v: v)
        .join(table, lambda v, name: name)
        .to("out")
    )
    topology = builder.build()
    assert topology.subtopology_count == 2
    groups = topology.copartition_groups("app")
    assert len(groups) == 1
    (group,) = groups
    assert "users" in group and any(t.endswith("-repartition") for t in group)
    # The repartition topic takes the table's partition count, so the join is co-partitioned.
    repartition = next(t for t in topology.internal_topics("app") if t.kind == "repartition")
    assert repartition.follows == ("users",)
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("users", S, S).pipe_input("bob", "Bob", timestamp_ms=1)
        driver.create_input_topic("events", S, S).pipe_input("e1", "bob", timestamp_ms=2)
        assert driver.create_output_topic("out", S, S).read_key_values() == [("bob", "Bob")]


def global_topology(left: bool):
    builder = StreamsBuilder()
    products = builder.global_table("products", key_serde=S, value_serde=S)
    orders = builder.stream("orders", key_serde=S, value_serde=serdes.json())
    join = orders.left_join if left else orders.join
    join(
        products,
        lambda order, product: f"{order['qty']}x{product}",
        key_selector=lambda order_id, order: order["product"],
    ).to("out", value_serde=S)
    return builder.build()


@pytest.mark.parametrize("left", [False, True])
def test_stream_global_table_join_by_selected_key(store_type, left):
    topology = global_topology(left)
    assert topology.global_source_topics() == ["products"]
    assert topology.source_topics() == ["orders"], "global topics are not read by stream tasks"
    assert topology.copartition_groups("app") == [], "global joins need no co-partitioning"
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        products = driver.create_input_topic("products", S, S)
        orders = driver.create_input_topic("orders", S, serdes.json())
        out = driver.create_output_topic("out", S, S)
        products.pipe_input("p1", "apple", timestamp_ms=100)
        orders.pipe_input("o1", {"product": "p1", "qty": 2}, timestamp_ms=1)
        orders.pipe_input("o2", {"product": "p2", "qty": 1}, timestamp_ms=2)
        products.pipe_input("p1", None, timestamp_ms=101)
        orders.pipe_input("o3", {"product": "p1", "qty": 4}, timestamp_ms=3)
        expected = [("o1", "2xapple")]
        if left:
            expected += [("o2", "1xNone"), ("o3", "4xNone")]
        assert out.read_key_values() == expected
        assert driver.get_key_value_store(topology_global_store(topology)).to_dict() == {}


def topology_global_store(topology) -> str:
    (name,) = topology.global_stores
    return name


def test_join_errors_name_the_fix():
    builder = StreamsBuilder()
    stream = builder.stream("a", key_serde=S, value_serde=S)
    other = builder.stream("b", key_serde=S, value_serde=S)
    with pytest.raises(TypeError, match="JoinWindows"):
        stream.join(other, lambda a, b: a)
    products = builder.global_table("g", key_serde=S, value_serde=S)
    with pytest.raises(TypeError, match="key_selector"):
        stream.join(products, lambda a, b: a)


def test_reading_one_topic_as_stream_and_global_table_is_rejected():
    builder = StreamsBuilder()
    builder.stream("t").to("out")
    builder.global_table("t")
    with pytest.raises(TopologyError, match="read by two sources"):
        builder.build()


def test_describe_lists_the_global_store_apart_from_task_sub_topologies():
    topology = global_topology(left=False)
    described = topology.describe()
    assert topology.subtopology_count == 1
    subs = described.to_dict()["subtopologies"]
    assert [s["global"] for s in subs] == [False, True]
    assert "Sub-topology: 1 for global store (will not generate tasks)" in str(described)
    assert subs[1]["nodes"][0]["topics"] == ["products"]


# -- a table ahead of its stream in time ---------------------------------------------------------

MISSES = "join-misses-before-table"


@pytest.fixture
def unique_app() -> str:
    """A join warns once a minute per application and join: each test its own application."""
    return f"app-{uuid.uuid4().hex}"


def misses(driver: TopologyTestDriver) -> int:
    return sum(n for name, n in driver.metrics().items() if name.startswith(MISSES + ":"))


@pytest.mark.parametrize("left", [False, True])
def test_a_record_older_than_the_table_is_counted_and_explained_once(left, caplog, unique_app):
    with TopologyTestDriver(
        stream_table_topology(left), StreamsConfig(application_id=unique_app)
    ) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        clicks.pipe_input("u1", "c0", timestamp_ms=10)  # nothing of the table known yet: no count
        driver.create_input_topic("regions", S, S).pipe_input("u1", "eu", timestamp_ms=1_000)
        with caplog.at_level(logging.WARNING, logger="fluvial.dsl.stream_table_join"):
            clicks.pipe_input("u1", "c1", timestamp_ms=100)  # found: the lookup is as of now
            clicks.pipe_input("u2", "c2", timestamp_ms=100)  # older than the table: counted
            clicks.pipe_input("u3", "c3", timestamp_ms=400)  # counted, not warned again
            clicks.pipe_input("u4", "c4", timestamp_ms=1_000)  # not older: a plain miss
        assert misses(driver) == 2
        [warning] = [r.getMessage() for r in caplog.records]
        assert "older than the table regions" in warning
        assert "900 ms later" in warning and "KSTREAM-JOIN" in warning
        for way_out in ("timestamp extractor", "GlobalKTable", "versioned"):
            assert way_out in warning
        expected = [("u1", "c1@eu")] + ([("u2", "c2@None"), ("u3", "c3@None"),
                                         ("u4", "c4@None")] if left else [])  # fmt: skip
        assert driver.create_output_topic("out", S, S).read_key_values()[-len(expected) :] == (
            expected
        )


def test_a_backlog_counts_against_the_table_rows_still_waiting(caplog, unique_app):
    """Nothing of the table processed yet, but its rows are waiting in the task: the older
    stream records go first, and miss the table because of time."""
    with TopologyTestDriver(
        stream_table_topology(False), StreamsConfig(application_id=unique_app)
    ) as driver:
        [task] = driver.tasks
        task.add_records("regions", 0, [ConsumedRecord(b"u1", b"eu", 60_000, 0)])
        task.add_records("clicks", 0, [ConsumedRecord(b"u1", b"c", 1_000, 0),
                                       ConsumedRecord(b"u1", b"d", 2_000, 1)])  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="fluvial.dsl.stream_table_join"):
            assert task.process_batch(10) == 3
        assert misses(driver) == 2
        assert driver.create_output_topic("out", S, S).read_key_values() == []
        [warning] = [r.getMessage() for r in caplog.records]
        assert "59 s later" in warning, warning


def test_a_global_table_join_never_counts_time_misses(unique_app):
    builder = StreamsBuilder()
    regions = builder.global_table("regions", key_serde=S, value_serde=S)
    (builder.stream("clicks", key_serde=S, value_serde=S)
        .join(regions, lambda c, r: f"{c}@{r}", key_selector=lambda k, v: k)
        .to("out", value_serde=S))  # fmt: skip
    with TopologyTestDriver(builder.build(), StreamsConfig(application_id=unique_app)) as driver:
        driver.create_input_topic("regions", S, S).pipe_input("u1", "eu", timestamp_ms=1_000)
        driver.create_input_topic("clicks", S, S).pipe_input("u2", "c", timestamp_ms=10)
        assert misses(driver) == 0
