"""Spark's Kafka IO on the secured cluster: ``KafkaSink`` writes exactly once, and
``read_table`` and ``read_windowed`` read back, as a principal that holds only the ACLs they
need (those docs/production.md lists). The client settings come from a file without the
password, the password from the environment, as a user configures
``StreamsConfig.client_config``; the session's SparkSession serves, since the readers pass the
Java settings with each read."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import serdes
from fluvial.acls import AclRule, apply_acls
from fluvial.kafka.security import client_settings, split_bootstrap, write_client_properties
from fluvial.records import Window, Windowed
from fluvial.spark import KafkaSink, read_table, read_windowed
from tests.event_times import event_time_base_ms
from tests.security.conftest import SecureCluster
from tests.security.test_secured_cluster import assert_no_secrets
from tests.spark.sink_harness import read_all

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

LONG, STRING = serdes.long(), serdes.string()
WINDOW_MS = 60_000


def settings_from_file_and_environment(
    cluster: SecureCluster, user: str, tmp_path: Path
) -> tuple[str, dict[str, str]]:
    """The user's bootstrap and settings: a file without the password, the password from
    ``FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD``."""
    without_password = cluster.settings(user)
    password = without_password.pop("sasl.password")
    path = tmp_path / f"{user}.properties"
    write_client_properties(path, cluster.bootstrap, without_password)
    assert password not in path.read_text()
    settings = client_settings(path, env={"FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": password})
    bootstrap, settings = split_bootstrap(settings)
    assert bootstrap == cluster.bootstrap
    return bootstrap, settings


def produce_table(cluster: SecureCluster, topic: str, base_ms: int) -> None:
    """Transactions of upserts and tombstones, one of them aborted, as the admin."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, **cluster.admin(),
                         "transactional.id": f"{topic}-txn", "partitioner": "murmur2_random"})  # fmt: skip
    producer.init_transactions(60)
    rng = random.Random(17)
    for round_ in range(3):
        producer.begin_transaction()
        for i in range(200):
            key = f"user-{rng.randrange(40)}".encode()
            value = (
                None if rng.random() < 0.15 else LONG.serialize(topic, rng.randrange(-99, 10**9))
            )
            producer.produce(topic, key=key, value=value, timestamp=base_ms + round_ * 1000 + i)
        if round_ == 1:  # none of an aborted transaction may show
            assert producer.flush(60) == 0
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)


def produce_windows(cluster: SecureCluster, topic: str, base_ms: int) -> None:
    """Revisions of time-windowed counts, several per window, as the admin."""
    window_key = serdes.time_windowed(STRING, WINDOW_MS)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, **cluster.admin()}
    )
    for i in range(90):
        start = base_ms + (i % 3) * WINDOW_MS
        key = window_key.serialize(
            topic, Windowed(f"page-{i % 4}", Window(start, start + WINDOW_MS))
        )
        producer.produce(topic, key=key, value=LONG.serialize(topic, i), timestamp=start + i)
    assert producer.flush(60) == 0


def last_values(cluster: SecureCluster, topic: str, decode_key) -> dict:  # noqa: ANN001
    """The table by hand: per partition in offset order, the last value wins, None deletes."""
    table: dict = {}
    for msg in read_all(cluster.bootstrap, topic, settings=cluster.admin()):
        key = decode_key(msg.key())
        if msg.value() is None:
            table.pop(key, None)
        else:
            table[key] = LONG.deserialize(topic, msg.value())
    return table


