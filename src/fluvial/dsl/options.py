"""Optional settings of DSL operations: names, serdes, materialization.

Each is a small immutable value with Kafka Streams' factory names in snake_case
(``Materialized.as_("counts")``, ``Grouped.with_(key_serde, value_serde)``). Every setter works
both ways, as in Kafka Streams: on the class it starts from the defaults, on a value it returns a
copy that keeps every earlier setting, so ``Materialized.as_("counts").with_(k, v)`` keeps its
name. Every DSL method also takes the common ones as keyword arguments, which is usually shorter
in Python.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Generic, TypeVar

from fluvial.config import to_millis
from fluvial.serdes import Serde
from fluvial.topology.nodes import STORE_TYPES, StreamPartitioner

OptionT = TypeVar("OptionT")


class fluent(Generic[OptionT]):  # noqa: N801 - used as a decorator, like staticmethod
    """A setter that is also a factory: on the class it applies to the defaults
    (``Grouped.with_(k, v)``), on a value to that value (``Grouped.as_("g").with_(k, v)``)."""

    def __init__(self, setter: Callable[..., OptionT]) -> None:
        self._setter = setter
        functools.update_wrapper(self, setter)  # type: ignore[arg-type]

    def __get__(self, obj: OptionT | None, owner: type[OptionT]) -> Callable[..., OptionT]:
        return types.MethodType(self._setter, owner() if obj is None else obj)


class _WithSerdes:
    """``with_key_serde``/``with_value_serde`` of the options that carry serdes."""

    @fluent
    def with_key_serde(self: OptionT, serde: Serde[Any]) -> OptionT:
        """The serde of keys.

        :param serde: e.g. ``serdes.string()``; see :mod:`fluvial.serdes`.
        :returns: a copy with that key serde and every earlier setting (on the class: the defaults
            plus that serde).
        """
        return replace(self, key_serde=serde)  # type: ignore[type-var]

    @fluent
    def with_value_serde(self: OptionT, serde: Serde[Any]) -> OptionT:
        """The serde of values.

        :param serde: e.g. ``serdes.json()``; see :mod:`fluvial.serdes`.
        :returns: a copy with that value serde and every earlier setting (on the class: the defaults
            plus that serde).
        """
        return replace(self, value_serde=serde)  # type: ignore[type-var]


class _WithName:
    """``with_name`` of the options that name a processor or topic."""

    @fluent
    def with_name(self: OptionT, name: str) -> OptionT:
        """The name of the processor, topic or store this option names (as ``as_``).

        :param name: the name; it keeps generated names from shifting when the topology changes.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, name=name)  # type: ignore[type-var]


class _WithOtherValueSerde:
    """``with_other_value_serde`` of the join options."""

    @fluent
    def with_other_value_serde(self: OptionT, serde: Serde[Any]) -> OptionT:
        """The serde of the other side's values (the table's, or the other stream's).

        :param serde: the other side's value serde.
        :returns: a copy with that serde and every earlier setting.
        """
        return replace(self, other_value_serde=serde)  # type: ignore[type-var]


@dataclass(frozen=True)
class Named(_WithName):
    """A name for the processor an operation adds (instead of a generated one)."""

    name: str | None = None

    @fluent
    def as_(self, name: str) -> Named:
        """A processor name.

        :param name: the name of the processor the operation adds, instead of a generated one.
        :returns: ``Named(name)``; every DSL method also takes ``named="..."`` directly.
        """
        return replace(self, name=name)


