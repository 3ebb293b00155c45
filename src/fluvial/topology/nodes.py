"""The static pieces of a topology: source, processor and sink nodes, and state store specs.

These are descriptions, not running things. A task turns each node into a live processor
(:mod:`fluvial.processor.task`), so one topology can run as many tasks as it has partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fluvial.processor_api import ProcessorSupplier
from fluvial.serdes import Serde

StreamPartitioner = Callable[[str, Any, Any, int], int | None]
"""``(topic, key, value, num_partitions) -> partition`` or ``None`` for the default partitioner."""

OFFSET_RESETS = ("earliest", "latest")


@dataclass
class Node:
    """A node of the processor graph, named uniquely within its topology."""

    name: str
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


@dataclass
class SourceNode(Node):
    """Reads topics and turns their bytes into objects with its serdes.

    ``topics`` hold internal topic names unprefixed; the runtime's application id completes them.
    """

    topics: list[str] = field(default_factory=list)
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    # fn(record, partition_time_ms) -> event time in ms; None: the config's default, if any.
    timestamp_extractor: Callable[[Any, int], int] | None = None
    # Where to start in a partition with no committed offset: "earliest" or "latest".
    auto_offset_reset: str = "earliest"


@dataclass
class ProcessorNode(Node):
    """Runs a processor made fresh for each task by ``supplier``."""

    supplier: ProcessorSupplier | None = None
    stores: list[str] = field(default_factory=list)


@dataclass
class SinkNode(Node):
    """Serializes records and hands them to the task's record collector."""

    topic: str = ""
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None


KEY_VALUE = "key_value"
TIMESTAMPED_KEY_VALUE = "timestamped_key_value"
WINDOW = "window"
SESSION = "session"
VERSIONED_KEY_VALUE = "versioned_key_value"
STORE_KINDS = (KEY_VALUE, TIMESTAMPED_KEY_VALUE, WINDOW, SESSION, VERSIONED_KEY_VALUE)

IN_MEMORY = "in_memory"
ROCKSDB = "rocksdb"
STORE_TYPES = (IN_MEMORY, ROCKSDB)

ONE_DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class StoreSpec:
    """Everything needed to create one state store in every task that uses it.

    ``store_type`` ``None`` means "the runtime's default backend", so a test can run the same
    topology over in-memory and RocksDB stores without rebuilding it.
    """

    name: str
    kind: str
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    store_type: str | None = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    retention_ms: int | None = None
    window_size_ms: int | None = None
    retain_duplicates: bool = False
    # Versioned stores: how far back (behind stream time) as-of lookups are answered.
    history_retention_ms: int | None = None
    # Set for stores that the DSL itself reads and writes as bytes; user stores get typed views.
    internal_format: bool = False
    # The changelog's name without the application id, when an earlier deployment's changelog
    # was carried over to this store (``fluvial upgrade``); None: ``<store>-changelog``.
    changelog_name: str | None = None

    def changelog_topic(self, application_id: str) -> str | None:
        """``<application_id>-<store>-changelog``, or ``None`` when logging is off."""
        if not self.logging_enabled:
            return None
        return f"{application_id}-{self.changelog_name or self.name + '-changelog'}"

    @property
    def time_retained(self) -> bool:
        """Whether the changelog also expires records by time (window and session stores)."""
        return self.kind in (WINDOW, SESSION)

    def changelog_configs(self, additional_retention_ms: int = ONE_DAY_MS) -> dict[str, str]:
        """Topic configs the changelog needs: compacted; windows and sessions also expire.

        Window and session changelogs are stamped by the broker at append time
        (``LogAppendTime``), so their time retention counts from when a record was written, not
        from its event time. A backfill of old event times then keeps its changelog for as long
        as a live application would; with event-time stamps the broker would delete it at once.
        """
        if self.time_retained:
            retention = (self.retention_ms or 0) + additional_retention_ms
            return {
                "cleanup.policy": "compact,delete",
                "retention.ms": str(retention),
                "message.timestamp.type": "LogAppendTime",
            }
        if self.kind == VERSIONED_KEY_VALUE:
            # Compaction must not drop older versions while they are still within history.
            lag = (self.history_retention_ms or 0) + ONE_DAY_MS
            return {"cleanup.policy": "compact", "min.compaction.lag.ms": str(lag)}
        return {"cleanup.policy": "compact"}
