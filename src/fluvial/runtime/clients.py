"""librdkafka client settings for a fluvial application, in one place.

Only the runtime builds clients. Secrets in ``client_config`` (SASL passwords, TLS keys) are
passed through to librdkafka and never logged: :func:`fluvial.redaction.redacted` is what
logs may show.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from fluvial.config import StreamsConfig, to_millis
from fluvial.errors import ConfigError
from fluvial.kafka.diagnose import kafka_logger


def _common(config: StreamsConfig) -> dict[str, Any]:
    return {
        "bootstrap.servers": config.bootstrap_servers,
        "client.id": config.application_id,
        **config.client_config,
        # librdkafka's lines through Python logging, warning and above, each repeat once.
        "logger": kafka_logger(),
    }


def consumer_settings(config: StreamsConfig, *, client_suffix: str = "") -> dict[str, Any]:
    """The main consumer: group id is the application id, so standard tooling shows its lag.

    Partitions are assigned by fluvial (never by a group rebalance), offsets are committed by
    the commit cycle only, and under exactly-once only committed records are read.
    """
    return {
        **_common(config),
        "client.id": f"{config.application_id}{client_suffix}-consumer",
        "group.id": config.application_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if config.exactly_once else "read_uncommitted",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
        "queued.max.messages.kbytes": 16384,
        # With its queue full, librdkafka's fetcher pauses fetch.queue.backoff.ms (1 s by
        # default) before it looks again: a worker that drains the queue faster than that
        # waited out the rest of the pause with nothing to process.
        "fetch.queue.backoff.ms": 10,
    }


def restore_consumer_settings(config: StreamsConfig) -> dict[str, Any]:
    """Reads changelogs; never joins or commits for the application's group."""
    return {
        **_common(config),
        "client.id": f"{config.application_id}-restore-consumer",
        "group.id": f"{config.application_id}-restore-unused",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if config.exactly_once else "read_uncommitted",
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 50,
        # A restore drains librdkafka's queue faster than it refills at the default pace:
        # with a full queue (queued.min.messages) the fetcher pauses fetch.queue.backoff.ms
        # (default 1 s), and the restore waited out most of those pauses.
        "fetch.queue.backoff.ms": 10,
    }


def producer_settings(config: StreamsConfig, transactional_id: str | None) -> dict[str, Any]:
    """Idempotent always; transactional under exactly-once.

    ``murmur2_random`` is the partitioner of Kafka's Java clients, so records keyed by fluvial
    land in the same partitions as records keyed by a Java producer or Kafka Streams.

    No compression and ``linger.ms`` 100, Kafka Streams' producer defaults: a busy worker sends
    full batches, which saves CPU per record (about 7% on Nexmark q16). Under exactly-once
    nothing is visible before a commit, whose flush sends everything, so the linger adds only
    the wait for that last send; under at-least-once a worker with nothing left to process
    sends what lingers at once (``Worker._send_lingering``). ``client_config`` may
    change both; idempotence, acks and the partitioner it may not.
    """
    settings: dict[str, Any] = {
        "linger.ms": 100,
        "compression.type": "none",
        "queue.buffering.max.messages": 200000,
        **_common(config),
        "client.id": f"{config.application_id}-producer",
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
    }
    if transactional_id is not None:
        settings["transactional.id"] = transactional_id
        interval = config.commit_interval_ms
        assert interval is not None  # StreamsConfig puts the guarantee's default in for None
        # Long enough for a slow commit, within the broker default cap of 15 minutes.
        settings["transaction.timeout.ms"] = min(900000, max(60000, 10 * to_millis(interval)))
    return settings


def admin_settings(config: StreamsConfig) -> dict[str, Any]:
    return {**_common(config), "client.id": f"{config.application_id}-admin"}


def check_client_settings(config: StreamsConfig) -> None:
    """Build the application's producer and consumer once and close them, before anything
    starts: a setting librdkafka refuses (an unknown property, ``linger.ms`` at or above
    ``message.timeout.ms``) stops the start with a :class:`ConfigError` rather than fail every
    worker start after it. Nothing is sent; the error names no setting's value.

    :raises ConfigError: naming the client and librdkafka's reason.
    """
    txn_id = f"{config.application_id}-settings-check" if config.exactly_once else None
    try:
        Producer(producer_settings(config, txn_id)).flush(0)
    except KafkaException as error:
        raise ConfigError(_refused("producer", error)) from None
    try:
        Consumer(consumer_settings(config)).close()
    except KafkaException as error:
        raise ConfigError(_refused("consumer", error)) from None


def _refused(client: str, error: KafkaException) -> str:
    reason = error.args[0].str() if error.args else str(error)
    return (
        f"the Kafka {client} refuses these settings: {reason}. Fix client_config "
        "(or the FLUVIAL_KAFKA_CLIENT_* variables) and start again"
    )