@dataclass(frozen=True)
class Consumed(_WithSerdes, _WithName):
    """How a source topic is read: its serdes, the source node's name, and (as in Kafka Streams)
    its event time and where it starts without a committed offset."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    name: str | None = None
    timestamp_extractor: Callable[[Any, int], int] | None = None
    auto_offset_reset: str | None = None

    @fluent
    def with_(self, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Consumed:
        """Both serdes of the source topic.

        ```python
        consumed = Consumed.with_(serdes.string(), serdes.json()).as_("clicks-source")
        builder.stream("clicks", consumed)
        ```

        :param key_serde: serde of its keys (None: raw ``bytes``).
        :param value_serde: serde of its values (None: raw ``bytes``).
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(self, key_serde=key_serde, value_serde=value_serde)

    @fluent
    def as_(self, name: str) -> Consumed:
        """The source node's name.

        :param name: the processor name of the source, instead of a generated one.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, name=name)

    @fluent
    def with_timestamp_extractor(self, extractor: Callable[[Any, int], int]) -> Consumed:
        """Event time from the record: ``extractor(record, partition_time_ms) -> int`` ms."""
        return replace(self, timestamp_extractor=extractor)

    @fluent
    def with_offset_reset_policy(self, policy: str) -> Consumed:
        """Where a partition with no committed offset starts: ``"earliest"`` or ``"latest"``."""
        return replace(self, auto_offset_reset=policy)


@dataclass(frozen=True)
class Produced(_WithSerdes, _WithName):
    """How records are written to a topic: serdes, partitioner, sink name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    name: str | None = None

    @fluent
    def with_(self, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Produced:
        """Both serdes of the output topic.

        ```python
        counts.to_stream().to("counts", Produced.with_(serdes.string(), serdes.long()))
        ```

        :param key_serde: serde of its keys (None: the stream's).
        :param value_serde: serde of its values (None: the stream's).
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(self, key_serde=key_serde, value_serde=value_serde)

    @fluent
    def as_(self, name: str) -> Produced:
        """The sink node's name.

        :param name: the processor name of the sink, instead of a generated one.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, name=name)

    @fluent
    def with_partitioner(self, partitioner: StreamPartitioner) -> Produced:
        """Choose each record's partition yourself.

        :param partitioner: ``partitioner(topic, key, value, num_partitions) -> partition`` or None
            for the default (Java's murmur2 of the key bytes, as Kafka Streams places records).
        :returns: a copy with that partitioner and every earlier setting.
        """
        return replace(self, partitioner=partitioner)


