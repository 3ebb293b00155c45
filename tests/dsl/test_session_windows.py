"""Session windows: sessions merge when a late record bridges them; replaced sessions are
tombstoned; grace decides when a session stops accepting records."""

from __future__ import annotations

import pytest

from fluvial import Materialized, SessionWindows, StreamsBuilder, Suppressed, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def session_count(windows: SessionWindows, suppress: bool = False, caching: bool = True):
    builder = StreamsBuilder()
    m = Materialized().with_caching_enabled() if caching else Materialized().with_caching_disabled()
    table = (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .count(materialized=m)
    )
    if suppress:
        table = table.suppress(Suppressed.until_window_closes())
    table.to_stream().to("out", value_serde=serdes.long())
    return builder.build()


def read(out):
    return [
        (r.key.key, r.key.window.start_ms, r.key.window.end_ms, r.value, r.timestamp_ms)
        for r in out.read_records()
    ]


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_session_merge_by_late_record_emits_tombstones_for_replaced_sessions(store_type, caching):
    # The driver commits after every record, so the cache folds only within one record.
    windows = SessionWindows.of_inactivity_gap_and_grace(10, 20)
    with TopologyTestDriver(
        session_count(windows, caching=caching), store_type=store_type
    ) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", serdes.session_windowed(S), serdes.long())
        transcript = [
            (("a", 0), [("a", 0, 0, 1, 0)]),
            (("a", 5), [("a", 0, 0, None, 0), ("a", 0, 5, 2, 5)]),  # extends: old key replaced
            (("a", 30), [("a", 30, 30, 1, 30)]),
            (("a", 18), [("a", 18, 18, 1, 18)]),  # within no session's gap: a new one
            # Late record within the gap of both [18,18] and [30,30]: one session remains.
            (("a", 20), [("a", 18, 18, None, 18), ("a", 30, 30, None, 30), ("a", 18, 30, 3, 30)]),
            # Bridges [0,5] and [18,30]: everything so far is one session of six records.
            (("a", 12), [("a", 0, 5, None, 5), ("a", 18, 30, None, 30), ("a", 0, 30, 6, 30)]),
            (("a", 100), [("a", 100, 100, 1, 100)]),
            (("a", 25), []),  # would merge into [0, 30], which closed at 100 - 20: dropped
            (("b", 95), [("b", 95, 95, 1, 95)]),  # keys have their own sessions
            (("a", 95), [("a", 100, 100, None, 100), ("a", 95, 100, 2, 100)]),
            # Inside a session: as in Kafka Streams, the session is still replaced (a tombstone,
            # then the new aggregate under the same bounds); a cache folds the two into one.
            (("a", 97), [("a", 95, 100, 3, 100)] if caching
                        else [("a", 95, 100, None, 100), ("a", 95, 100, 3, 100)]),
        ]  # fmt: skip
        for (key, ts), expected in transcript:
            inp.pipe_input(key, "x", timestamp_ms=ts)
            assert read(out) == expected, (key, ts)
        assert driver.metrics()["dropped-records"] == 1
        (store_name,) = driver.topology.stores
        sessions = {
            (w.key, w.window.start_ms, w.window.end_ms): n
            for w, n in driver.get_session_store(store_name).all()
        }
        # [0, 30] is past gap + grace: no record can merge into it, so the store let it go.
        assert sessions == {("a", 95, 100): 3, ("b", 95, 95): 1}


def test_session_aggregate_with_merger_and_reduce(store_type):
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    # Grace keeps [1, 1] mergeable when the bridging record arrives at stream time 11.
    windows = SessionWindows.of_inactivity_gap_and_grace(5, 10)
    grouped.windowed_by(windows).aggregate(
        lambda: "", lambda k, v, agg: agg + v, lambda k, a, b: a + b
    ).to_stream().to("agg", value_serde=S)
    grouped.windowed_by(windows).reduce(lambda a, b: a + b).to_stream().to("red", value_serde=S)
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_records([("k", "a", 1), ("k", "c", 11), ("k", "b", 6)])  # 6 bridges the two
        for topic in ("agg", "red"):
            out = driver.create_output_topic(topic, serdes.session_windowed(S), S)
            final = out.read_key_values_to_map()
            assert {(w.window.start_ms, w.window.end_ms): v for w, v in final.items()} == {
                (1, 11): "acb"
            }, topic


def test_suppressed_sessions_emit_once_after_end_plus_gap_plus_grace(store_type):
    windows = SessionWindows.of_inactivity_gap_and_grace(10, 5)
    with TopologyTestDriver(session_count(windows, suppress=True), store_type=store_type) as d:
        inp = d.create_input_topic("in", S, S)
        out = d.create_output_topic("out", serdes.session_windowed(S), serdes.long())
        inp.pipe_records([("a", "x", 0), ("a", "x", 8), ("a", "x", 12)])
        assert read(out) == []
        # 12 + 5: a record of "a" at 17 would still extend the session, so it is not final.
        inp.pipe_input("z", "x", timestamp_ms=17)
        assert read(out) == []
        inp.pipe_input("z", "x", timestamp_ms=26)
        assert read(out) == []
        inp.pipe_input("z", "x", timestamp_ms=27)  # 12 + gap 10 + grace 5: [0, 12] is final
        assert read(out) == [("a", 0, 12, 3, 12)]


def test_session_store_changelog_keys_carry_end_then_start():
    windows = SessionWindows.of_inactivity_gap_with_no_grace(10)
    with TopologyTestDriver(session_count(windows)) as driver:
        driver.create_input_topic("in", S, S).pipe_input("a", "x", timestamp_ms=7)
        (store_name,) = driver.topology.stores
        (record,) = driver.changelog(store_name)
        assert record.key == b"a" + (7).to_bytes(8, "big") + (7).to_bytes(8, "big")
