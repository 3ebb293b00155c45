"""The local cluster supports what exactly-once needs: transactions and read_committed reads."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

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


def test_a_fatal_produce_is_explained_by_the_producers_own_error(
    bootstrap_servers: str, topic_factory
) -> None:
    """After fencing, produce fails with 'Local: Fatal error', which names no cause; a worker
    asks its producer for the real one (fenced, or a refused transactional id) before closing
    it, so it stops as fenced instead of restarting from the last commit."""
    from types import SimpleNamespace

    from fluvial.runtime.client_calls import is_fenced, kafka_error_of
    from fluvial.runtime.worker import Worker

    topic = topic_factory("fenced")
    transactional_id = f"fatal-{uuid.uuid4().hex}"
    zombie = Producer(
        {"bootstrap.servers": bootstrap_servers, "transactional.id": transactional_id}
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"1")
    zombie.flush(10)
    successor = Producer({"bootstrap.servers": bootstrap_servers,
                          "transactional.id": transactional_id})  # fmt: skip
    successor.init_transactions(30)
    fatal = None
    deadline = time.monotonic() + 60
    while fatal is None and time.monotonic() < deadline:
        try:
            zombie.produce(topic, b"2")
            zombie.poll(0.05)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._FATAL:
                fatal = exc
    assert fatal is not None, "the fenced producer never failed with a fatal error"
    assert not is_fenced(fatal.args[0])  # what the failure itself says
    explained = Worker.fatal_cause(SimpleNamespace(_producer=zombie), fatal)  # type: ignore[arg-type]
    error = kafka_error_of(explained)
    assert error is not None and is_fenced(error), explained
    assert explained.__cause__ is fatal
