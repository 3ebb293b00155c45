"""One topology, both store backends, byte-identical output (changelogs included)."""

from __future__ import annotations

import random

from fluvial import (
    KeyValue,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
    serdes,
)
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def mixed_topology():
    builder = StreamsBuilder()
    events = builder.stream("events", key_serde=S, value_serde=serdes.json())
    windowed = (
        events.map(lambda k, v: KeyValue(v["group"], v))
        .group_by_key(key_serde=S)
        .windowed_by(TimeWindows.of_size_and_grace(1000, 300).advance_by(500))
        .count()
    )
    windowed.to_stream().to("live")
    windowed.suppress(Suppressed.until_window_closes()).to_stream().to("final")
    (
        events.to_table()
        .group_by(lambda k, v: (v["group"], v["amount"]), value_serde=serdes.long())
        .reduce(lambda a, b: a + b, lambda a, b: a - b)
        .to_stream()
        .to("totals")
    )
    return builder.build()


def run(store_type: str, records) -> dict[str, list]:
    config = StreamsConfig(application_id="conformance")
    with TopologyTestDriver(mixed_topology(), config, store_type=store_type) as driver:
        inp = driver.create_input_topic("events", S, serdes.json())
        outs = {
            t: driver.create_output_topic(t, serdes.bytes_(), serdes.bytes_())
            for t in ("live", "final", "totals")
        }
        inp.pipe_records(records)
        result = {
            t: [(r.key, r.value, r.timestamp_ms) for r in o.read_records()] for t, o in outs.items()
        }
        for store in mixed_topology().stores:
            spec = mixed_topology().stores[store]
            if spec.logging_enabled:
                result[store] = [(r.key, r.value, r.timestamp_ms) for r in driver.changelog(store)]
        result["metrics"] = sorted(driver.metrics().items())
    return result


def test_in_memory_and_rocksdb_give_identical_output():
    rng = random.Random(7)
    records = []
    for i in range(300):
        ts = max(0, i * 20 + rng.randint(-600, 100))  # out of order, some past grace
        records.append(
            (f"u{rng.randint(0, 9)}", {"group": rng.choice("abc"), "amount": rng.randint(1, 9)}, ts)
        )
    in_memory = run("in_memory", records)
    rocksdb = run("rocksdb", records)
    assert in_memory == rocksdb
    assert len(in_memory["live"]) > len(in_memory["final"]) > 0
    assert dict(in_memory["metrics"])["dropped-records"] > 0, "the input has late records"
