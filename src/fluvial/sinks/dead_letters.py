"""The dead-letter topic: records a sink could not write, set aside with the reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Producer

from fluvial.errors import ConfigError, FluvialError
from fluvial.sinks.store import Item

#: Headers added to every dead letter, besides the record's own.
ERROR_HEADER = "fluvial.sink.error"
SOURCE_HEADERS = ("fluvial.source.topic", "fluvial.source.partition", "fluvial.source.offset")


class DeadLetters:
    """An idempotent producer to the dead-letter topic; :meth:`send` returns once every
    record is acknowledged by all in-sync replicas."""

    def __init__(
        self, bootstrap_servers: str, topic: str, sink_id: str, client_config: Mapping[str, Any]
    ) -> None:
        self.topic = topic
        self.sink_id = sink_id
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                **client_config,
                "client.id": f"fluvial-sink-{sink_id}-dead-letters",
                "enable.idempotence": True,
                "acks": "all",
            }
        )
        metadata = self.producer.list_topics(timeout=30)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise ConfigError(
                f"dead-letter topic {topic!r} does not exist: create it first (fluvial never "
                "creates a user topic)"
            )

    def send(self, items: list[Item]) -> None:
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        for item in items:
            headers = list(item.headers or [])
            headers += [
                (ERROR_HEADER, item.error.encode()),
                (SOURCE_HEADERS[0], item.topic.encode()),
                (SOURCE_HEADERS[1], str(item.partition).encode()),
                (SOURCE_HEADERS[2], str(item.offset).encode()),
            ]
            kwargs: dict[str, Any] = {"key": item.key, "value": item.value, "headers": headers}
            if item.timestamp_ms is not None:
                kwargs["timestamp"] = item.timestamp_ms
            while True:
                try:
                    self.producer.produce(self.topic, on_delivery=delivered, **kwargs)
                    break
                except BufferError:
                    self.producer.poll(0.1)
        remaining = self.producer.flush(60)
        if failures or remaining:
            reason = failures[0] if failures else f"{remaining} not acknowledged within 60 s"
            raise FluvialError(
                f"sink {self.sink_id!r}: could not write to the dead-letter topic {self.topic!r} "
                f"({reason}); the batch is rolled back and nothing of it is committed"
            )

    def close(self) -> None:
        self.producer.flush(10)
