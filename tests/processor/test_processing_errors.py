"""Exceptions in user code: processing_exception_handler "fail" or "log_and_continue".

The test driver runs the runtime's StreamTask, so the runtime behaves the same; the dead letter's
place in the transaction is tested against a real broker in tests/faults.
"""

from __future__ import annotations

import pytest

from fluvial import Named, StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import ConfigError, SerializationError
from fluvial.processor_api import Processor, PunctuationType
from fluvial.records import Record
from fluvial.testing import TopologyTestDriver

S, J, L = serdes.string(), serdes.json(), serdes.long()


def ratio(value):
    return {"ratio": value["a"] // value["b"]}  # raises on b == 0


def dividing():
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=J)
    stream.map_values(ratio, Named.as_("divide")).to("ratios", key_serde=S, value_serde=J)
    # A sibling branch of the same source: it gets every record, the bad one included.
    stream.map_values(lambda v: v["a"]).to("all", key_serde=S, value_serde=L)
    return builder.build()


CONTINUE = StreamsConfig(
    application_id="perr",
    processing_exception_handler="log_and_continue",
    dead_letter_topic="dead",
)


def test_by_default_a_raising_function_stops_processing():
    with TopologyTestDriver(dividing()) as driver:
        inp = driver.create_input_topic("in", S, J)
        with pytest.raises(ZeroDivisionError):
            inp.pipe_input("k", {"a": 1, "b": 0}, timestamp_ms=5)


def test_log_and_continue_skips_the_record_at_that_node_and_sends_a_dead_letter():
    with TopologyTestDriver(dividing(), CONTINUE) as driver:
        inp = driver.create_input_topic("in", S, J)
        inp.pipe_input("x", {"a": 6, "b": 3}, timestamp_ms=5)
        inp.pipe_input("bad", {"a": 1, "b": 0}, timestamp_ms=6, headers=[("trace", b"t-1")])
        inp.pipe_input("y", {"a": 8, "b": 2}, timestamp_ms=7)
        ratios = driver.create_output_topic("ratios", S, J).read_key_values()
        everything = driver.create_output_topic("all", S, L).read_key_values()
        [dead] = driver.create_output_topic("dead", S, J).read_records()
        metrics = driver.metrics()
    assert ratios == [("x", {"ratio": 2}), ("y", {"ratio": 4})]
    assert everything == [("x", 6), ("bad", 1), ("y", 8)], "the sibling branch is not skipped"
    # The record as it was consumed, its own headers kept, then what failed, where and from what.
    assert (dead.key, dead.value, dead.timestamp_ms) == ("bad", {"a": 1, "b": 0}, 6)
    headers = dict(dead.headers)
    assert headers["trace"] == b"t-1"
    assert headers["fluvial.error"] == b"ZeroDivisionError: integer division or modulo by zero"
    assert headers["fluvial.node"] == b"divide"
    assert (headers["fluvial.topic"], headers["fluvial.partition"], headers["fluvial.offset"]) == (
        b"in", b"0", b"1",
    )  # fmt: skip
    assert headers["fluvial.source"] == b"in-0@1"
    assert metrics["processing-errors"] == 1
    assert metrics["processing-errors:divide"] == 1


class Fussy(Processor):
    def process(self, record):
        if record.value < 0:
            raise ValueError(f"negative amount {record.value}")
        self.context.forward(record)


