"""Catch-up completeness with the record cache on: records a cache flushes at a commit, after
its task's progress said it had read all of its input, are followed by a fresh progress record.

Without it the downstream task saw the writer's records after its last "read all" progress,
took the writer for one that may still write older records, and held the other writers' newer
records forever: a table re-grouped behind cached aggregates (Nexmark q15 and q16) stopped
short of its input's end.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, serdes
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.metrics import summarize
from fluvial.runtime import Application
from tests.event_times import event_time_base_ms
from tests.runtime.harness import flush, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 3


def test_cached_table_regrouped_behind_several_writers_reaches_the_end(
    bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    source, out = unique_name("in"), unique_name("out")
    create_topics(bootstrap_servers, [TopicSpec(t, PARTITIONS) for t in (source, out)])
    base = event_time_base_ms()
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    rows = []
    for partition in range(PARTITIONS):
        # Each partition ends at its own event time: the writers' stream times differ.
        records = 200 * (partition + 1)
        for i in range(records):
            # Each user's last record names a group no earlier record does. Groups that move
            # users around repeat their counts on the way, so only these make the final counts
            # unreachable before every record has been counted.
            last = i + 37 >= records
            user, group = f"u{partition}-{i % 37}", f"{'last' if last else 'g'}{i % 5}"
            rows.append((user, group))
            producer.produce(source, key=user.encode(), value=json.dumps(group).encode(),
                             partition=partition, timestamp=base + i * 50)  # fmt: skip
    flush(producer)
    # The last group of each user, counted per group: a cached aggregate, then a re-grouping.
    expected = Counter(dict(rows).values())

    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.string(), value_serde=serdes.json())
        # Re-keyed first (to the same user): the cached aggregate reads a merged repartition
        # topic, whose last records it takes only once the other writers have gone idle.
        .group_by(lambda user, group: user, key_serde=serdes.string(), value_serde=serdes.json())
        .reduce(lambda old, new: new)
        .group_by(
            lambda user, group: KeyValue(group, user),
            key_serde=serdes.string(),
            value_serde=serdes.string(),
        )  # fmt: skip
        .count()
        .to_stream()
        .to(out, key_serde=serdes.string(), value_serde=serdes.long())
    )
    # Commits 1 s apart, progress rounds 100 ms apart: a cache's last flush comes after its
    # task's progress has said it read all of its input.
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", commit_interval_ms=1000,
                           state_dir=str(tmp_path))  # fmt: skip
    assert config.cache_max_bytes > 0 and config.catch_up_completeness

    def counts() -> Counter:
        last = {}
        for p in range(PARTITIONS):
            for m in read_topic(bootstrap_servers, out, partition=p):
                last[m.key().decode()] = serdes.long().deserialize(out, m.value())
        return Counter({k: v for k, v in last.items() if v})

    def input_lag() -> int:
        return int(summarize(app.metrics())["lag"])

    with Application(builder.build(), config) as app:
        # Every user's last record counted and every earlier group emptied, and nothing left
        # to read, so closing cannot commit a half-moved user.
        wait_until(lambda: (counts() == expected and input_lag() == 0) or app.errors, 90,
                   "every group's final count")  # fmt: skip
    app.raise_if_failed()
    assert counts() == expected
