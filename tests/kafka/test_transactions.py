"""The local cluster supports what exactly-once needs: transactions and read_committed reads."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer

pytestmark = pytest.mark.kafka


def read_all(bootstrap: str, topic: str, isolation: str, expected_at_least: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    idle_polls = 0
    try:
        # Poll until the expected records arrived and then a few more empty polls, so a reader
        # that would also see extra records gets the chance to see them.
        while idle_polls < 6:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(values) >= expected_at_least:
                    idle_polls += 1
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_committed_transaction_visible_aborted_hidden(
    bootstrap_servers: str, topic_factory, unique_name
) -> None:
    topic = topic_factory("txn")
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "transactional.id": unique_name("txid")}
    )
    producer.init_transactions(30)

    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"committed-{i}".encode())
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, key=b"k", value=f"aborted-{i}".encode())
    producer.flush(30)  # the aborted records do reach the log before the abort marker
    producer.abort_transaction(30)

    committed = [f"committed-{i}".encode() for i in range(3)]
    aborted = [f"aborted-{i}".encode() for i in range(2)]
    assert read_all(bootstrap_servers, topic, "read_committed", 3) == committed
    assert read_all(bootstrap_servers, topic, "read_uncommitted", 5) == committed + aborted
