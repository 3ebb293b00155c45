"""Versioned tables: history retention, as-of stream-table joins, out-of-order updates."""

from __future__ import annotations

import pytest

from fluvial import Materialized, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def rates_topology(left: bool):
    builder = StreamsBuilder()
    rates = builder.table(
        "rates", materialized=Materialized.as_versioned("rates", 1_000),
        key_serde=S, value_serde=S,
    )  # fmt: skip
    rates.to_stream().to("rate-changes", value_serde=S)
    trades = builder.stream("trades", key_serde=S, value_serde=S)
    join = trades.left_join if left else trades.join
    join(rates, lambda trade, rate: f"{trade}@{rate}").to("out", value_serde=S)
    return builder.build()


TRANSCRIPT = [
    # (topic, value, timestamp) for key "k" -> (joined results, rate changes emitted)
    (("rates", "r1", 10), [], ["r1"]),
    (("rates", "r2", 20), [], ["r2"]),
    (("trades", "t1", 15), ["t1@r1"], []),  # as of 15: r1, although r2 is newer
    (("trades", "t2", 25), ["t2@r2"], []),
    (("trades", "t3", 5), {"inner": [], "left": ["t3@None"]}, []),  # before any rate
    (("rates", "r0", 3), [], []),  # older than the latest version: history only, no revision
    (("trades", "t4", 5), ["t4@r0"], []),
    (("rates", None, 30), [], [None]),  # a tombstone version: gone from 30 on
    (("trades", "t5", 35), {"inner": [], "left": ["t5@None"]}, []),
    (("trades", "t6", 22), ["t6@r2"], []),  # still r2 as of 22
]


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_stream_joins_versioned_table_as_of_record_time(store_type, kind):
    with TopologyTestDriver(rates_topology(kind == "left"), store_type=store_type) as driver:
        inputs = {t: driver.create_input_topic(t, S, S) for t in ("rates", "trades")}
        out = driver.create_output_topic("out", S, S)
        changes = driver.create_output_topic("rate-changes", S, S)
        for (topic, value, ts), joined, emitted in TRANSCRIPT:
            inputs[topic].pipe_input("k", value, timestamp_ms=ts)
            want = joined[kind] if isinstance(joined, dict) else joined
            assert out.read_values() == want, (topic, value, ts)
            assert changes.read_values() == emitted, (topic, value, ts)
        store = driver.get_versioned_key_value_store("rates")
        assert store.get("k") is None
        assert store.get("k", 15).value == "r1"
        assert (store.get("k", 4).value, store.get("k", 4).valid_to_ms) == ("r0", 10)


def test_versioned_store_spec_has_history_and_no_cache():
    spec = rates_topology(False).stores["rates"]
    assert spec.kind == "versioned_key_value"
    assert spec.history_retention_ms == 1_000 and not spec.caching_enabled
    assert spec.changelog_configs()["min.compaction.lag.ms"] == str(1_000 + 86_400_000)


def test_updates_older_than_history_retention_are_dropped(store_type):
    with TopologyTestDriver(rates_topology(True), store_type=store_type) as driver:
        rates = driver.create_input_topic("rates", S, S)
        trades = driver.create_input_topic("trades", S, S)
        out = driver.create_output_topic("out", S, S)
        rates.pipe_input("k", "new", timestamp_ms=5_000)
        rates.pipe_input("k", "ancient", timestamp_ms=1_000)  # before 5000 - 1000: refused
        assert driver.metrics()["dropped-records"] == 1
        trades.pipe_input("k", "t", timestamp_ms=1_500)
        assert out.read_values() == ["t@None"]
