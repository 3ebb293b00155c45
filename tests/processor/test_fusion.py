"""Fused runs of stateless operators emit what node-by-node forwarding emits, in the same order.

A task runs a chain of stateless operators as one step per record (fluvial.processor.fusion).
These cases pin what a user can see of that: the order of outputs across sinks and branches,
the timestamp and headers a record keeps, what a processor between two runs sees, and errors.
"""

from __future__ import annotations

import pytest

from fluvial import Branched, KeyValue, Named, Record, StreamsBuilder, StreamsConfig, serdes
from fluvial.processor import ConsumedRecord, StreamTask
from fluvial.processor.fusion import FusableProcessor

S = serdes.string()


class Collector:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, topic, key, value, timestamp_ms, headers, partition) -> None:
        self.sent.append((topic, key.decode(), value.decode(), timestamp_ms, headers))


def run(build, records, *, headers=()) -> list[tuple]:
    builder = StreamsBuilder()
    build(builder.stream("in", key_serde=S, value_serde=S))
    config = StreamsConfig(application_id="app", cache_max_bytes=0)
    (sub,) = builder.build().subtopologies(config.application_id)
    collector = Collector()
    task = StreamTask((0, 0), sub, config, None, collector)
    task.add_records(
        "in",
        0,
        [
            ConsumedRecord(k.encode(), v.encode(), ts, offset, list(headers))
            for offset, (k, v, ts) in enumerate(records)
        ],
    )
    while task.process_batch(100, 0):
        pass
    return collector.sent


def test_a_node_with_two_children_feeds_both_record_by_record():
    def build(s):
        upper = s.map_values(lambda v: v.upper())
        upper.to("all")
        upper.filter(lambda k, v: v != "B").flat_map(lambda k, v: [(k, v), (k + "2", v)]).to("x")

    out = run(build, [("a", "a", 1), ("b", "b", 2), ("c", "c", 3)])
    assert [(t, k, v) for t, k, v, _, _ in out] == [
        ("all", "a", "A"), ("x", "a", "A"), ("x", "a2", "A"),
        ("all", "b", "B"),
        ("all", "c", "C"), ("x", "c", "C"), ("x", "c2", "C"),
    ]  # fmt: skip


def test_branches_and_merges_keep_record_order():
    def build(s):
        branches = (
            s.split(Named.as_("b-"))
            .branch(lambda k, v: v < "m", Branched.as_("low"))
            .default_branch(Branched.as_("high"))
        )
        low = branches["b-low"].map_values(lambda v: "low:" + v)
        high = branches["b-high"].select_key(lambda k, v: v)
        low.merge(high).peek(lambda k, v: None).to("out")

    out = run(build, [("1", "z", 5), ("2", "a", 6), ("3", "q", 7)])
    assert [(k, v, ts) for _, k, v, ts, _ in out] == [
        ("z", "z", 5), ("2", "low:a", 6), ("q", "q", 7)
    ]  # fmt: skip


def test_records_keep_their_timestamp_and_headers_through_a_run():
    out = run(
        lambda s: s.filter(lambda k, v: True).map(lambda k, v: KeyValue(v, k)).to("out"),
        [("k", "v", 42)],
        headers=[("trace", b"t-1")],
    )
    assert out == [("out", "v", "k", 42, [("trace", b"t-1")])]


class _Shift:
    """A user processor between two runs: logs what it sees, forwards with a later timestamp."""

    def __init__(self, log: list) -> None:
        self.log = log

    def init(self, context) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        c = self.context
        self.log.append((record.key, record.value, record.timestamp_ms, c.offset, c.timestamp_ms))
        self.context.forward(record.with_timestamp(record.timestamp_ms + 1000))

    def close(self) -> None:
        pass


def test_a_processor_between_runs_gets_the_run_s_record_and_feeds_the_next_run():
    log: list = []

    def build(s):
        (
            s.map(lambda k, v: (k + "!", v))
            .process(lambda: _Shift(log))
            .map_values(lambda v: v * 2)
            .to("out")
        )

    out = run(build, [("a", "x", 10), ("b", "y", 20)])
    assert log == [("a!", "x", 10, 0, 10), ("b!", "y", 20, 1, 20)]
    assert [(k, v, ts) for _, k, v, ts, _ in out] == [("a!", "xx", 1010), ("b!", "yy", 1020)]


def test_a_mapper_that_returns_no_pair_names_the_operation():
    with pytest.raises(TypeError, match=r"function given to map must return a KeyValue"):
        run(lambda s: s.map(lambda k, v: [k, v]).to("out"), [("a", "b", 1)])
    with pytest.raises(TypeError, match=r"function given to flat_map must return"):
        run(lambda s: s.flat_map(lambda k, v: [k]).to("out"), [("a", "b", 1)])


def test_an_operator_called_directly_runs_its_own_step():
    """process() of a fusable operator does the same work as its fused step."""
    from fluvial.dsl.stateless import MapProcessor

    forwarded: list = []

    class Context:
        def forward(self, record, child_name=None):
            forwarded.append(record)

    operator = MapProcessor(lambda k, v: (v, k))
    assert isinstance(operator, FusableProcessor)
    operator.init(Context())  # type: ignore[arg-type]
    operator.process(Record("k", "v", 7, [("h", b"1")], "t", 0, 3))
    assert forwarded == [Record("v", "k", 7, [("h", b"1")], "t", 0, 3)]
