"""Sliding windows: both bounds inclusive, windows created by records, as in Kafka Streams."""

from __future__ import annotations

import random

import pytest

from fluvial import SlidingWindows, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def sliding_count(windows: SlidingWindows):
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .count()
        .to_stream()
        .to("out", value_serde=serdes.long())
    )
    return builder.build()


def run(windows: SlidingWindows, records, store_type: str):
    with TopologyTestDriver(sliding_count(windows), store_type=store_type) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", windows.windowed_key_serde(S), serdes.long())
        steps = []
        for key, ts in records:
            inp.pipe_input(key, "x", timestamp_ms=ts)
            steps.append(
                [(r.key.key, r.key.window.start_ms, r.key.window.end_ms, r.value)
                 for r in out.read_records()]
            )  # fmt: skip
        return steps, driver.metrics()


def test_sliding_window_transcript_with_out_of_order_and_late_records(store_type):
    windows = SlidingWindows.of_time_difference_and_grace(10, 5)
    records = [("a", 20), ("a", 25), ("a", 22), ("a", 40), ("a", 14), ("a", 26)]
    steps, metrics = run(windows, records, store_type)
    assert steps == [
        [("a", 10, 20, 1)],  # the record's left window [t - 10, t]
        # As in Kafka Streams: the right window of 20 first, then 25's new left window.
        [("a", 21, 31, 1), ("a", 15, 25, 2)],
        # Out of order: update the windows containing 22 (latest start first, as Kafka Streams
        # visits them), then create its left and right windows from windows holding exactly
        # the same records.
        [("a", 21, 31, 2), ("a", 15, 25, 3), ("a", 12, 22, 2), ("a", 23, 33, 1)],
        [("a", 30, 40, 1)],
        [],  # 14: every window containing it ended at or before 40 - 5: dropped
        # 26: its windows up to [21, 31] are closed; only 25's right window [26, 36] is open.
        [("a", 26, 36, 1)],
    ]
    assert metrics["dropped-records"] == 1


def test_records_before_the_time_difference_share_the_window_from_zero(store_type):
    windows = SlidingWindows.of_time_difference_with_no_grace(10)
    steps, _ = run(windows, [("a", 3), ("a", 7), ("a", 2)], store_type)
    assert steps == [
        [("a", 0, 10, 1)],
        [("a", 4, 14, 1), ("a", 0, 10, 2)],  # 3's right window, then [0, 10]
        [("a", 3, 13, 2), ("a", 0, 10, 3)],  # 2's right window [3, 13] copies [0, 10]
    ]


def oracle(records: list[tuple[str, int]], d: int) -> dict[tuple[str, int], int]:
    """Brute force: the windows that should exist per key, and how many records each holds."""
    expected: dict[tuple[str, int], int] = {}
    for key in {k for k, _ in records}:
        times = [t for k, t in records if k == key]
        starts = {max(0, t - d) for t in times}
        starts |= {t + 1 for t in times if any(t < u <= t + 1 + d for u in times)}
        for start in starts:
            expected[(key, start)] = sum(1 for t in times if start <= t <= start + d)
    return expected


@pytest.mark.parametrize("seed", range(12))
def test_sliding_counts_match_a_brute_force_recount(store_type, seed):
    rng = random.Random(seed)
    d = rng.choice([5, 20, 50])
    records, clock = [], 0
    for _ in range(120):
        clock += rng.randint(0, 15)
        late = rng.random() < 0.3  # a third arrive out of order, some by more than d
        ts = max(0, clock - rng.randint(0, 3 * d)) if late else clock
        records.append((rng.choice("ab"), ts))
    windows = SlidingWindows.of_time_difference_and_grace(d, 100_000)  # nothing is dropped
    steps, metrics = run(windows, records, store_type)
    final: dict[tuple[str, int], int] = {}
    for step in steps:
        for key, start, end, count in step:
            assert end == start + d
            final[(key, start)] = count
    assert final == oracle(records, d)
    assert metrics.get("dropped-records", 0) == 0


def test_in_order_records_count_with_no_grace_and_emit_on_close(store_type):
    from fluvial import EmitStrategy

    windows = SlidingWindows.of_time_difference_with_no_grace(10)
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .emit_strategy(EmitStrategy.on_window_close())
        .count()
        .to_stream()
        .to("out", value_serde=serdes.long())
    )
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", windows.windowed_key_serde(S), serdes.long())
        inp.pipe_records([("a", "x", 20), ("a", "x", 25)])
        got = [(r.key.key, r.key.window.start_ms, r.value) for r in out.read_records()]
        assert got == [("a", 10, 1)], "[10, 20] ends before 25 - 0: final"
        inp.pipe_input("z", "x", 30)  # [15, 25] closes; [21, 31] (ends at 31) stays open
        got = [(r.key.key, r.key.window.start_ms, r.value) for r in out.read_records()]
        assert got == [("a", 15, 2)]
        inp.pipe_input("z", "x", 42)
        got = [(r.key.key, r.key.window.start_ms, r.value) for r in out.read_records()]
        assert got == [("z", 20, 1), ("a", 21, 1)]
