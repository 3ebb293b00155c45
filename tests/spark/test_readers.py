"""fluvial's tables as DataFrames: ``read_table`` and ``read_windowed`` on the session's Kafka.

Each reader's result is compared with the last value per key worked out by hand from the same
topic, read record by record with a read_committed consumer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F
from tests.runtime.harness import wait_until
from tests.spark.sink_harness import read_all

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import ConfigError
from fluvial.records import Window, Windowed
from fluvial.runtime import Application
from fluvial.spark import read_table, read_windowed
from fluvial.state.base import window_store_key

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

LONG, STRING = serdes.long(), serdes.string()


def last_values(bootstrap: str, topic: str, decode_key, decode_value) -> dict:  # noqa: ANN001
    """The table by hand: per partition in offset order, the last value wins, None deletes."""
    table: dict = {}
    for msg in read_all(bootstrap, topic):  # read_committed, each partition in offset order
        key = decode_key(msg.key())
        if msg.value() is None:
            table.pop(key, None)
        else:
            table[key] = decode_value(msg.value())
    return table


def test_read_table_is_the_last_committed_value_per_key_with_tombstones(
    spark, bootstrap_servers, topic_factory, unique_name
) -> None:
    topic = topic_factory("table", partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap_servers,
                         "transactional.id": unique_name("txn"), "partitioner": "murmur2_random"})  # fmt: skip
    producer.init_transactions(30)
    rng = random.Random(3)
    for round_ in range(4):
        producer.begin_transaction()
        for _ in range(300):
            key = f"user-{rng.randrange(60)}".encode()
            value = (
                None
                if rng.random() < 0.15
                else LONG.serialize(topic, rng.randrange(-(10**12), 10**12))
            )
            producer.produce(topic, key=key, value=value)
        if round_ == 2:  # an aborted transaction: none of it may show
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)

    expected = last_values(bootstrap_servers, topic, bytes.decode,
                           lambda v: LONG.deserialize(topic, v))  # fmt: skip
    frame = read_table(spark, topic, bootstrap_servers=bootstrap_servers, value_serde="long")
    assert frame.columns == ["key", "value"]
    assert {r.key: r.value for r in frame.collect()} == expected
    assert 0 < len(expected) < 60  # some keys were deleted, and negatives decode as negatives
    assert any(v < 0 for v in expected.values())


def test_read_table_of_a_fluvial_changelog_equals_the_final_counts(
    spark, bootstrap_servers, topic_factory, unique_name, tmp_path: Path
) -> None:
    source, out = topic_factory("clicks", partitions=2), topic_factory("counts", partitions=2)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    pages = [f"page-{i % 7}" for i in range(140)]
    for i, page in enumerate(pages):
        producer.produce(source, key=page.encode(), value=f"click-{i}".encode())
    assert producer.flush(30) == 0

    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=STRING, value_serde=STRING)
        .group_by_key()
        .count(materialized=Materialized.as_("click-counts"))
        .to_stream()
        .to(out, value_serde=LONG)
    )
    app_id = unique_name("app")
    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path))  # fmt: skip
    changelog = f"{app_id}-click-counts-changelog"
    oracle = {page: pages.count(page) for page in set(pages)}
    with Application(builder.build(), config):
        wait_until(lambda: last_values(bootstrap_servers, out, bytes.decode,
                                       lambda v: LONG.deserialize(out, v)) == oracle,
                   90, "the counts to reach the oracle")  # fmt: skip

    frame = read_table(spark, changelog, bootstrap_servers=bootstrap_servers,
                       value_serde="long", with_metadata=True)  # fmt: skip
    assert {r.key: r.value for r in frame.collect()} == oracle
    assert frame.columns == ["key", "value", "timestamp", "partition", "offset"]
    assert dict(frame.dtypes)["timestamp"] == "timestamp"
    # The same record times as epoch milliseconds, on request.
    millis = read_table(spark, changelog, bootstrap_servers=bootstrap_servers,
                        value_serde="long", with_metadata=True, epoch_millis=True)  # fmt: skip
    assert dict(millis.dtypes)["timestamp"] == "bigint"
    as_millis = frame.select("key", F.unix_millis("timestamp").alias("ms")).collect()
    assert {r.key: r.timestamp for r in millis.collect()} == {r.key: r.ms for r in as_millis}


def test_read_table_parses_json_values_into_columns(
    spark, bootstrap_servers, topic_factory
) -> None:
    topic = topic_factory("profiles")
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for key, doc in [("u1", {"name": "Ada", "age": 36}), ("u2", {"name": "Bo", "age": 7}),
                     ("u1", {"name": "Ada", "age": 37})]:  # fmt: skip
        producer.produce(topic, key=key.encode(), value=json.dumps(doc).encode())
    assert producer.flush(30) == 0
    frame = read_table(spark, topic, bootstrap_servers=bootstrap_servers, value_serde="json",
                       value_schema="name string, age int")  # fmt: skip
    rows = {r.key: (r.value.name, r.value.age) for r in frame.collect()}
    assert rows == {"u1": ("Ada", 37), "u2": ("Bo", 7)}


def test_read_windowed_decodes_time_and_session_windows_and_store_changelogs(
    spark, bootstrap_servers, topic_factory
) -> None:
    size = 5000
    timed, sessions, store = (topic_factory("timed"), topic_factory("sessions"),
                              topic_factory("store"))  # fmt: skip
    time_key, session_key = serdes.time_windowed(STRING, size), serdes.session_windowed(STRING)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    rng = random.Random(5)
    for _ in range(200):
        key, start = f"k{rng.randrange(8)}", rng.randrange(-3, 20) * size  # a negative start too
        value = None if rng.random() < 0.1 else LONG.serialize(timed, rng.randrange(1000))
        producer.produce(
            timed,
            key=time_key.serialize(timed, Windowed(key, Window(start, start + size))),
            value=value,
        )
        end = start + rng.randrange(0, 9000)
        producer.produce(
            sessions,
            key=session_key.serialize(sessions, Windowed(key, Window(start, end))),
            value=value,
        )
        producer.produce(store, key=window_store_key(key.encode(), start, 0), value=value)
    assert producer.flush(30) == 0

    def decode_value(v: bytes) -> int:
        return LONG.deserialize(timed, v)

    def by_window(frame) -> dict:  # noqa: ANN001
        return {(r.key, r.window_start, r.window_end): r.value for r in frame.collect()}

    def as_tuple(serde):  # noqa: ANN001, ANN202
        def decode(k: bytes) -> tuple:
            windowed = serde.deserialize(timed, k)
            return windowed.key, windowed.window.start_ms, windowed.window.end_ms

        return decode

    def in_millis(frame):  # noqa: ANN001, ANN202
        return frame.select("key", F.unix_millis("window_start").alias("window_start"),
                            F.unix_millis("window_end").alias("window_end"), "value")  # fmt: skip

    expected_timed = last_values(bootstrap_servers, timed, as_tuple(time_key), decode_value)
    frame = read_windowed(spark, timed, bootstrap_servers=bootstrap_servers, window_size_ms=size)
    assert frame.columns == ["key", "window_start", "window_end", "value"]
    # Window bounds are Spark timestamps by default, at the windows' exact milliseconds.
    assert dict(frame.dtypes) == {"key": "string", "window_start": "timestamp",
                                  "window_end": "timestamp", "value": "bigint"}  # fmt: skip
    assert by_window(in_millis(frame)) == expected_timed

    expected_sessions = last_values(
        bootstrap_servers, sessions, as_tuple(session_key), decode_value
    )
    # epoch_millis keeps them as the longs on the wire.
    frame = read_windowed(spark, sessions, bootstrap_servers=bootstrap_servers, session=True,
                          epoch_millis=True)  # fmt: skip
    assert dict(frame.dtypes)["window_start"] == dict(frame.dtypes)["window_end"] == "bigint"
    assert by_window(frame) == expected_sessions

    # A window store's changelog has the same windows as the result topic written alongside it.
    frame = read_windowed(spark, store, bootstrap_servers=bootstrap_servers, window_size_ms=size,
                          store_changelog=True)  # fmt: skip
    assert by_window(in_millis(frame)) == expected_timed

    revisions = read_windowed(spark, timed, bootstrap_servers=bootstrap_servers,
                              window_size_ms=size, latest=False).collect()  # fmt: skip
    assert len(revisions) == 200
    assert [r.offset for r in revisions] == list(range(200))
    assert sum(r.value is None for r in revisions) > 0  # tombstones stay among the revisions


def test_reader_arguments_are_checked_before_reading(spark, bootstrap_servers) -> None:
    with pytest.raises(ConfigError, match="window_size_ms"):
        read_windowed(spark, "t", bootstrap_servers=bootstrap_servers)
    with pytest.raises(ConfigError, match="value_serde='avro' is unknown"):
        read_table(spark, "t", bootstrap_servers=bootstrap_servers, value_serde="avro")
