"""Hopping windows and emit-on-window-close, as transcripts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fluvial import EmitStrategy, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.errors import ConfigError
from fluvial.processor import ConsumedRecord, StreamTask
from fluvial.state import ChangelogRecord
from fluvial.testing import TopologyTestDriver


def windowed_count(windows: TimeWindows, emit: EmitStrategy | None = None):
    builder = StreamsBuilder()
    windowed = builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
    grouped = windowed.group_by_key().windowed_by(windows)
    if emit is not None:
        grouped = grouped.emit_strategy(emit)
    grouped.count().to_stream().to("out", value_serde=serdes.long())
    return builder.build()


def run(topology, records, store_type="in_memory"):
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic(
            "out", serdes.time_windowed(serdes.string(), 10_000), serdes.long()
        )
        inp.pipe_records(records)
        revisions = [
            (r.key.key, r.key.window.start_ms, r.key.window.end_ms, r.value)
            for r in out.read_records()
        ]
        return revisions, driver.metrics()


def test_windows_for_a_timestamp_are_epoch_aligned():
    hopping = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    assert [(w.start_ms, w.end_ms) for w in hopping.windows_for(12)] == [(5, 15), (10, 20)]
    assert [(w.start_ms, w.end_ms) for w in hopping.windows_for(3)] == [(0, 10)]
    tumbling = TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=1))
    assert (tumbling.size_ms, tumbling.grace_ms) == (10_000, 1000)
    assert [(w.start_ms, w.end_ms) for w in tumbling.windows_for(10_000)] == [(10_000, 20_000)]


def test_hopping_window_record_updates_every_containing_window(store_type):
    windows = TimeWindows.of_size_and_grace(10_000, 0).advance_by(5_000)
    revisions, _ = run(windowed_count(windows), [("a", "x", 7_000), ("a", "x", 12_000)], store_type)
    assert revisions == [
        ("a", 0, 10_000, 1),
        ("a", 5_000, 15_000, 1),
        ("a", 5_000, 15_000, 2),
        ("a", 10_000, 20_000, 1),
    ]


def test_hopping_late_record_only_updates_windows_still_open():
    windows = TimeWindows.of_size_and_grace(10_000, 2_000).advance_by(5_000)
    revisions, metrics = run(windowed_count(windows), [("a", "x", 16_000), ("a", "x", 9_000)])
    # close time = 16000 - 2000 = 14000: [0,10000) closed (dropped), [5000,15000) open.
    assert revisions[-1] == ("a", 5_000, 15_000, 1)
    assert ("a", 0, 10_000, 1) not in revisions
    assert metrics["dropped-records"] == 1


def test_emit_on_window_close_gives_one_final_result_per_window(store_type):
    windows = TimeWindows.of_size_and_grace(10_000, 1_000)
    records = [
        ("a", "x", 1_000),
        ("a", "x", 2_000),
        ("b", "x", 9_000),
        ("a", "x", 10_500),  # stream time 10500: [0,10000) closes at 11000, not yet
        ("a", "x", 9_500),  # inside grace
        ("c", "x", 11_000),  # stream time 11000: [0,10000) closes now
        ("a", "x", 12_000),
        # Closes [10000,20000). Writing its own window [30000,40000) moves the store's retention
        # past [10000,20000) too: Kafka Streams, emitting after the write, loses those final
        # results (docs/semantics.md, "Emit on window close: no final result is lost").
        ("a", "x", 30_000),
    ]
    revisions, _ = run(windowed_count(windows, EmitStrategy.on_window_close()), records, store_type)
    assert revisions == [
        ("a", 0, 10_000, 3),
        ("b", 0, 10_000, 1),
        ("a", 10_000, 20_000, 2),
        ("c", 10_000, 20_000, 1),
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: TimeWindows.of_size_with_no_grace(0),
        lambda: TimeWindows.of_size_with_no_grace(10).advance_by(11),
        lambda: TimeWindows.of_size_and_grace(10, -1),
    ],
)
def test_invalid_windows_are_rejected(make):
    with pytest.raises((ValueError, ConfigError)):
        make()


def test_emit_on_close_after_resume_does_not_repeat_final_results():
    """A task rebuilt from the changelog and the committed stream time emits nothing twice."""
    # Grace keeps the closed window in the store, where a naive restart would find it again.
    topology = windowed_count(
        TimeWindows.of_size_and_grace(10_000, 5_000), EmitStrategy.on_window_close()
    )
    (sub,) = topology.subtopologies("app")
    (store,) = sub.stores
    changelog = f"app-{store.name}-changelog"
    sent: list = []

    class Collector:
        def send(self, topic, key, value, ts, headers, partition):
            sent.append((topic, key, value, ts))

    config = StreamsConfig(application_id="app")
    first = StreamTask((0, 0), sub, config, None, Collector())
    first.add_records(
        "in", 0, [ConsumedRecord(b"a", b"x", 1_000, 0), ConsumedRecord(b"a", b"x", 15_000, 1)]
    )
    while first.process_one():
        pass
    assert [k for t, k, _, _ in sent if t == "out"] == [b"a" + (0).to_bytes(8, "big")]

    second = StreamTask((0, 0), sub, config, None, Collector())
    second.open_stores()
    second.restore(
        store.name, [ChangelogRecord(k, v, ts) for t, k, v, ts in sent if t == changelog]
    )
    second.resume_stream_time(first.stream_time)
    sent.clear()
    second.add_records("in", 0, [ConsumedRecord(b"b", b"x", 15_500, 2)])
    while second.process_one():
        pass
    assert [k for t, k, _, _ in sent if t == "out"] == [], "[0, 10000) was final before the restart"
