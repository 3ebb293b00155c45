"""``StreamsConfig``: every setting of a fluvial application, validated before anything starts."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from datetime import timedelta
from typing import Any, cast

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


def setting(
    meaning: str,
    default: Any = MISSING,
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    shown_default: str | None = None,
) -> Any:
    """A ``StreamsConfig`` field with what it means: the one source of the settings table.

    ``shown_default`` replaces the default's ``repr`` where a value alone would mislead (a
    default that depends on another setting).
    """
    metadata = {"meaning": meaning, "shown_default": shown_default}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class StreamsConfig:
    """Settings of one fluvial application, validated when made.

    Every setting is a keyword argument; an unknown name is an error that names the closest
    known one. Each setting's name, default and meaning are in the table of the reference
    (docs/reference/config.md), in ``fluvial run --help-config`` and at the end of this
    docstring in ``help(StreamsConfig)``: all three are generated from the definitions below.

    ```python
    config = StreamsConfig(
        application_id="pageviews",
        processing_guarantee="exactly_once_v2",
        processing_exception_handler="log_and_continue",
        dead_letter_topic="pageviews-dead-letters",
    )
    config.with_overrides(commit_interval_ms=1000)  # a copy with one setting changed
    ```
    """

    application_id: str = setting(
        "Names the application: its consumer group, transactional ids, state directory and "
        "the prefix of every internal topic. Letters, digits, '.', '_' and '-'.",
        "fluvial-app",
    )
    bootstrap_servers: str = setting(
        "host:port of one or more Kafka brokers, comma-separated.", "127.0.0.1:9092"
    )
    processing_guarantee: str = setting(
        "'exactly_once_v2': outputs, changelog records and input offsets commit in one Kafka "
        "transaction, and stale instances are fenced. 'at_least_once': flush, then commit "
        "offsets; after a crash a record may be processed twice.",
        AT_LEAST_ONCE,
    )
    commit_interval_ms: int | timedelta | None = setting(
        "How often each worker commits, in milliseconds or a timedelta. Under exactly_once_v2 "
        "it bounds output latency (readers see only committed records) and each hop through a "
        "repartition topic adds up to one interval.",
        None,
        shown_default="100 under exactly_once_v2, 30000 under at_least_once",
    )
    state_dir: str = setting(
        "Directory of local state: <state_dir>/<application_id>/<task>, a cache of the "
        "changelog topics.",
        "/tmp/fluvial",
    )
    cache_max_bytes: int = setting(
        "Byte budget of each task's record caches, which coalesce updates of a key until the "
        "next commit (fewer revisions, same final value). 0 turns caching off: every update is "
        "emitted.",
        10 * 1024 * 1024,
    )
    num_standby_replicas: int = setting(
        "Warm copies of every task's state kept on other slots (Spark engine), for fast "
        "failover and stale-allowed queries. The local engine ignores it.",
        0,
    )
    max_task_idle_ms: int | timedelta = setting(
        "How long a task with several input partitions waits for an empty one before "
        "processing the others (whose records could then move stream time past it). 0 waits "
        "only until that partition is known to be at its end.",
        0,
    )
    default_deserialization_exception_handler: str = setting(
        "What an undeserializable record (or a failed or negative timestamp extraction) does: "
        "'fail' stops the application; 'log_and_continue' skips it, counted, and sends it to "
        "dead_letter_topic when one is set.",
        "fail",
    )
    dead_letter_topic: str | None = setting(
        "Topic that receives records skipped by 'log_and_continue' handlers, as they were read, "
        "with fluvial.* headers naming the error and where the record came from. None: skipped "
        "records are only logged and counted.",
        None,
    )
    default_production_exception_handler: str = setting(
        "What a record the producer cannot deliver does: 'fail' stops the application; "
        "'continue' logs and skips it. Fatal producer errors always stop it.",
        "fail",
    )
    processing_exception_handler: str = setting(
        "What an exception raised by a user's function or processor does: 'fail' stops the "
        "application; 'log_and_continue' skips the record at that operator, counted, and sends "
        "it to dead_letter_topic when one is set. Errors of fluvial's own (serdes, stores, "
        "Kafka) are not processing errors.",
        "fail",
    )
    default_timestamp_extractor: Callable[[Any, int], int] | None = setting(
        "Event time of every record read from a user topic whose source sets no extractor of "
        "its own: fn(record, partition_time_ms) -> int milliseconds. None keeps each record's "
        "Kafka timestamp. A failing or negative extraction goes the deserialization handler's "
        "way.",
        None,
    )
    num_stream_threads: int = setting(
        "Worker slots of the local engine (fluvial run --workers overrides it). The Spark "
        "engine runs about one slot per executor core.",
        1,
    )
    replication_factor: int = setting(
        "Replication factor of the internal topics fluvial creates (repartition, changelog); "
        "-1 takes the broker's default.replication.factor.",
        -1,
    )
    windowstore_changelog_additional_retention_ms: int | timedelta = setting(
        "How long past a window or session store's own retention its changelog keeps records, "
        "in wall-clock time after they were written: how long an application may stay down, "
        "mid-window, and still restore its windows.",
        24 * 60 * 60 * 1000,
    )
    co_partitioning_check: str = setting(
        "Whether records of a joined or table topic are checked to sit on the partition Java's "
        "partitioner gives their key: 'warn' logs once and counts them, 'fail' stops, 'off' "
        "skips the check.",
        "warn",
    )
    catch_up_completeness: bool = setting(
        "Stream time that does not outrun a repartition topic's slowest writer, so a backlog "
        "or a replay gives the results live input gives (docs/semantics.md). False keeps Kafka "
        "Streams' rule: a downstream task's stream time follows its fastest writer.",
        True,
    )
    ensure_explicit_internal_resource_naming: bool = setting(
        "Refuse to start while any store, changelog or repartition topic has a name generated "
        "from its operator's position (KSTREAM-AGGREGATE-STATE-STORE-0000000004), which shifts "
        "when an operator is added before it; as Kafka Streams' "
        "ensure.explicit.internal.resource.naming.",
        False,
    )
    client_config: dict[str, Any] = setting(
        "Extra librdkafka settings passed to every client, e.g. SASL or TLS options. Their "
        "values are never printed.",
        default_factory=dict,
    )

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
        """Whether ``processing_guarantee`` is ``exactly_once_v2``."""
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


def settings() -> list[tuple[str, str, str]]:
    """Every ``StreamsConfig`` setting as ``(name, default, meaning)``, in definition order."""
    rows = []
    for f in fields(StreamsConfig):
        # .get: a setting defined without setting() still shows, and the docs check names it.
        shown = f.metadata.get("shown_default")
        if shown is None:
            factory = cast(Callable[[], Any], f.default_factory)
            default = factory() if f.default is MISSING else f.default
            shown = repr(default)
        rows.append((f.name, shown, f.metadata.get("meaning", "")))
    return rows


def _is_prose(name: str) -> bool:
    return (
        next(f for f in fields(StreamsConfig) if f.name == name).metadata["shown_default"]
        is not None
    )


def settings_markdown() -> str:
    """The settings as a Markdown table, for the reference page."""
    lines = ["| Setting | Default | Meaning |", "| --- | --- | --- |"]
    for name, default, meaning in settings():
        # < and > would read as HTML tags (<state_dir>) in the page.
        meaning = meaning.replace("<", "&lt;").replace(">", "&gt;")
        cells = (f"`{name}`", default if _is_prose(name) else f"`{default}`", meaning)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def settings_text(width: int = 80) -> str:
    """The settings for a terminal (``fluvial run --help-config``): each name and default on a
    line, its meaning wrapped to ``width`` below it."""
    import textwrap

    width = max(width, 40)
    blocks = ["StreamsConfig settings (APP.py: config = StreamsConfig(name=value, ...)):"]
    for name, default, meaning in settings():
        wrapped = textwrap.fill(
            meaning, width=width, initial_indent="    ", subsequent_indent="    ",
            break_on_hyphens=False,
        )  # fmt: skip
        blocks.append(f"{name} = {default}\n{wrapped}")
    return "\n\n".join(blocks)


StreamsConfig.__doc__ = f"{StreamsConfig.__doc__}\nSettings:\n\n{settings_text(92)}\n"
