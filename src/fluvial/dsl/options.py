"""Optional settings of DSL operations: names, serdes, materialization.

Each is a small immutable value with Kafka Streams' factory names in snake_case
(``Materialized.as_("counts")``, ``Grouped.with_(key_serde, value_serde)``). Every DSL method
also takes the common ones as keyword arguments, which is usually shorter in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from fluvial.config import to_millis
from fluvial.serdes import Serde
from fluvial.topology.nodes import STORE_TYPES, StreamPartitioner


@dataclass(frozen=True)
class Named:
    """A name for the processor an operation adds (instead of a generated one)."""

    name: str | None = None

    @staticmethod
    def as_(name: str) -> Named:
        return Named(name)


@dataclass(frozen=True)
class Consumed:
    """How a source topic is read: its serdes and the source node's name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Consumed:
        return Consumed(key_serde, value_serde)

    @staticmethod
    def as_(name: str) -> Consumed:
        return Consumed(name=name)

    def with_name(self, name: str) -> Consumed:
        return replace(self, name=name)


@dataclass(frozen=True)
class Produced:
    """How records are written to a topic: serdes, partitioner, sink name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Produced:
        return Produced(key_serde, value_serde)

    @staticmethod
    def as_(name: str) -> Produced:
        return Produced(name=name)

    def with_partitioner(self, partitioner: StreamPartitioner) -> Produced:
        return replace(self, partitioner=partitioner)


@dataclass(frozen=True)
class Grouped:
    """Serdes of a grouping, and the name of its repartition topic (``<app>-<name>-repartition``)."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None

    @staticmethod
    def as_(name: str) -> Grouped:
        return Grouped(name=name)

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Grouped:
        return Grouped(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> Grouped:
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Grouped:
        return replace(self, value_serde=serde)


@dataclass(frozen=True)
class Repartitioned:
    """Settings of an explicit ``repartition()``: topic name, serdes, partition count."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    num_partitions: int | None = None

    @staticmethod
    def as_(name: str) -> Repartitioned:
        return Repartitioned(name=name)

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Repartitioned:
        return Repartitioned(key_serde=key_serde, value_serde=value_serde)

    @staticmethod
    def with_number_of_partitions(num_partitions: int) -> Repartitioned:
        return Repartitioned(num_partitions=num_partitions)


@dataclass(frozen=True)
class Materialized:
    """How a table is stored: store name, serdes, cache, changelog, backend, retention.

    Caching and changelogging are on by default, as in Kafka Streams. ``store_type`` ``None``
    lets the runtime choose (RocksDB when a state directory exists).
    """

    store_name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    store_type: str | None = None
    retention_ms: int | None = None
    # Set for a versioned table: how far back as-of lookups are answered.
    history_retention_ms: int | None = None

    @staticmethod
    def as_(store_name: str) -> Materialized:
        return Materialized(store_name=store_name)

    @staticmethod
    def as_versioned(store_name: str | None, history_retention: int | timedelta) -> Materialized:
        """A versioned table: joins look it up as of the stream record's time (see KIP-889)."""
        return Materialized(store_name=store_name).with_history_retention(history_retention)

    def with_history_retention(self, history_retention: int | timedelta) -> Materialized:
        """Keep each key's history this long behind stream time: the store becomes versioned."""
        history = to_millis(history_retention, "history retention")
        # Versions must all reach the store: a cache would collapse them.
        return replace(self, history_retention_ms=history, caching_enabled=False)

    @property
    def versioned(self) -> bool:
        return self.history_retention_ms is not None

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Materialized:
        return Materialized(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> Materialized:
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Materialized:
        return replace(self, value_serde=serde)

    def with_caching_enabled(self) -> Materialized:
        return replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> Materialized:
        return replace(self, caching_enabled=False)

    def with_logging_enabled(self) -> Materialized:
        return replace(self, logging_enabled=True)

    def with_logging_disabled(self) -> Materialized:
        return replace(self, logging_enabled=False)

    def with_store_type(self, store_type: str) -> Materialized:
        if store_type not in STORE_TYPES:
            raise ValueError(
                f"store_type must be one of {', '.join(STORE_TYPES)}, got {store_type!r}"
            )
        return replace(self, store_type=store_type)

    def with_retention(self, retention: int | timedelta) -> Materialized:
        """How long a window or session store keeps windows; at least window size + grace."""
        return replace(self, retention_ms=to_millis(retention, "retention"))
