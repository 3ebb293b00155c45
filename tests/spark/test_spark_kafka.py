"""Spark's Kafka connector reads the local cluster, honouring read_committed."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_spark_batch_read_sees_only_committed_records(
    spark, bootstrap_servers: str, topic_factory, unique_name
) -> None:
    topic = topic_factory("spark-txn", partitions=2)
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "transactional.id": unique_name("txid")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=f"k{i}".encode(), value=f"ok-{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, key=b"x", value=f"aborted-{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    # A last committed transaction after the aborted one, so the read spans an abort.
    producer.begin_transaction()
    producer.produce(topic, key=b"z", value=b"ok-last", partition=0)
    producer.commit_transaction(30)

    def read(isolation: str) -> list[str]:
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", isolation)
            .load()
        )
        return sorted(r.v for r in frame.selectExpr("CAST(value AS STRING) AS v").collect())

    assert read("read_committed") == sorted([f"ok-{i}" for i in range(10)] + ["ok-last"])
    uncommitted = read("read_uncommitted")
    assert sorted(v for v in uncommitted if v.startswith("aborted")) == [
        f"aborted-{i}" for i in range(4)
    ]
