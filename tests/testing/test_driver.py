"""The TopologyTestDriver's own contract: topics, clocks, stores, metrics, lifecycle."""

from __future__ import annotations

import pytest

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.testing import TopologyTestDriver

S, L = serdes.string(), serdes.long()


def counting():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to("out", value_serde=L)
    )
    return builder.build()


def test_output_topic_reads_consume_in_emission_order():
    with TopologyTestDriver(counting()) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, L)
        inp.pipe_key_value_list([("a", "x"), ("b", "x"), ("a", "x")], timestamp_ms=10, advance_ms=5)
        assert out.queue_size() == 3
        first = out.read_record()
        assert (first.key, first.value, first.timestamp_ms, first.topic) == ("a", 1, 10, "out")
        assert out.read_key_values_to_map() == {"b": 1, "a": 2}
        assert out.is_empty()
        with pytest.raises(LookupError, match="no record left"):
            out.read_record()


def test_records_without_timestamp_use_the_topic_clock():
    with TopologyTestDriver(counting()) as driver:
        inp = driver.create_input_topic("in", S, S, start_timestamp_ms=100, auto_advance_ms=10)
        out = driver.create_output_topic("out", S, L)
        inp.pipe_input("a", "x")
        inp.pipe_input("a", "x")
        inp.advance_time(1000)
        inp.pipe_input("a", "x")
        assert [r.timestamp_ms for r in out.read_records()] == [100, 110, 1120]


def test_store_views_metrics_and_unknown_names(store_type):
    with TopologyTestDriver(
        counting(), StreamsConfig(application_id="drv"), store_type=store_type
    ) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_records([("a", "x", 5), ("a", "x", 3), ("b", "x", 4)])
        store = driver.get_key_value_store("counts")
        assert store.to_dict() == {"a": 2, "b": 1}
        assert store.get_with_timestamp("a").timestamp_ms == 5, "max timestamp of the key's records"
        assert driver.metrics()["records-processed"] == 3
        with pytest.raises(KeyError, match="no state store named 'nope'"):
            driver.get_key_value_store("nope")
        with pytest.raises(ValueError, match="does not read topic 'elsewhere'"):
            driver.create_input_topic("elsewhere", S, S)


def test_output_topic_read_by_another_subtopology_is_fed_back():
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(str.upper).to("middle")
    builder.stream("middle", key_serde=S, value_serde=S).map_values(lambda v: v + "!").to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp_ms=1)
        assert driver.create_output_topic("middle", S, S).read_key_values() == [("k", "V")]
        assert driver.create_output_topic("out", S, S).read_key_values() == [("k", "V!")]


def test_driver_refuses_use_after_close():
    driver = TopologyTestDriver(counting())
    inp = driver.create_input_topic("in", S, S)
    driver.close()
    with pytest.raises(RuntimeError, match="closed"):
        inp.pipe_input("a", "x", timestamp_ms=1)