def test_a_processor_api_processor_downstream_of_a_repartition_is_covered_too():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=L)
        .select_key(lambda k, v: k.upper())
        .repartition(key_serde=S, value_serde=L)
        .process(Fussy, named=Named.as_("fussy"))
        .to("out", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(builder.build(), CONTINUE) as driver:
        inp = driver.create_input_topic("in", S, L)
        inp.pipe_records([("a", 1, 1), ("b", -2, 2), ("c", 3, 3)])
        assert driver.create_output_topic("out", S, L).read_key_values() == [("A", 1), ("C", 3)]
        [dead] = driver.create_output_topic("dead", S, L).read_records()
    headers = dict(dead.headers)
    assert (dead.key, dead.value) == ("B", -2), "the record as its node's topic held it"
    assert headers["fluvial.node"] == b"fussy"
    # It names the record the user wrote (the internal topic is deleted by a reset), and the
    # repartition record apart; the origin header itself stays inside fluvial.
    assert (headers["fluvial.topic"], headers["fluvial.partition"], headers["fluvial.offset"]) == (
        b"in",
        b"0",
        b"1",
    )
    assert headers["fluvial.source"] == b"in-0@1"
    assert b"-repartition-0@" in headers["fluvial.repartition"]
    assert "fluvial.origin" not in headers
    assert headers["fluvial.error"] == b"ValueError: negative amount -2"


def test_without_a_dead_letter_topic_the_record_is_logged_and_skipped(caplog):
    config = StreamsConfig(application_id="perr", processing_exception_handler="log_and_continue")
    with TopologyTestDriver(dividing(), config) as driver:
        inp = driver.create_input_topic("in", S, J)
        inp.pipe_input("bad", {"a": 1, "b": 0}, timestamp_ms=6)
        inp.pipe_input("y", {"a": 8, "b": 2}, timestamp_ms=7)
        assert driver.create_output_topic("ratios", S, J).read_key_values() == [("y", {"ratio": 4})]
        assert driver.producer_topics() == ["all", "ratios"]
    assert "skipping in-0@0 at divide: ZeroDivisionError" in caplog.text


def test_fluvial_own_errors_are_not_processing_errors():
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(lambda v: object()).to("out")
    with TopologyTestDriver(builder.build(), CONTINUE) as driver:
        inp = driver.create_input_topic("in", S, S)
        with pytest.raises(SerializationError, match="cannot be inferred"):
            inp.pipe_input("k", "v", timestamp_ms=1)


def test_an_unknown_handler_is_refused():
    with pytest.raises(ConfigError, match="processing_exception_handler must be one of fail, log"):
        StreamsConfig(processing_exception_handler="ignore")


class Ticking(Processor):
    def init(self, context):
        super().init(context)
        context.schedule(10, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, now_ms):
        if now_ms >= 20:
            raise RuntimeError(f"tick at {now_ms}")
        self.context.forward(Record("tick", now_ms, now_ms))

    def process(self, record):
        self.context.forward(record)


def test_a_punctuator_that_raises_is_skipped_with_a_dead_letter_of_its_node():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=L)
        .process(Ticking, named=Named.as_("ticking"))
        .to("out", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(builder.build(), CONTINUE) as driver:
        inp = driver.create_input_topic("in", S, L)
        inp.pipe_records([("a", 1, 0), ("b", 2, 25), ("c", 3, 26)])
        out = driver.create_output_topic("out", S, L).read_key_values()
        [dead] = driver.create_output_topic("dead", S, L).read_records()
        metrics = driver.metrics()
    # It fires at stream time 0, then at 25 (raising), and processing goes on.
    assert out == [("a", 1), ("tick", 0), ("b", 2), ("c", 3)]
    headers = dict(dead.headers)
    assert (dead.key, dead.value) == (None, None), "a punctuation has no consumed record"
    assert headers["fluvial.node"] == b"ticking"
    assert headers["fluvial.error"] == b"RuntimeError: tick at 25"
    assert "fluvial.topic" not in headers
    assert metrics["processing-errors:ticking"] == 1


def test_a_record_a_cache_flush_forwards_has_no_consumed_record_to_send():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .count()  # cached: its results are forwarded when the commit flushes the cache
        .to_stream()
        .map_values(lambda n: 10 // (n - 2), Named.as_("odd"))
        .to("out", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(builder.build(), CONTINUE) as driver:
        inp = driver.create_input_topic("in", S, S)
        for ts in range(3):
            inp.pipe_input("k", "v", timestamp_ms=ts)
        assert driver.create_output_topic("out", S, L).read_key_values() == [("k", -10), ("k", 10)]
        [dead] = driver.create_output_topic("dead", S, L).read_records()
    headers = dict(dead.headers)
    assert (dead.key, dead.value) == (None, None)
    assert headers["fluvial.node"] == b"odd"
    assert "fluvial.topic" not in headers, "the flush's record is no consumed record"


@pytest.mark.parametrize("dead_letter_topic", ["dead", None])
def test_repartition_records_carry_their_origin_only_for_a_dead_letter_topic(dead_letter_topic):
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=L)
        .select_key(lambda k, v: k.upper())
        .repartition(key_serde=S, value_serde=L, name="upper")
        .to("out", key_serde=S, value_serde=L)
    )
    config = StreamsConfig(
        application_id="perr",
        processing_exception_handler="log_and_continue",
        dead_letter_topic=dead_letter_topic,
    )
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in", S, L).pipe_records([("a", 1, 1), ("b", 2, 2)])
        internal = driver.create_output_topic("perr-upper-repartition", S, L).read_records()
        out = driver.create_output_topic("out", S, L).read_records()
    assert [(r.key, r.value) for r in internal] == [("A", 1), ("B", 2)]
    origins = [dict(r.headers).get("fluvial.origin") for r in internal]
    # The dead-letter path names the user's record through it; with no dead-letter topic
    # nothing reads it, and it is not written.
    assert origins == ([b"in:0:0", b"in:0:1"] if dead_letter_topic else [None, None])
    assert [dict(r.headers) for r in out] == [{}, {}], "output topics never see it"
