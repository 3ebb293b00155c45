"""At-least-once output does not wait out the producer's linger when the input goes quiet.

The producer lingers (100 ms by default, ``linger.ms`` in ``client_config``) so that busy
partitions send full batches. Under at-least-once a record is visible as soon as it is sent, so
a worker with nothing left to process sends what lingers at once. The test sets a linger of 15
minutes and a commit interval of 10: output can only arrive within the wait if the idle worker
sends it, and it must, wave after wave.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.runtime import Application
from tests.event_times import event_time_base_ms
from tests.runtime.harness import wait_until

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2
WAVE = 50


def _reader(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"linger-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    return consumer


def test_an_idle_at_least_once_worker_sends_what_lingers(
    bootstrap_servers: str,
    topic_factory: Callable[..., str],
    app_id_factory: Callable[[], str],
    tmp_path: Path,
) -> None:
    input_topic = topic_factory("input", partitions=PARTITIONS)
    output_topic = topic_factory("output", partitions=PARTITIONS)
    builder = StreamsBuilder()
    (builder.stream(input_topic, key_serde=serdes.string(), value_serde=serdes.string())
        .map_values(str.upper)
        .to(output_topic, key_serde=serdes.string(), value_serde=serdes.string()))  # fmt: skip
    config = StreamsConfig(application_id=app_id_factory(), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="at_least_once", commit_interval_ms=600_000,
                           client_config={"linger.ms": "900000", "message.timeout.ms": "1800000"},
                           state_dir=str(tmp_path / "state"))  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})  # fmt: skip
    reader = _reader(bootstrap_servers, output_topic)
    base = event_time_base_ms()
    seen: dict[str, str] = {}

    def read_all(expected: int) -> bool:
        for msg in reader.consume(500, 0.2):
            if msg.error() is None:
                seen[msg.key().decode()] = msg.value().decode()
        return len(seen) >= expected

    try:
        with Application(builder.build(), config) as app:
            for wave in range(3):
                for i in range(WAVE):
                    n = wave * WAVE + i
                    producer.produce(input_topic, f"value-{n}".encode(), f"key-{n}".encode(),
                                     timestamp=base + n)  # fmt: skip
                assert producer.flush(60) == 0
                expected = (wave + 1) * WAVE
                wait_until(lambda e=expected: app.raise_if_failed() or read_all(e), 120,
                           f"wave {wave + 1}'s output while the producer lingers")  # fmt: skip
    finally:
        reader.close()
    assert seen == {f"key-{n}": f"VALUE-{n}" for n in range(3 * WAVE)}
