"""Bad configuration is refused before anything starts, with the fix in the message."""

from __future__ import annotations

import pytest

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import ConfigError, TopologyError
from fluvial.redaction import redacted
from fluvial.runtime import Application


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"processing_guarantee": "exactly_once"}, "exactly_once_v2"),
        ({"application_id": "has space"}, "application_id"),
        ({"commit_interval_ms": -5}, "must not be negative"),
        ({"default_deserialization_exception_handler": "ignore"}, "log_and_continue"),
        ({"default_production_exception_handler": "retry"}, "continue"),
        ({"num_standby_replicas": -1}, "num_standby_replicas"),
    ],
)
def test_invalid_settings_name_the_problem(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StreamsConfig(**settings)


def test_commit_interval_defaults_follow_the_guarantee() -> None:
    assert StreamsConfig().commit_interval_ms == 30000
    assert StreamsConfig(processing_guarantee="exactly_once_v2").commit_interval_ms == 100
    eos = StreamsConfig().with_overrides(processing_guarantee="exactly_once_v2")
    assert eos.commit_interval_ms == 100


def test_secrets_never_appear_in_reprs_or_logs() -> None:
    config = StreamsConfig(client_config={"sasl.password": "hunter2", "ssl.key.pem": "KEY"})
    assert "hunter2" not in repr(config) and "KEY" not in repr(config)
    shown = redacted({"sasl.password": "hunter2", "ssl.key.password": "x", "acks": "all"})
    assert shown == {"sasl.password": "***", "ssl.key.password": "***", "acks": "all"}


@pytest.mark.parametrize(
    ("client_config", "message"),
    [
        ({"linger.ms": "900000"}, "producer refuses these settings: .*linger.ms"),
        ({"no.such.property": "1"}, "refuses these settings: .*no.such.property"),
    ],
)
def test_client_settings_librdkafka_refuses_stop_the_start(
    client_config: dict[str, str], message: str
) -> None:
    # No broker listens here: the refusal must come before anything contacts one.
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.string()).to("out")
    secret = {"sasl.password": "hunter2"}
    config = StreamsConfig(application_id="refused-settings", bootstrap_servers="127.0.0.1:1",
                           client_config={**client_config, **secret})  # fmt: skip
    with pytest.raises(ConfigError, match=message) as refused:
        Application(builder.build(), config).start()
    assert "hunter2" not in str(refused.value)


@pytest.mark.kafka
def test_missing_source_topic_is_reported_before_start(bootstrap_servers: str, unique_name) -> None:
    builder = StreamsBuilder()
    builder.stream(unique_name("absent"), key_serde=serdes.string()).to(unique_name("out"))
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers)
    with pytest.raises(ConfigError, match="do not exist"):
        Application(builder.build(), config).start()


@pytest.mark.kafka
def test_missing_output_topic_is_reported_before_start_with_the_command_that_creates_it(
    bootstrap_servers: str, topic_factory, unique_name
) -> None:
    source, missing = topic_factory("in", 3), unique_name("out")
    builder = StreamsBuilder()
    builder.stream(source, key_serde=serdes.string()).to(missing)
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers)
    with pytest.raises(ConfigError, match=f"output topic '{missing}' does not exist") as refused:
        Application(builder.build(), config).start()
    assert f"fluvial topics create {missing} --partitions 3" in str(refused.value)


@pytest.mark.kafka
def test_join_of_differently_partitioned_topics_is_refused(
    bootstrap_servers: str, topic_factory, unique_name
) -> None:
    left, right = topic_factory("clicks", 4), topic_factory("users", 2)
    builder = StreamsBuilder()
    users = builder.table(right, key_serde=serdes.string(), value_serde=serdes.string())
    (
        builder.stream(left, key_serde=serdes.string(), value_serde=serdes.string())
        .join(users, lambda click, user: f"{user}:{click}")
        .to(unique_name("out"))
    )
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers)
    with pytest.raises(TopologyError, match="co-partitioned"):
        Application(builder.build(), config).start()
