"""The Processor API: a user processor with a state store and both kinds of punctuation."""

from __future__ import annotations

import pytest

from fluvial import Processor, PunctuationType, Record, StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import TopologyError
from fluvial.processor import Stores
from fluvial.testing import TopologyTestDriver

S, L = serdes.string(), serdes.long()


class CountAndReport(Processor):
    """Counts per key in a store; reports all counts on stream time and wall-clock punctuations."""

    def __init__(self, log: list) -> None:
        self.log = log

    def init(self, context) -> None:
        super().init(context)
        self.store = context.get_state_store("counts")
        context.schedule(1000, PunctuationType.STREAM_TIME, self.on_stream_time)
        self.wall = context.schedule(5000, PunctuationType.WALL_CLOCK_TIME, self.on_wall_clock)

    def process(self, record: Record) -> None:
        self.log.append(("meta", self.context.topic, self.context.partition, self.context.offset))
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count, record.timestamp_ms)

    def on_stream_time(self, now: int) -> None:
        self.log.append(("stream", now))
        for key, count in self.store.all():
            self.context.forward(Record(key, count, now))

    def on_wall_clock(self, now: int) -> None:
        self.log.append(("wall", now))
        if now >= 10_000:
            self.wall.cancel()


def topology(log: list):
    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder("counts", S, L))
    builder.stream("in", key_serde=S, value_serde=S).process(
        lambda: CountAndReport(log), "counts"
    ).to("out", key_serde=S, value_serde=L)
    return builder.build()


def test_processor_with_store_and_stream_time_punctuation(store_type):
    log: list = []
    with TopologyTestDriver(
        topology(log), StreamsConfig(application_id="papi"), store_type=store_type
    ) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, L)
        inp.pipe_input("a", "x", timestamp_ms=500)  # first stream time: punctuates at once
        inp.pipe_input("a", "x", timestamp_ms=900)  # next punctuation is due at 1000
        inp.pipe_input("b", "x", timestamp_ms=400)  # out of order: stream time stays 900
        inp.pipe_input("b", "x", timestamp_ms=3500)  # jump: one punctuation, not three
        assert [e for e in log if e[0] == "stream"] == [("stream", 500), ("stream", 3500)]
        assert [(r.key, r.value, r.timestamp_ms) for r in out.read_records()] == [
            ("a", 1, 500),
            ("a", 2, 3500),
            ("b", 2, 3500),
        ]
        assert ("meta", "in", 0, 2) in log
        assert driver.get_key_value_store("counts").to_dict() == {"a": 2, "b": 2}
        changelog = driver.changelog("counts")
        assert [(r.topic, r.key, r.value, r.timestamp_ms) for r in changelog][-1] == (
            "papi-counts-changelog",
            b"b",
            (2).to_bytes(8, "big"),
            3500,
        )


def test_wall_clock_punctuation_follows_the_mocked_clock_and_can_cancel():
    log: list = []
    with TopologyTestDriver(topology(log)) as driver:
        driver.advance_wall_clock_time(4_999)
        assert [e for e in log if e[0] == "wall"] == []
        driver.advance_wall_clock_time(1)
        driver.advance_wall_clock_time(12_000)  # missed several: fires once, at the new time
        driver.advance_wall_clock_time(5_000)  # cancelled at 17000 >= 10000
        assert [e for e in log if e[0] == "wall"] == [("wall", 5_000), ("wall", 17_000)]
        assert not [e for e in log if e[0] == "stream"], "no stream time without records"


def test_store_must_be_connected_to_be_used():
    class Sneaky(Processor):
        def init(self, context) -> None:
            context.get_state_store("counts")

    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder("counts", S, L))
    builder.stream("in").process(Sneaky, "counts")
    builder.stream("other").process(Sneaky)
    with pytest.raises(TopologyError, match="not connected"):
        TopologyTestDriver(builder.build())


def test_forward_to_named_child_only():
    class Router(Processor):
        def process(self, record: Record) -> None:
            self.context.forward(record, child_name="to-b" if record.key == "b" else "to-a")

    from fluvial.topology import InternalTopologyBuilder

    itb = InternalTopologyBuilder()
    itb.add_source("src", ["in"], S, S)
    itb.add_processor("router", Router, ["src"])
    itb.add_sink("to-a", "a", ["router"], S, S)
    itb.add_sink("to-b", "b", ["router"], S, S)
    with TopologyTestDriver(itb.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_key_value_list([("a", "1"), ("b", "2")], timestamp_ms=1)
        assert driver.create_output_topic("a", S, S).read_key_values() == [("a", "1")]
        assert driver.create_output_topic("b", S, S).read_key_values() == [("b", "2")]
