"""The dead-letter topic: records a sink could not write, set aside with the reason.

Every dead letter carries the reason in the header ``fluvial.sink.error``. A dead letter of the
process sink (:mod:`fluvial.sinks.postgres`) is the record itself (its key, value and
timestamp) with headers naming where it came from; one of the Spark writer
(:mod:`fluvial.spark.postgres`) is the row as a JSON object, with headers naming the sink and
the micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from fluvial.errors import ConfigError, FluvialError
from fluvial.sinks.store import Item

#: Headers added to every dead letter, besides the record's own.
ERROR_HEADER = "fluvial.sink.error"
SOURCE_HEADERS = ("fluvial.source.topic", "fluvial.source.partition", "fluvial.source.offset")
#: Headers of the Spark writer's dead letters: its ``sink_id`` and the micro-batch's id.
SPARK_HEADERS = ("fluvial.spark.sink", "fluvial.spark.batch")


def check_on_bad_row(on_bad_row: str, dead_letter_topic: str | None, *, stopping: str) -> None:
    """Check a sink's ``on_bad_row`` against its ``dead_letter_topic``; raises
    :class:`ConfigError`. ``stopping`` names what ``'fail'`` stops (the sink, the query)."""
    if on_bad_row not in ("fail", "dead_letter"):
        raise ConfigError(
            f"on_bad_row={on_bad_row!r} is unknown: use 'fail' (stop {stopping}) or "
            "'dead_letter' (send bad records to dead_letter_topic)"
        )
    if on_bad_row == "dead_letter" and not dead_letter_topic:
        raise ConfigError("on_bad_row='dead_letter' needs dead_letter_topic")
    if on_bad_row == "fail" and dead_letter_topic:
        raise ConfigError(
            "dead_letter_topic is set but on_bad_row='fail' stops at bad rows: "
            "set on_bad_row='dead_letter' to use it"
        )


def check_dead_letter_topic(client: Any, topic: str, bootstrap_servers: str) -> None:
    """Raise :class:`ConfigError` unless ``topic`` exists (``client``: a producer or admin)."""
    try:
        metadata = client.list_topics(timeout=30)
    except KafkaException as exc:
        raise ConfigError(
            f"cannot reach Kafka at {bootstrap_servers} to check the dead-letter topic "
            f"{topic!r}: {exc.args[0].str()}"
        ) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise ConfigError(
            f"dead-letter topic {topic!r} does not exist: create it first (fluvial never "
            "creates a user topic)"
        )


def produce_all(
    producer: Producer, topic: str, messages: list[dict[str, Any]]
) -> KafkaError | str | None:
    """Produce ``messages`` (``produce`` keyword arguments) and flush; the first failure, if any."""
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for message in messages:
        while True:
            try:
                producer.produce(topic, on_delivery=delivered, **message)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
    remaining = producer.flush(60)
    if failures:
        return failures[0]
    return f"{remaining} not acknowledged within 60 s" if remaining else None


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
        check_dead_letter_topic(self.producer, topic, bootstrap_servers)

    def send(self, items: list[Item]) -> None:
        messages = []
        for item in items:
            headers = list(item.headers or [])
            headers += [
                (ERROR_HEADER, item.error.encode()),
                (SOURCE_HEADERS[0], item.topic.encode()),
                (SOURCE_HEADERS[1], str(item.partition).encode()),
                (SOURCE_HEADERS[2], str(item.offset).encode()),
            ]
            message: dict[str, Any] = {"key": item.key, "value": item.value, "headers": headers}
            if item.timestamp_ms is not None:
                message["timestamp"] = item.timestamp_ms
            messages.append(message)
        failure = produce_all(self.producer, self.topic, messages)
        if failure is not None:
            raise FluvialError(
                f"sink {self.sink_id!r}: could not write to the dead-letter topic {self.topic!r} "
                f"({failure}); the batch is rolled back and nothing of it is committed"
            )

    def close(self) -> None:
        self.producer.flush(10)