@dataclass(frozen=True)
class Grouped(_WithSerdes, _WithName):
    """Serdes of a grouping, and the name of its repartition topic (``<app>-<name>-repartition``)."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None

    @fluent
    def as_(self, name: str) -> Grouped:
        """The grouping's name: its repartition topic becomes
        ``<application_id>-<name>-repartition``.

        :param name: the name; naming the grouping keeps the topic's name when the topology changes.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, name=name)

    @fluent
    def with_(self, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Grouped:
        """Both serdes of the grouped records (they write the repartition topic, if any).

        ```python
        stream.group_by(lambda k, v: v["user"], Grouped.with_(serdes.string(), serdes.json()))
        ```

        :param key_serde: serde of the grouping key (None: the stream's).
        :param value_serde: serde of the values (None: the stream's).
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(self, key_serde=key_serde, value_serde=value_serde)


@dataclass(frozen=True)
class Repartitioned(_WithSerdes, _WithName):
    """Settings of an explicit ``repartition()``: topic name, serdes, partition count."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    num_partitions: int | None = None

    @fluent
    def as_(self, name: str) -> Repartitioned:
        """The repartition topic's name: ``<application_id>-<name>-repartition``.

        :param name: the name.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, name=name)

    @fluent
    def with_(self, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Repartitioned:
        """Both serdes the repartition topic is written with.

        :param key_serde: serde of its keys (None: the stream's).
        :param value_serde: serde of its values (None: the stream's).
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(self, key_serde=key_serde, value_serde=value_serde)

    @fluent
    def with_number_of_partitions(self, num_partitions: int) -> Repartitioned:
        """The repartition topic's partition count.

        :param num_partitions: how many partitions; by default, as many as the stream's source
            topics.
        :returns: a copy with that count and every earlier setting.
        """
        return replace(self, num_partitions=num_partitions)


@dataclass(frozen=True)
class Joined(_WithSerdes, _WithName, _WithOtherValueSerde):
    """Serdes and name of a stream-table join (``stream.join(table, joiner, Joined.with_(...))``).

    ``key_serde`` and ``value_serde`` are the stream side's: they write its repartition topic
    when the stream was re-keyed before the join.
    """

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None

    @fluent
    def with_(
        self,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None = None,
    ) -> Joined:
        """The serdes of a stream-table join.

        ```python
        orders.join(customers, lambda order, customer: {**order, "name": customer["name"]},
                    Joined.with_(serdes.string(), serdes.json(), serdes.json()))
        ```

        :param key_serde: serde of the stream's keys.
        :param value_serde: serde of the stream's values (they write its repartition topic when the
            stream was re-keyed before the join).
        :param other_value_serde: serde of the table's values.
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(
            self, key_serde=key_serde, value_serde=value_serde, other_value_serde=other_value_serde
        )

    @fluent
    def as_(self, name: str) -> Joined:
        """The join's name: its processor and, when the stream is repartitioned, its topic.

        :param name: the name.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, name=name)


@dataclass(frozen=True)
class StreamJoined(_WithSerdes, _WithName, _WithOtherValueSerde):
    """Serdes and names of a stream-stream join: its processors, stores and repartition topics."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None
    store_name: str | None = None

    @fluent
    def with_(
        self,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None = None,
    ) -> StreamJoined:
        """The serdes of a stream-stream join (they write its window stores and repartition topics).

        :param key_serde: serde of both streams' keys.
        :param value_serde: serde of this (left) stream's values.
        :param other_value_serde: serde of the other (right) stream's values.
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(
            self, key_serde=key_serde, value_serde=value_serde, other_value_serde=other_value_serde
        )

    @fluent
    def as_(self, store_name: str) -> StreamJoined:
        """The prefix of the join's store names (``<name>-this-join-store`` and
        ``<name>-other-join-store``).

        :param store_name: the prefix.
        :returns: a copy with that store name and every earlier setting.
        """
        return replace(self, store_name=store_name)

    @fluent
    def with_store_name(self, store_name: str) -> StreamJoined:
        """The prefix of the join's store names, as ``as_``.

        :param store_name: the prefix.
        :returns: a copy with that store name and every earlier setting.
        """
        return replace(self, store_name=store_name)


@dataclass(frozen=True)
class Materialized(_WithSerdes):
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

    @fluent
    def as_(self, store_name: str) -> Materialized:
        """The store's name, which makes the table queryable under it.

        ```python
        grouped.count(materialized=Materialized.as_("counts").with_value_serde(serdes.long()))
        ```

        :param store_name: the name; the changelog topic is ``<application_id>-<name>-changelog``.
        :returns: a copy with that name and every earlier setting.
        """
        return replace(self, store_name=store_name)

    @fluent
    def as_versioned(
        self, store_name: str | None, history_retention: int | timedelta
    ) -> Materialized:
        """A versioned table: joins look it up as of the stream record's time (see KIP-889)."""
        return replace(self, store_name=store_name).with_history_retention(history_retention)

    @fluent
    def with_history_retention(self, history_retention: int | timedelta) -> Materialized:
        """Keep each key's history this long behind stream time: the store becomes versioned."""
        history = to_millis(history_retention, "history retention")
        # Versions must all reach the store: a cache would collapse them.
        return replace(self, history_retention_ms=history, caching_enabled=False)

    @property
    def versioned(self) -> bool:
        """Whether the store keeps each key's history (``as_versioned``,
        ``with_history_retention``)."""
        return self.history_retention_ms is not None

    @fluent
    def with_(self, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Materialized:
        """Both serdes of the store (and of its changelog topic).

        :param key_serde: serde of its keys (None: the table's).
        :param value_serde: serde of its values (None: the table's, or the aggregate's default).
        :returns: a copy with those serdes and every earlier setting.
        """
        return replace(self, key_serde=key_serde, value_serde=value_serde)

    @fluent
    def with_caching_enabled(self) -> Materialized:
        """Coalesce a key's updates in the record cache until the next commit (the default).

        :returns: a copy with caching on and every earlier setting.
        """
        return replace(self, caching_enabled=True)

    @fluent
    def with_caching_disabled(self) -> Materialized:
        """Emit every update downstream at once, without the record cache.

        :returns: a copy with caching off and every earlier setting.
        """
        return replace(self, caching_enabled=False)

    @fluent
    def with_logging_enabled(self) -> Materialized:
        """Back the store with a changelog topic, from which it is restored (the default).

        :returns: a copy with changelogging on and every earlier setting.
        """
        return replace(self, logging_enabled=True)

    @fluent
    def with_logging_disabled(self) -> Materialized:
        """No changelog topic: the store cannot be restored after a loss of local state.

        :returns: a copy with changelogging off and every earlier setting.
        """
        return replace(self, logging_enabled=False)

    @fluent
    def with_store_type(self, store_type: str) -> Materialized:
        """The store's backend.

        :param store_type: ``"rocksdb"`` or ``"in_memory"``; by default the runtime chooses
            (RocksDB when a state directory exists).
        :returns: a copy with that backend and every earlier setting.
        :raises ValueError: for any other store type.
        """
        if store_type not in STORE_TYPES:
            raise ValueError(
                f"store_type must be one of {', '.join(STORE_TYPES)}, got {store_type!r}"
            )
        return replace(self, store_type=store_type)

    @fluent
    def with_retention(self, retention: int | timedelta) -> Materialized:
        """How long a window or session store keeps windows; at least window size + grace."""
        return replace(self, retention_ms=to_millis(retention, "retention"))
