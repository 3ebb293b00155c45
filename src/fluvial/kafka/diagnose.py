"""Turning what librdkafka says into one fluvial message that says what to check.

- :func:`check_reachable`: a cluster that does not answer at start is one error naming the
  bootstrap servers, within a timeout, instead of a stream of librdkafka lines.
- :func:`check_client_keys`: a misspelt ``client_config`` key is an error that names it (and
  the setting it looks like) before any client is made.
- :func:`kafka_logger`: librdkafka's own log lines go through Python logging
  (``fluvial.kafka.librdkafka``), at warning and above by default, each repeated line once.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from fluvial.errors import ConfigError, FluvialError

LIBRDKAFKA_LOGGER = "fluvial.kafka.librdkafka"
DEFAULT_REACH_TIMEOUT_S = 10.0

# Settings users commonly put in client_config; a misspelt key is matched against them for a
# "did you mean". librdkafka itself decides what is valid.
_COMMON_KEYS = (
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.oauthbearer.config", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.keytab",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem", "client.id", "client.rack",
    "socket.timeout.ms", "request.timeout.ms", "message.max.bytes", "fetch.max.bytes",
    "max.partition.fetch.bytes", "session.timeout.ms", "linger.ms", "batch.size",
    "compression.type", "acks", "retries", "retry.backoff.ms", "metadata.max.age.ms",
    "broker.address.family", "debug", "statistics.interval.ms",
)  # fmt: skip


def check_client_keys(settings: Mapping[str, Any], where: str = "client_config") -> None:
    """Refuse a key librdkafka does not know, naming it and the nearest known setting.

    librdkafka checks keys when a client is made, deep inside the run; making one client here,
    with no bootstrap servers (so it connects nowhere), finds the bad key before anything starts.
    """
    from confluent_kafka import KafkaException, Producer

    for key in settings:
        if not isinstance(key, str):
            raise ConfigError(f"{where} key {key!r} must be a string such as 'sasl.username'")
        try:
            Producer({key: settings[key], "log_level": 0})
        except KafkaException as error:
            text = str(error.args[0].str() if error.args else error)
            if "No such configuration property" not in text:
                continue  # a value librdkafka rejects alone (a file path, say) is checked later
            near = difflib.get_close_matches(key, _COMMON_KEYS, n=1, cutoff=0.75)
            hint = (
                f": did you mean {near[0]!r}?"
                if near
                else (": see librdkafka's CONFIGURATION.md for the settings it knows")
            )
            raise ConfigError(f"{key!r} in {where} is not a Kafka client setting{hint}") from None
        except (TypeError, ValueError):
            continue  # a wrong value type is reported by the client that uses it


def unreachable_message(bootstrap_servers: str, timeout_s: float, reason: str = "") -> str:
    because = f" ({reason})" if reason else ""
    return (
        f"Kafka at {bootstrap_servers} did not answer within {timeout_s:g} s{because}. Check "
        "that a broker runs there (for the local cluster: fluvial kafka status), that the host "
        "and port are right (--bootstrap-servers, or bootstrap_servers in StreamsConfig or the "
        "client settings file), and that the broker's advertised listeners are reachable from "
        "this machine"
    )


def check_reachable(
    bootstrap_servers: str,
    settings: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_REACH_TIMEOUT_S,
) -> None:
    """Ask the cluster for its metadata once; no answer within ``timeout_s`` is one clear error.

    Silent while it tries: librdkafka's connection failures are what this message replaces.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, **(settings or {}),
                              "log_level": 0, "error_cb": lambda _error: None}  # fmt: skip
    admin = AdminClient(config)
    end = time.monotonic() + timeout_s
    reason = ""
    while True:
        try:
            # Short calls, so the check ends soon after the deadline.
            admin.list_topics(timeout=min(1.0, max(0.1, end - time.monotonic())))
            return
        except KafkaException as error:
            reason = error.args[0].str() if error.args else str(error)
        if time.monotonic() >= end:
            raise FluvialError(unreachable_message(bootstrap_servers, timeout_s, reason))


class _Deduplicate(logging.Filter):
    """Passes a librdkafka line once; the same line again only after ``quiet_s``.

    librdkafka repeats a failing connection's line every retry (every 50 ms to 1 s); one line
    says it, the next minute's copy says it still holds.
    """

    _VARYING = re.compile(r"after \d+ms|\d+ms|#\d+")

    def __init__(self, quiet_s: float = 60.0) -> None:
        super().__init__()
        self.quiet_s = quiet_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = self._VARYING.sub("", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.quiet_s:
                return False
            if len(self._last) > 1000:
                self._last.clear()
            self._last[key] = now
        return True


_logger_lock = threading.Lock()


def kafka_logger() -> logging.Logger:
    """The logger every fluvial Kafka client hands librdkafka (its ``logger`` setting).

    Warning and above by default; ``logging.getLogger("fluvial.kafka.librdkafka").setLevel``
    changes that. Identical lines are passed once a minute.
    """
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    with _logger_lock:
        if not any(isinstance(f, _Deduplicate) for f in logger.filters):
            logger.addFilter(_Deduplicate())
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.WARNING)
            if not logger.handlers and not logging.getLogger().handlers:
                handler = logging.StreamHandler()
                handler.setFormatter(logging.Formatter("kafka %(levelname)s: %(message)s"))
                logger.addHandler(handler)
    return logger
