"""``StreamsConfig``: every setting of a fluvial application, validated before anything starts."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from fluvial.errors import ConfigError

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"
PROCESSING_GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE_V2)

DESERIALIZATION_HANDLERS = ("fail", "log_and_continue")
CO_PARTITIONING_CHECKS = ("warn", "fail", "off")
PRODUCTION_HANDLERS = ("fail", "continue")
PROCESSING_HANDLERS = ("fail", "log_and_continue")

_APPLICATION_ID = re.compile(r"^[A-Za-z0-9._-]+$")


def to_millis(duration: int | float | timedelta, what: str = "duration") -> int:
    """Accept a duration as int milliseconds or a ``timedelta``; reject negatives."""
    if isinstance(duration, timedelta):
        ms = int(duration.total_seconds() * 1000)
    elif isinstance(duration, bool) or not isinstance(duration, int | float):
        raise ConfigError(f"{what} must be milliseconds (int) or a timedelta, got {duration!r}")
    else:
        ms = int(duration)
    if ms < 0:
        raise ConfigError(f"{what} must not be negative, got {ms} ms")
    return ms


@dataclass
class StreamsConfig:
    """Settings of one fluvial application.

    ``commit_interval_ms`` defaults to 100 under ``exactly_once_v2`` and 30000 under
    ``at_least_once``, as in Kafka Streams.
    """

    application_id: str = "fluvial-app"
    bootstrap_servers: str = "127.0.0.1:9092"
    processing_guarantee: str = AT_LEAST_ONCE
    commit_interval_ms: int | timedelta | None = None
    state_dir: str = "/tmp/fluvial"
    cache_max_bytes: int = 10 * 1024 * 1024
    num_standby_replicas: int = 0
    max_task_idle_ms: int | timedelta = 0
    default_deserialization_exception_handler: str = "fail"
    dead_letter_topic: str | None = None
    # What a record the producer cannot deliver does: stop the application ("fail"), or be
    # logged and skipped ("continue"). Fatal producer errors always stop it.
    default_production_exception_handler: str = "fail"
    # What an exception raised by a user's function or processor does: stop the application
    # ("fail"), or skip the record at that operator, counted and sent to dead_letter_topic when
    # one is set ("log_and_continue"). Errors of fluvial's own (serdes, stores, Kafka) always
    # go their own way.
    processing_exception_handler: str = "fail"
    # The event time of every record read from a user topic whose source sets no extractor of its
    # own: fn(record, partition_time_ms) -> int milliseconds. None keeps each record's Kafka
    # timestamp. A negative or failing extraction goes the deserialization handler's way.
    default_timestamp_extractor: Callable[[Any, int], int] | None = None
    num_stream_threads: int = 1
    replication_factor: int = -1
    # How long past a window or session store's own retention its changelog keeps records, in
    # wall-clock time after they were written (Kafka Streams'
    # windowstore.changelog.additional.retention.ms). It is how long an application may stay
    # down, mid-window, and still restore its windows.
    windowstore_changelog_additional_retention_ms: int | timedelta = 24 * 60 * 60 * 1000
    # Whether records of a joined or table topic are checked to sit on the partition Java's
    # partitioner gives their key ("warn": log once and count them; "fail": stop; "off").
    co_partitioning_check: str = "warn"
    # Stream time that does not outrun a repartition topic's slowest writer, so a backlog or a
    # replay gives the results live input gives (docs/semantics.md, "Catch-up completeness").
    # False keeps Kafka Streams' rule: a downstream task's stream time follows its fastest writer.
    catch_up_completeness: bool = True
    # Refuse to start while any store, changelog or repartition topic has a generated name
    # (``KSTREAM-AGGREGATE-STATE-STORE-0000000004``): such names shift when an operator is added
    # before them (Kafka Streams' ensure.explicit.internal.resource.naming, KIP-1111).
    ensure_explicit_internal_resource_naming: bool = False
    # Extra librdkafka settings passed to every client (for example SASL or TLS options).
    client_config: dict[str, Any] = field(default_factory=dict)

    def __new__(cls, *args: Any, **kwargs: Any) -> StreamsConfig:
        # Before the dataclass's own __init__, whose TypeError would not say what to write.
        _refuse_unknown(kwargs)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if not self.application_id or not _APPLICATION_ID.match(self.application_id):
            raise ConfigError(
                f"application_id {self.application_id!r} is invalid: use letters, digits, '.', '_' "
                "and '-' (it names the consumer group and every internal topic)"
            )
        if self.processing_guarantee not in PROCESSING_GUARANTEES:
            raise ConfigError(
                f"processing_guarantee {self.processing_guarantee!r} is unknown: "
                f"use one of {', '.join(PROCESSING_GUARANTEES)}"
            )
        if self.commit_interval_ms is None:
            self.commit_interval_ms = 100 if self.exactly_once else 30000
        self.commit_interval_ms = to_millis(self.commit_interval_ms, "commit_interval_ms")
        self.max_task_idle_ms = to_millis(self.max_task_idle_ms, "max_task_idle_ms")
        self.windowstore_changelog_additional_retention_ms = to_millis(
            self.windowstore_changelog_additional_retention_ms,
            "windowstore_changelog_additional_retention_ms",
        )
        if self.cache_max_bytes < 0:
            raise ConfigError("cache_max_bytes must be >= 0 (0 turns the record cache off)")
        if self.num_standby_replicas < 0:
            raise ConfigError("num_standby_replicas must be >= 0")
        if self.num_stream_threads < 1:
            raise ConfigError("num_stream_threads must be >= 1")
        if self.default_deserialization_exception_handler not in DESERIALIZATION_HANDLERS:
            raise ConfigError(
                "default_deserialization_exception_handler must be one of "
                f"{', '.join(DESERIALIZATION_HANDLERS)}, got "
                f"{self.default_deserialization_exception_handler!r}"
            )
        if self.default_production_exception_handler not in PRODUCTION_HANDLERS:
            raise ConfigError(
                "default_production_exception_handler must be one of "
                f"{', '.join(PRODUCTION_HANDLERS)}, got "
                f"{self.default_production_exception_handler!r}"
            )
        if self.co_partitioning_check not in CO_PARTITIONING_CHECKS:
            raise ConfigError(
                f"co_partitioning_check must be one of {', '.join(CO_PARTITIONING_CHECKS)}, got "
                f"{self.co_partitioning_check!r}"
            )
        if self.processing_exception_handler not in PROCESSING_HANDLERS:
            raise ConfigError(
                "processing_exception_handler must be one of "
                f"{', '.join(PROCESSING_HANDLERS)}, got {self.processing_exception_handler!r}"
            )
        if self.default_timestamp_extractor is not None and not callable(
            self.default_timestamp_extractor
        ):
            raise ConfigError(
                "default_timestamp_extractor must be a function (record, partition_time_ms) -> "
                f"int milliseconds, got {self.default_timestamp_extractor!r}"
            )
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers is empty: give host:port of at least one broker")

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == EXACTLY_ONCE_V2

    def with_overrides(self, **overrides: Any) -> StreamsConfig:
        """A copy with some settings replaced; unknown names are an error."""
        _refuse_unknown(overrides)
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if "processing_guarantee" in overrides and "commit_interval_ms" not in overrides:
            values["commit_interval_ms"] = None
        values.update(overrides)
        return StreamsConfig(**values)

    def __repr__(self) -> str:
        # client_config may hold SASL passwords or TLS keys: never print its values.
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "client_config"}
        shown["client_config"] = {k: "***" for k in self.client_config}
        inner = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"StreamsConfig({inner})"


def _refuse_unknown(settings: dict[str, Any]) -> None:
    """An unknown setting is an error naming it and the setting it most looks like."""
    import difflib

    known = [f.name for f in fields(StreamsConfig)]
    unknown = sorted(set(settings) - set(known))
    if not unknown:
        return
    hints = []
    for name in unknown:
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hints.append(f"{name!r} (did you mean {near[0]!r}?)" if near else repr(name))
    raise ConfigError(
        f"unknown StreamsConfig setting(s): {', '.join(hints)}; the settings are listed in "
        "docs/reference (fluvial.StreamsConfig)"
    )
