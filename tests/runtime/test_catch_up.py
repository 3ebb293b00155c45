"""Catch-up completeness: live input, a backlog and a replay after a reset give the same windows.

A re-keyed windowed count over 3 input partitions (Figure 2's shape). Each partition's own
disorder stays within grace, so no record is late by its own partition's order and every record
counts. Three upstream tasks write the repartition topic, each at its own pace: with Kafka
Streams' rule the downstream stream time follows the fastest of them, and a backlog drops the
slower ones' records as late. fluvial reads the repartition topic merged by writer
(docs/semantics.md, "Catch-up completeness").
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.runtime import Application
from fluvial.runtime.reset import reset_application
from tests.event_times import event_time_base_ms
from tests.runtime.harness import read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 3
WINDOW_MS, GRACE_MS = 10_000, 2_000
WINDOW_KEY = serdes.time_windowed(serdes.string(), WINDOW_MS)
CATEGORIES = ["news", "sports", "tech", "travel"]


def generate(seed: int, per_partition: int, base_ms: int) -> list[tuple[int, str, int, str]]:
    """(partition, key, timestamp, category): each partition spans the same event time, with
    its own disorder under 1 s (within the 2 s grace)."""
    rng = random.Random(seed)
    records = []
    for partition in range(PARTITIONS):
        clock = base_ms
        for i in range(per_partition):
            clock += rng.randint(20, 80)
            ts = clock - rng.randint(0, 900) if rng.random() < 0.2 else clock
            records.append((partition, f"user-{partition}-{i}", ts, rng.choice(CATEGORIES)))
    return records


def oracle(records: list[tuple[int, str, int, str]]) -> dict[tuple[str, int], int]:
    return dict(Counter((c, ts - ts % WINDOW_MS) for _p, _k, ts, c in records))


def produce(bootstrap: str, topic: str, records, pace_s: float = 0.0) -> None:  # noqa: ANN001
    """Each partition in its own order; paced, the partitions advance together."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    by_partition = [[r for r in records if r[0] == p] for p in range(PARTITIONS)]
    for row in zip(*by_partition, strict=True):
        for partition, key, ts, category in row:
            producer.produce(topic, key=key.encode(), partition=partition, timestamp=ts,
                             value=json.dumps({"category": category}).encode())  # fmt: skip
        if pace_s:
            producer.poll(0)
            time.sleep(pace_s)
    assert producer.flush(30) == 0


def final_counts(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    final = {}
    for partition in range(PARTITIONS):
        for m in read_topic(bootstrap, topic, partition=partition):
            windowed = WINDOW_KEY.deserialize(topic, m.key())
            final[(windowed.key, windowed.window.start_ms)] = serdes.long().deserialize(
                topic, m.value()
            )
    return final


def topology(source: str, sink: str):  # noqa: ANN201
    b = StreamsBuilder()
    (b.stream(source, key_serde=serdes.string(), value_serde=serdes.json())
      .map(lambda k, v: KeyValue(v["category"], v))
      .group_by_key()
      .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
      .count()
      .to_stream()
      .to(sink, key_serde=WINDOW_KEY, value_serde=serdes.long()))  # fmt: skip
    return b.build()


def run_until_complete(
    topo,
    config: StreamsConfig,
    bootstrap: str,
    out: str,
    expected,  # noqa: ANN001
    feed=None,
) -> dict:  # noqa: ANN001
    with Application(topo, config) as app:
        if feed is not None:
            feed()
        # Everything is read once the last record's count shows; then the counts are final.
        total = sum(expected.values())
        wait_until(lambda: sum(final_counts(bootstrap, out).values()) >= total or app.errors,
                   240, "every window's count")  # fmt: skip
        dropped = sum(w.metrics.dropped_records for w in app.workers)
    app.raise_if_failed()
    return {"counts": final_counts(bootstrap, out), "dropped": dropped}


@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "at_least_once"])
def test_live_backlog_and_replay_give_the_same_windows(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, guarantee: str
) -> None:
    records = generate(seed=24, per_partition=700, base_ms=event_time_base_ms())
    expected = oracle(records)

    def config(app_id: str) -> StreamsConfig:
        return StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                             processing_guarantee=guarantee, commit_interval_ms=100,
                             cache_max_bytes=0, state_dir=str(tmp_path / app_id))  # fmt: skip

    # Live: the app runs first, the input arrives at about 15x real time.
    live_in, live_out = topic_factory("live-in", PARTITIONS), topic_factory("live-out", PARTITIONS)
    live = run_until_complete(
        topology(live_in, live_out), config(unique_name("live")), bootstrap_servers, live_out,
        expected, feed=lambda: produce(bootstrap_servers, live_in, records, pace_s=0.004),
    )  # fmt: skip
    assert live == {"counts": expected, "dropped": 0}

    # A backlog: all input is there before the application starts.
    backlog_in = topic_factory("backlog-in", PARTITIONS)
    first_out = topic_factory("backlog-out", PARTITIONS)
    produce(bootstrap_servers, backlog_in, records)
    app_id = unique_name("backlog")
    backlog = run_until_complete(topology(backlog_in, first_out), config(app_id),
                                 bootstrap_servers, first_out, expected)  # fmt: skip
    assert backlog == {"counts": expected, "dropped": 0}

    # The same application reset and replayed (into a new output topic, to read it alone).
    reset_application(app_id, bootstrap_servers, tmp_path / app_id)
    replay_out = topic_factory("replay-out", PARTITIONS)
    replay = run_until_complete(topology(backlog_in, replay_out), config(app_id),
                                bootstrap_servers, replay_out, expected)  # fmt: skip
    assert replay == {"counts": expected, "dropped": 0}
