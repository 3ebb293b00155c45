"""Joins over several partitions on real Kafka: every match is found, or the input is refused.

A re-keyed stream joined with a table writes its repartition topic with the table's key serde,
so a key's records meet its row in one task; a table written with another partitioner than
Java's is caught by the co-partitioning guard.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.errors import CoPartitioningError
from fluvial.partitioner import default_partition
from fluvial.runtime import Application
from tests.event_times import event_time_base_ms
from tests.runtime.harness import flush, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

USERS = 120
COUNTRIES = ["de", "fr", "nl", "pl", "se"]


def country(i: int) -> str:
    return COUNTRIES[i % len(COUNTRIES)]


def produce_users(bootstrap: str, topic: str, partitioner: str, base_ms: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "partitioner": partitioner}
    )
    for i in range(USERS):
        producer.produce(topic, key=f"u{i:03d}".encode(), value=country(i).encode(),
                         timestamp=base_ms + i)  # fmt: skip
    flush(producer)


def produce_orders(bootstrap: str, topic: str, ids: range, base_ms: int, pace_s: float) -> None:
    """Orders keyed by order id (so re-keying moves them), each naming its user."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    for i in ids:
        value = json.dumps({"user_id": f"u{i:03d}", "amount": i}).encode()
        producer.produce(topic, key=f"order-{i}".encode(), value=value,
                         timestamp=base_ms + 10_000 + i)  # fmt: skip
        if pace_s:
            producer.poll(0)
            time.sleep(pace_s)
    flush(producer)


def joined(bootstrap: str, topic: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for partition in range(3):
        for m in read_topic(bootstrap, topic, partition=partition):
            found.setdefault(m.key().decode(), []).append(m.value().decode())
    return found


def test_rekeyed_stream_joined_with_a_table_finds_every_match_on_three_partitions(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    users, orders, out = (topic_factory(n, 3) for n in ("users", "orders", "joined"))
    base = event_time_base_ms()
    produce_users(bootstrap_servers, users, "murmur2_random", base)
    produce_orders(bootstrap_servers, orders, range(0, 60), base, 0)  # a backlog

    b = StreamsBuilder()
    table = b.table(users, key_serde=serdes.string(), value_serde=serdes.string())
    (b.stream(orders, key_serde=serdes.string(), value_serde=serdes.json())
      .select_key(lambda k, o: o["user_id"])
      .join(table, lambda o, c: f"{c}:{o['amount']}")
      .to(out, key_serde=serdes.string(), value_serde=serdes.string()))  # fmt: skip
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path),
                           co_partitioning_check="fail")  # fmt: skip
    with Application(b.build(), config) as app:
        wait_until(lambda: len(joined(bootstrap_servers, out)) >= 60 or app.errors, 120,
                   "the backlog's orders to be joined")  # fmt: skip
        produce_orders(bootstrap_servers, orders, range(60, USERS), base, 0.02)  # live traffic
        wait_until(lambda: len(joined(bootstrap_servers, out)) >= USERS or app.errors, 120,
                   "the live orders to be joined")  # fmt: skip
    app.raise_if_failed()
    expected = {f"u{i:03d}": [f"{country(i)}:{i}"] for i in range(USERS)}
    assert joined(bootstrap_servers, out) == expected


def test_a_table_written_with_another_partitioner_is_caught(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """librdkafka's default partitioner (CRC32) misplaces most keys for a Java-partitioned join."""
    users, orders, out = (topic_factory(n, 3) for n in ("users", "orders", "joined"))
    base = event_time_base_ms()
    produce_users(bootstrap_servers, users, "consistent_random", base)

    def app_config(check: str) -> StreamsConfig:
        return StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                             state_dir=str(tmp_path / check), co_partitioning_check=check)  # fmt: skip

    def topology():  # noqa: ANN202
        b = StreamsBuilder()
        table = b.table(users, key_serde=serdes.string(), value_serde=serdes.string())
        b.stream(orders, key_serde=serdes.string(), value_serde=serdes.json()).join(
            table, lambda o, c: c
        ).to(out, value_serde=serdes.string())
        return b.build()

    with Application(topology(), app_config("fail")) as app:
        wait_until(lambda: app.errors, 60, "the check to stop the application")
    with pytest.raises(CoPartitioningError, match=r"partitioner=murmur2_random") as error:
        app.raise_if_failed()
    assert repr(users) in str(error.value)

    with Application(topology(), app_config("warn")) as app:
        wait_until(lambda: sum(w.metrics.copartition_mismatches for w in app.workers) > 0, 60,
                   "misplaced records to be counted")  # fmt: skip
    app.raise_if_failed()  # a warning only: the application ran on


