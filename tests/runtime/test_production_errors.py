"""A record the broker rejects is never lost in silence, whichever way its failure is reported.

Under exactly-once, output records carry no delivery report of their own: a failed one makes
the producer's transaction abortable, so the commit fails and nothing of the transaction
becomes visible. Under at-least-once each output record's report fails the next commit. These
tests pin both down with a real broker rejecting a real record (larger than its topic allows).
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import StreamsError
from fluvial.processor.collector import TaskId
from fluvial.runtime.worker import Worker

S = serdes.string()
# Random bytes: compression cannot bring them under the output topic's 2000-byte limit.
BIG = random.Random(3).randbytes(20_000)


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while batch := consumer.consume(100, 3.0):
            values += [m.value() for m in batch if m.error() is None]
        return values
    finally:
        consumer.close()


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "at_least_once"])
def test_an_output_record_the_broker_rejects_stops_the_worker_uncommitted(
    guarantee: str, bootstrap_servers: str, topic_factory, app_id_factory, tmp_path: Path
) -> None:
    source = topic_factory("in")
    sink = topic_factory("out", max_message_bytes="2000")
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=S, value_serde=S)
        .map_values(lambda v: BIG if v == "big" else v.encode())
        .to(sink, key_serde=S, value_serde=serdes.bytes_())
    )
    config = StreamsConfig(
        application_id=app_id_factory(), bootstrap_servers=bootstrap_servers,
        processing_guarantee=guarantee, commit_interval_ms=100, state_dir=str(tmp_path),
    )  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for value in ("a", "b", "big", "c"):
        producer.produce(source, value.encode(), b"k")
    producer.flush(30)

    worker = Worker(0, builder.build(), config, [TaskId(0, 0)])
    # Generous: the worker must fail long before this, at its first commit with the record.
    give_up = threading.Timer(180, worker.stop_event.set)
    give_up.start()
    try:
        with pytest.raises(StreamsError):
            worker.run()
    finally:
        give_up.cancel()
    assert not worker.stop_event.is_set(), "the rejected record must stop the worker"

    committed = _committed_values(bootstrap_servers, sink)
    assert BIG not in committed and b"c" not in committed, committed
    reader = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": config.application_id})
    try:
        [position] = reader.committed([TopicPartition(source, 0)], timeout=30)
    finally:
        reader.close()
    # Offset 2 is the rejected record: no commit may move past it.
    assert position.offset <= 2, f"the input was committed past the rejected record: {position}"
