"""suppress(): final results once windows close, time-limited holding, and full buffers."""

from __future__ import annotations

import pytest

from fluvial import StreamsBuilder, Suppressed, TimeWindows, serdes
from fluvial.dsl import BufferConfig
from fluvial.errors import BufferFullError, TopologyError
from fluvial.testing import TopologyTestDriver

SIZE, GRACE = 10_000, 2_000


def final_counts(buffer: BufferConfig | None = None):
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE, GRACE))
        .count()
        .suppress(Suppressed.until_window_closes(buffer))
        .to_stream()
        .to("out")
    )
    return builder.build()


# (key, timestamp) in, then the final results that record releases (key, window start, count).
FINAL_TRANSCRIPT = [
    (("a", 1_000), []),
    (("a", 5_000), []),
    (("b", 9_000), []),
    (("a", 11_000), []),  # stream time 11000 < window end 10000 + grace 2000
    (("a", 8_000), []),  # late, inside grace: counted, still nothing emitted
    (("b", 11_999), []),  # 11999: one ms short of 12000
    (("a", 12_000), [("a", 0, 3), ("b", 0, 1)]),  # stream time reaches end + grace
    (("a", 3_000), []),  # after close: dropped, and nothing re-emitted
    (("c", 25_000), [("a", 10_000, 2), ("b", 10_000, 1)]),
]


def test_until_window_closes_emits_one_final_result_per_window_never_before(store_type):
    with TopologyTestDriver(final_counts(), store_type=store_type) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic(
            "out", serdes.time_windowed(serdes.string(), SIZE), serdes.long()
        )
        for (key, ts), expected in FINAL_TRANSCRIPT:
            inp.pipe_input(key, "v", timestamp_ms=ts)
            got = [(r.key.key, r.key.window.start_ms, r.value) for r in out.read_records()]
            assert got == expected, f"after {key}@{ts}"
        assert driver.metrics()["dropped-records"] == 1


def test_until_window_closes_with_full_shut_down_buffer_raises_clear_error():
    topology = final_counts(BufferConfig.max_records(2).shut_down_when_full())
    with (
        pytest.raises(BufferFullError, match="max_records=2"),
        TopologyTestDriver(topology) as driver,
    ):
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        for key in "abc":
            inp.pipe_input(key, "v", timestamp_ms=1_000)


def test_until_window_closes_refuses_an_emit_early_buffer():
    with pytest.raises(ValueError, match="final results"):
        Suppressed.until_window_closes(BufferConfig.max_records(5).emit_early_when_full())


def time_limited(limit_ms: int, buffer: BufferConfig | None = None):
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count(materialized=None)
        .suppress(Suppressed.until_time_limit(limit_ms, buffer))
        .to_stream()
        .to("out")
    )
    return builder.build()


def test_until_time_limit_holds_updates_then_emits_latest():
    with TopologyTestDriver(time_limited(1_000)) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic("out", serdes.string(), serdes.long())
        transcript = [
            (("a", 0), []),
            (("a", 400), []),
            (("b", 900), []),
            (("a", 999), []),
            (("b", 1_000), [("a", 3)]),  # a was first buffered at 0: due at 1000
            (("b", 1_900), [("b", 3)]),  # b first buffered at 900: due at 1900, this one included
            (("a", 2_000), []),
        ]
        for (key, ts), expected in transcript:
            inp.pipe_input(key, "v", timestamp_ms=ts)
            assert out.read_key_values() == expected, f"after {key}@{ts}"


def test_until_time_limit_full_buffer_emits_early():
    buffer = BufferConfig.max_records(1).emit_early_when_full()
    with TopologyTestDriver(time_limited(60_000, buffer)) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic("out", serdes.string(), serdes.long())
        inp.pipe_input("a", "v", timestamp_ms=0)
        inp.pipe_input("a", "v", timestamp_ms=1)
        assert out.is_empty()
        inp.pipe_input("b", "v", timestamp_ms=2)  # two keys > max 1: the oldest goes early
        assert out.read_key_values() == [("a", 2)]


def test_until_time_limit_full_buffer_can_shut_down():
    buffer = BufferConfig.max_bytes(10).shut_down_when_full()
    topology = time_limited(60_000, buffer)
    with pytest.raises(BufferFullError, match="shut down"), TopologyTestDriver(topology) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        inp.pipe_input("a-long-key", "v", timestamp_ms=0)


def test_until_window_closes_on_an_unwindowed_table_fails_at_build():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count()
        .suppress(Suppressed.until_window_closes())
    )
    with pytest.raises(TopologyError, match="needs a windowed table"):
        builder.build()