def test_windowed_results_land_on_their_keys_partition(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """As in Kafka Streams, a windowed key is placed by its inner key, so every window of a key
    is on that key's partition (where a Java consumer or a join by plain key looks)."""
    source, out = topic_factory("clicks", 3), topic_factory("counts", 3)
    base = event_time_base_ms()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    keys = [f"k{i}" for i in range(12)]
    for i, key in enumerate(keys * 3):
        producer.produce(source, key=key.encode(), value=b"1", timestamp=base + 1000 * i)
    flush(producer)
    windowed = serdes.time_windowed(serdes.string(), 5000)
    b = StreamsBuilder()
    (b.stream(source, key_serde=serdes.string(), value_serde=serdes.string())
      .group_by_key()
      .windowed_by(TimeWindows.of_size_with_no_grace(5000))
      .count()
      .to_stream()
      .to(out, key_serde=windowed, value_serde=serdes.long()))  # fmt: skip
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path),
                           cache_max_bytes=0)  # fmt: skip

    def placed() -> list[tuple[str, int]]:
        return [(windowed.deserialize(out, m.key()).key, p)
                for p in range(3) for m in read_topic(bootstrap_servers, out, partition=p)]  # fmt: skip

    with Application(b.build(), config) as app:
        wait_until(lambda: len(placed()) >= len(keys) * 3 or app.errors, 120, "every count")
    app.raise_if_failed()
    assert placed(), "nothing was counted"
    for key, partition in placed():
        assert partition == default_partition(key.encode(), 3), (key, partition)


def test_a_join_over_a_lopsided_backlog_finds_every_match(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """One side's backlog is far larger than a partition's fetch buffer, and the other side's
    records are older. The task must wait for the small side's records and still fetch them
    while the large side's partition is paused: a task whose whole buffer paused all of its
    partitions waited for ever on the small side (a pre-loaded Nexmark join hung so)."""
    bids, auctions, out = (topic_factory(n, 2) for n in ("bids", "auctions", "joined"))
    base = event_time_base_ms()
    n_auctions, bids_per_auction = 40, 600  # 24,000 bids, about 12,000 per partition
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "partitioner": "murmur2_random",
                         "linger.ms": 20})  # fmt: skip
    for a in range(n_auctions):
        producer.produce(auctions, key=f"a{a}".encode(), value=b"x", timestamp=base + a)
    for i in range(n_auctions * bids_per_auction):
        producer.produce(bids, key=f"a{i % n_auctions}".encode(), value=b"1",
                         timestamp=base + 1_000 + i)  # fmt: skip
        if i % 1000 == 0:
            producer.poll(0)
    flush(producer)

    b = StreamsBuilder()
    s = serdes.string()
    table = b.table(auctions, key_serde=s, value_serde=s)
    (b.stream(bids, key_serde=s, value_serde=s)
      .join(table, lambda bid, auction: auction)
      .group_by_key()
      .count()
      .to_stream()
      .to(out, key_serde=s, value_serde=serdes.long()))  # fmt: skip
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path))  # fmt: skip

    def counts() -> dict[str, int]:
        latest: dict[str, int] = {}
        for partition in range(2):
            for m in read_topic(bootstrap_servers, out, partition=partition):
                latest[m.key().decode()] = serdes.long().deserialize(out, m.value())
        return latest

    expected = {f"a{a}": bids_per_auction for a in range(n_auctions)}
    with Application(b.build(), config) as app:
        wait_until(lambda: counts() == expected or app.errors, 180, "every bid to be joined")
    app.raise_if_failed()
    assert counts() == expected
