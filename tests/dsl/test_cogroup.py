"""cogroup: several grouped streams aggregated into one table, windowed and not."""

from __future__ import annotations

from fluvial import (
    Materialized,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    serdes,
)
from fluvial.testing import TopologyTestDriver

S, J = serdes.string(), serdes.json()


def on_click(user, click, agg):
    return {**agg, "clicks": agg["clicks"] + 1}


def on_purchase(user, amount, agg):
    return {**agg, "spent": agg["spent"] + amount}


def cogrouped(builder: StreamsBuilder):
    clicks = builder.stream("clicks", key_serde=S, value_serde=S).group_by_key()
    buys = builder.stream("buys", key_serde=S, value_serde=serdes.long()).group_by_key()
    return clicks.cogroup(on_click).cogroup(buys, on_purchase)


def initial():
    return {"clicks": 0, "spent": 0}


def test_cogroup_unwindowed_aggregates_both_streams_into_one_table(store_type):
    builder = StreamsBuilder()
    cogrouped(builder).aggregate(
        initial, materialized=Materialized.as_("activity").with_value_serde(J)
    ).to_stream().to("out", value_serde=J)
    topology = builder.build()
    assert topology.subtopology_count == 1 and list(topology.stores) == ["activity"]
    assert topology.copartition_groups("app") == [{"buys", "clicks"}]
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        buys = driver.create_input_topic("buys", S, serdes.long())
        out = driver.create_output_topic("out", S, J)
        clicks.pipe_input("ann", "home", timestamp_ms=1)
        buys.pipe_input("ann", 30, timestamp_ms=2)
        clicks.pipe_input("bob", "home", timestamp_ms=3)
        buys.pipe_input("ann", 12, timestamp_ms=4)
        assert out.read_key_values() == [
            ("ann", {"clicks": 1, "spent": 0}),
            ("ann", {"clicks": 1, "spent": 30}),
            ("bob", {"clicks": 1, "spent": 0}),
            ("ann", {"clicks": 1, "spent": 42}),
        ]
        assert driver.get_key_value_store("activity")["ann"] == {"clicks": 1, "spent": 42}


def windowed_run(windows, store_type, records, merger=None):
    builder = StreamsBuilder()
    cogrouped(builder).windowed_by(windows).aggregate(
        initial, merger, materialized=Materialized.with_(None, J)
    ).to_stream().to("out", value_serde=J)
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        inputs = {
            "clicks": driver.create_input_topic("clicks", S, S),
            "buys": driver.create_input_topic("buys", S, serdes.long()),
        }
        key_serde = windows.windowed_key_serde(S)
        out = driver.create_output_topic("out", key_serde, J)
        for topic, value, ts in records:
            inputs[topic].pipe_input("ann", value, timestamp_ms=ts)
        final = out.read_key_values_to_map()
        return {(w.window.start_ms, w.window.end_ms): v for w, v in final.items()}


RECORDS = [("clicks", "a", 1), ("buys", 5, 4), ("clicks", "b", 12), ("buys", 7, 13)]


def test_cogroup_time_windowed(store_type):
    got = windowed_run(TimeWindows.of_size_with_no_grace(10), store_type, RECORDS)
    assert got == {
        (0, 10): {"clicks": 1, "spent": 5},
        (10, 20): {"clicks": 1, "spent": 7},
    }


def test_cogroup_session_windowed_merges_both_streams_sessions(store_type):
    def merge(key, a, b):
        return {"clicks": a["clicks"] + b["clicks"], "spent": a["spent"] + b["spent"]}

    windows = SessionWindows.of_inactivity_gap_and_grace(5, 100)
    records = RECORDS + [("clicks", "c", 8)]  # bridges [1, 4] and [12, 13]
    got = windowed_run(windows, store_type, records, merger=merge)
    assert got == {(1, 13): {"clicks": 3, "spent": 12}}


def test_cogroup_sliding_windowed(store_type):
    windows = SlidingWindows.of_time_difference_and_grace(5, 100)
    got = windowed_run(windows, store_type, RECORDS)
    assert got == {
        (0, 5): {"clicks": 1, "spent": 5},  # records up to 5 share [0, 5]
        (2, 7): {"clicks": 0, "spent": 5},  # right window of 1
        (7, 12): {"clicks": 1, "spent": 0},
        (8, 13): {"clicks": 1, "spent": 7},
        (13, 18): {"clicks": 0, "spent": 7},  # right window of 12
    }
