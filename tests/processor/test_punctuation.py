"""Punctuation as in Kafka Streams: stream time and wall clock, and the timestamps of records
forwarded from a punctuator."""

from __future__ import annotations

from fluvial import Processor, PunctuationType, Record, StreamsBuilder, StreamsConfig, serdes
from fluvial.processor import ConsumedRecord, StreamTask
from fluvial.testing import TopologyTestDriver

S = serdes.string()


class Ticker(Processor):
    """Forwards one record per punctuation, stamped with the context's timestamp."""

    def __init__(self, kind: PunctuationType, interval: int, seen: list) -> None:
        self.kind = kind
        self.interval = interval
        self.seen = seen

    def init(self, context) -> None:
        super().init(context)
        context.schedule(self.interval, self.kind, self.tick)

    def process(self, record: Record) -> None:
        pass

    def tick(self, now: int) -> None:
        ctx = self.context
        self.seen.append((now, ctx.timestamp_ms, ctx.topic, ctx.partition, ctx.offset))
        self.context.forward(Record("tick", str(now), ctx.timestamp_ms))


def ticker_topology(kind: PunctuationType, interval: int, seen: list):
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .process(lambda: Ticker(kind, interval, seen))
        .map_values(lambda v: f"tick@{v}")  # downstream DSL nodes keep the timestamp
        .to("out", key_serde=S, value_serde=S)
    )
    return builder.build()


def test_stream_time_punctuation_forwards_records_at_stream_time():
    seen: list = []
    topology = ticker_topology(PunctuationType.STREAM_TIME, 10, seen)
    with TopologyTestDriver(topology) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        for ts in (3, 9, 5, 10, 47, 48):
            inp.pipe_input("k", "v", timestamp_ms=ts)
        # Fires at the first stream time (grid from 0), then once per crossed grid point, with
        # the stream time it fired at (a jump from 10 to 47 gives one punctuation, not three).
        assert [s[0] for s in seen] == [3, 10, 47]
        assert all(s[2:] == (None, None, None) for s in seen), "no input record in a punctuator"
        assert [(r.value, r.timestamp_ms) for r in out.read_records()] == [
            ("tick@3", 3),
            ("tick@10", 10),
            ("tick@47", 47),
        ]


def test_wall_clock_punctuation_starts_one_interval_after_the_initial_wall_clock():
    seen: list = []
    topology = ticker_topology(PunctuationType.WALL_CLOCK_TIME, 5_000, seen)
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000_000) as driver:
        out = driver.create_output_topic("out", S, S)
        assert seen == [], "nothing is due at start"
        driver.advance_wall_clock_time(4_999)
        assert seen == []
        driver.advance_wall_clock_time(1)
        driver.advance_wall_clock_time(12_000)  # a long pause: one punctuation, back on the grid
        driver.advance_wall_clock_time(3_000)
        assert [s[0] for s in seen] == [1_005_000, 1_017_000, 1_020_000]
        assert [r.timestamp_ms for r in out.read_records()] == [1_005_000, 1_017_000, 1_020_000]


def test_a_task_without_a_known_wall_clock_anchors_schedules_at_the_first_reported_time():
    seen: list = []
    topology = ticker_topology(PunctuationType.WALL_CLOCK_TIME, 1_000, seen)
    (sub,) = topology.subtopologies("app")

    class Sink:
        def send(self, *args) -> None:
            pass

    task = StreamTask((0, 0), sub, StreamsConfig(application_id="app"), None, Sink())
    task.initialize()
    now = 1_700_000_000_000  # a runtime reports epoch milliseconds
    assert not task.punctuate_wall_clock(now), "scheduled in init: due one interval later"
    task.add_records("in", 0, [ConsumedRecord(b"k", b"v", 1, 0)])
    assert task.process_one(now + 999)
    assert not task.punctuate_wall_clock(now + 999)
    assert task.punctuate_wall_clock(now + 1_000)
    assert [s[0] for s in seen] == [now + 1_000]
