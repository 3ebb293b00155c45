"""Windowed stream-stream joins as transcripts: in and out of order, in and out of the window."""

from __future__ import annotations

import pytest

from fluvial import JoinWindows, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()
WINDOWS = JoinWindows.of_time_difference_and_grace(10, 5)


def join_topology(kind: str, windows: JoinWindows = WINDOWS):
    builder = StreamsBuilder()
    left = builder.stream("L", key_serde=S, value_serde=S)
    right = builder.stream("R", key_serde=S, value_serde=S)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    join(right, lambda a, b: f"{a}+{b}", windows).to("out", value_serde=S)
    return builder.build()


# Join window: right records within 10 ms of a left record, grace 5 ms.
# (topic, key, value, ts) -> expected (key, value, ts) per join kind.
TRANSCRIPT = [
    (("L", "k", "a1", 0), {}),
    (("R", "k", "b1", 10), {"all": [("k", "a1+b1", 10)]}),  # at the window's edge: joins
    (("L", "k", "a2", 30), {}),
    (("R", "x", "d1", 45), {}),  # a2's window closes once stream time passes 30+10+5
    (("R", "x", "d2", 46), {"left": [("k", "a2+None", 30)], "outer": [("k", "a2+None", 30)]}),
    (("R", "k", "b2", 100), {"outer": [("x", "None+d1", 45), ("x", "None+d2", 46)]}),
    (("L", "k", "a3", 95), {"all": [("k", "a3+b2", 100)]}),  # out of order, inside the window
    # Its window ended (at 50) before it arrived: nothing to wait for, so left and outer joins
    # emit it unmatched at once, as Kafka Streams does (checked in tests/reference).
    (("L", "k", "a4", 40), {"left": [("k", "a4+None", 40)], "outer": [("k", "a4+None", 40)]}),
    (("L", "k", None, 150), {}),  # null values never join
    (("L", "k", "a5", 200), {}),  # b2 found a partner, so it is never emitted alone
    (("R", "z", "e1", 300), {"left": [("k", "a5+None", 200)], "outer": [("k", "a5+None", 200)]}),
]


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_stream_stream_join_transcript(store_type, kind):
    with TopologyTestDriver(join_topology(kind), store_type=store_type) as driver:
        inputs = {t: driver.create_input_topic(t, S, S) for t in ("L", "R")}
        out = driver.create_output_topic("out", S, S)
        for (topic, key, value, ts), expected in TRANSCRIPT:
            inputs[topic].pipe_input(key, value, timestamp_ms=ts)
            got = [(r.key, r.value, r.timestamp_ms) for r in out.read_records()]
            assert got == expected.get("all", expected.get(kind, [])), (topic, key, value, ts)
        # Only the null value is dropped: a late record is joined or emitted, never dropped.
        assert driver.metrics()["dropped-records"] == 1


@pytest.mark.parametrize("kind", ["left", "outer"])
def test_left_and_outer_joins_never_emit_a_result_later_contradicted(store_type, kind):
    """The spurious-result fix: a partner arriving late (but in the window) is waited for."""
    with TopologyTestDriver(join_topology(kind), store_type=store_type) as driver:
        left = driver.create_input_topic("L", S, S)
        right = driver.create_input_topic("R", S, S)
        out = driver.create_output_topic("out", S, S)
        left.pipe_input("k", "a", timestamp_ms=100)
        right.pipe_input("other", "o", timestamp_ms=114)  # stream time moves, window still open
        right.pipe_input("k", "b", timestamp_ms=99)  # out of order, still in both windows
        right.pipe_input("other", "o2", timestamp_ms=500)  # closes every window
        results = [(r.key, r.value) for r in out.read_records() if r.key == "k"]
        assert results == [("k", "a+b")]


def test_duplicate_keys_and_timestamps_all_join(store_type):
    with TopologyTestDriver(join_topology("inner"), store_type=store_type) as driver:
        left = driver.create_input_topic("L", S, S)
        right = driver.create_input_topic("R", S, S)
        out = driver.create_output_topic("out", S, S)
        left.pipe_input("k", "a1", timestamp_ms=5)
        left.pipe_input("k", "a2", timestamp_ms=5)
        right.pipe_input("k", "b", timestamp_ms=7)
        right.pipe_input("k", "c", timestamp_ms=7)
        assert out.read_values() == ["a1+b", "a2+b", "a1+c", "a2+c"]


def test_asymmetric_window_with_before_and_after(store_type):
    windows = JoinWindows.of_time_difference_and_grace(0, 100).after(10)  # right in [t, t+10]
    with TopologyTestDriver(join_topology("inner", windows), store_type=store_type) as driver:
        left = driver.create_input_topic("L", S, S)
        right = driver.create_input_topic("R", S, S)
        out = driver.create_output_topic("out", S, S)
        left.pipe_input("k", "a", timestamp_ms=50)
        right.pipe_input("k", "early", timestamp_ms=49)  # before the left record: no
        right.pipe_input("k", "late", timestamp_ms=60)  # within 10 after: yes
        right.pipe_input("k", "too-late", timestamp_ms=61)
        assert out.read_values() == ["a+late"]


def test_join_topology_has_two_window_stores_and_is_copartitioned():
    topology = join_topology("outer")
    stores = sorted(topology.stores)
    assert len(stores) == 3 and any("OUTERSHARED" in s for s in stores)
    windowed = [s for s in topology.stores.values() if s.kind == "window"]
    assert all(s.retain_duplicates and not s.caching_enabled for s in windowed)
    assert topology.copartition_groups("app") == [{"L", "R"}]
    assert topology.subtopology_count == 1