def test_kafka_sink_and_readers_as_a_least_privileged_principal(
    spark, secure_cluster: SecureCluster, unique_name, tmp_path: Path, capfd
) -> None:  # fmt: skip
    cluster = secure_cluster
    user = cluster.new_user("spark-io")
    out = cluster.create_topic(unique_name("out"), partitions=2)
    table = cluster.create_topic(unique_name("table"), partitions=3)
    windowed = cluster.create_topic(unique_name("windowed"))
    sink_id = unique_name("sink")
    markers = f"{sink_id}-sink-batches"
    needed = [
        AclRule("TOPIC", "LITERAL", out, "WRITE", "the sink's output"),
        AclRule("TOPIC", "LITERAL", markers, "CREATE", "the sink makes its marker topic"),
        AclRule("TOPIC", "LITERAL", markers, "WRITE", "a marker in each transaction"),
        AclRule("TOPIC", "LITERAL", markers, "READ", "replays are told by the markers"),
        AclRule("TRANSACTIONAL_ID", "PREFIXED", f"{sink_id}-sink-", "WRITE", "its writers"),
        # The marker reader's consumer names a group it never joins or commits to.
        AclRule("GROUP", "LITERAL", f"{sink_id}-restore-unused", "DESCRIBE", "marker reader"),
        AclRule("TOPIC", "LITERAL", table, "READ", "read_table"),
        AclRule("TOPIC", "LITERAL", windowed, "READ", "read_windowed"),
    ]
    apply_acls(needed, f"User:{user}", cluster.bootstrap, cluster.admin())
    bootstrap, settings = settings_from_file_and_environment(cluster, user, tmp_path)
    base_ms = event_time_base_ms()

    # KafkaSink: one batch of three writer partitions, then Spark's replay of it after a
    # restart, then the next batch; read back read_committed, every record exactly once.
    sink = KafkaSink(out, bootstrap_servers=bootstrap, sink_id=sink_id, client_config=settings)
    first = [(f"user-{i % 7}", f"view-{i}", base_ms + i) for i in range(240)]
    second = [(f"user-{i % 5}", f"view-{240 + i}", base_ms + 240 + i) for i in range(60)]

    def batch(rows: list[tuple[str, str, int]]):  # noqa: ANN202
        rdd = spark.sparkContext.parallelize(rows, 3)
        return spark.createDataFrame(rdd, "key string, value string, timestamp long")

    written = sink(batch(first), 0)
    assert (written.records_written, written.partitions_skipped) == (240, ())
    replay = sink(batch(first), 0)
    assert (replay.records_written, replay.partitions_skipped) == (0, (0, 1, 2))
    assert sink(batch(second), 1).records_written == 60
    records = read_all(cluster.bootstrap, out, settings=cluster.admin())
    got = Counter((m.key().decode(), m.value().decode(), m.timestamp()[1]) for m in records)
    assert got == Counter(first + second), "each record once, none lost"

    # read_table and read_windowed: the last committed value per key (per window), tombstones
    # applied, the aborted transaction invisible.
    produce_table(cluster, table, base_ms)
    produce_windows(cluster, windowed, base_ms)
    expected_table = last_values(cluster, table, bytes.decode)
    assert 0 < len(expected_table) < 40
    frame = read_table(spark, table, bootstrap_servers=bootstrap, value_serde="long",
                       client_config=settings)  # fmt: skip
    assert {r.key: r.value for r in frame.collect()} == expected_table
    window_key = serdes.time_windowed(STRING, WINDOW_MS)

    def window_of(key: bytes) -> tuple[str, int, int]:
        found = window_key.deserialize(windowed, key)
        return found.key, found.window.start_ms, found.window.end_ms

    expected_windows = last_values(cluster, windowed, window_of)
    assert len(expected_windows) == 12
    windows = read_windowed(spark, windowed, bootstrap_servers=bootstrap,
                            window_size_ms=WINDOW_MS, client_config=settings,
                            epoch_millis=True)  # fmt: skip
    got_windows = {(r.key, r.window_start, r.window_end): r.value for r in windows.collect()}
    assert got_windows == expected_windows

    # No password in the plans (the SQL tab), the session's settings (the environment tab),
    # what Spark and the clients logged, or the broker's logs.
    output = capfd.readouterr()
    assert_no_secrets(
        cluster,
        {
            "read_table plan": frame._jdf.queryExecution().toString(),
            "read_windowed plan": windows._jdf.queryExecution().toString(),
            "Spark settings": repr(spark.sparkContext.getConf().getAll()),
            "sink": repr(sink.__dict__),
            "output": output.out + output.err,
        },
    )
