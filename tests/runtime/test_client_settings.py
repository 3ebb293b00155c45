"""The producer's batching is the user's to tune; its delivery guarantees are not."""

from __future__ import annotations

from fluvial.config import StreamsConfig
from fluvial.runtime.clients import producer_settings


def _config(**client_config: str) -> StreamsConfig:
    return StreamsConfig(
        application_id="settings-app",
        bootstrap_servers="127.0.0.1:9092",
        processing_guarantee="exactly_once_v2",
        client_config=client_config,
    )


def test_batching_defaults_are_kafka_streams_no_compression_and_a_100_ms_linger() -> None:
    settings = producer_settings(_config(), "settings-app-0")
    assert settings["linger.ms"] == 100
    assert settings["compression.type"] == "none"
    assert settings["transactional.id"] == "settings-app-0"


def test_client_config_tunes_batching_but_cannot_weaken_delivery() -> None:
    settings = producer_settings(
        _config(**{
            "compression.type": "zstd",
            "linger.ms": "20",
            "acks": "1",
            "enable.idempotence": "false",
            "partitioner": "consistent_random",
        }),
        None,
    )  # fmt: skip
    assert settings["compression.type"] == "zstd"
    assert settings["linger.ms"] == "20"
    assert settings["acks"] == "all"
    assert settings["enable.idempotence"] is True
    assert settings["partitioner"] == "murmur2_random"
