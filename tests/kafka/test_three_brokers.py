"""A three-broker cluster survives ``kill -9`` of a partition leader without losing acked data."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.local import port_is_free

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    port = free_port()
    while not all(port_is_free(p) for p in (port + 1, port + 2)):
        port = free_port()
    with LocalKafka(tmp_path_factory.mktemp("kafka3"), port=port, brokers=3, heap="512m") as c:
        yield c


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def test_kill_leader_keeps_rf3_topic_writable_and_loses_no_acked_record(
    three_brokers: LocalKafka,
) -> None:
    bootstrap = three_brokers.bootstrap_servers
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    create_topics(
        bootstrap, [TopicSpec(topic, 1, replication_factor=3, config={"min.insync.replicas": "2"})]
    )
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions[0].replicas) == 3

    acked: list[bytes] = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001 - confluent-kafka callback
        if err is None:
            acked.append(msg.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
        }
    )
    for i in range(500):
        producer.produce(topic, value=f"before-{i}".encode(), on_delivery=on_delivery)
    producer.flush(30)
    assert len(acked) == 500

    old_leader = leader_of(bootstrap, topic)
    three_brokers.kill_broker(old_leader, signal.SIGKILL)

    for i in range(500):
        producer.produce(topic, value=f"after-{i}".encode(), on_delivery=on_delivery)
    remaining = producer.flush(60)
    assert remaining == 0, "the surviving brokers must accept acks=all writes (min ISR 2 of 3)"
    assert len(acked) == 1000
    assert leader_of(bootstrap, topic) != old_leader

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"verify-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    idle = 0
    while idle < 10 and len(seen) < len(acked) + 1:
        msg = consumer.poll(1.0)
        if msg is None:
            idle += 1
            continue
        assert msg.error() is None, msg.error()
        seen.append(msg.value())
    consumer.close()
    assert sorted(seen) == sorted(acked), "every acknowledged record is readable, once"

    three_brokers.start_broker(old_leader)
    assert three_brokers.is_running()


def test_free_ports_are_outside_the_range_of_outgoing_connections() -> None:
    """A killed broker binds its port again on restart: no client connection may hold it."""
    from fluvial.kafka.local import _outgoing_port_range

    low, high = _outgoing_port_range()
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high, (port, low, high)
        assert port_is_free(port)
