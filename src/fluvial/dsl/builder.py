"""``StreamsBuilder``: where a topology starts (``stream``, ``table``) and ends (``build``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluvial.dsl import graph
from fluvial.dsl.copartition import resolve_key_serdes
from fluvial.dsl.getters import store_getter
from fluvial.dsl.global_table import GlobalKTable
from fluvial.dsl.kstream import KStream
from fluvial.dsl.ktable import KTable
from fluvial.dsl.old_values import SourceOldValues
from fluvial.dsl.options import Consumed, Materialized
from fluvial.dsl.table_ops import TableSourceProcessor
from fluvial.processor.stores import StoreBuilder
from fluvial.serdes import Serde
from fluvial.topology.builder import InternalTopologyBuilder
from fluvial.topology.topology import Topology


class StreamsBuilder:
    """Builds a topology with the DSL. Sources without serdes yield raw ``bytes``."""

    def __init__(self) -> None:
        self._itb = InternalTopologyBuilder()

    def stream(
        self,
        topics: str | list[str],
        consumed: Consumed | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        auto_offset_reset: str | None = None,
    ) -> KStream:
        """A stream of the records of one topic (or several, interleaved by timestamp).

        ``timestamp_extractor(record, partition_time_ms) -> int`` gives each record's event
        time (default: the config's ``default_timestamp_extractor``, else the Kafka
        timestamp); ``auto_offset_reset`` ("earliest", the default, or "latest") is where a
        partition without a committed offset starts.

        ```python
        readings = builder.stream("readings", key_serde=serdes.string(), value_serde=serdes.json(),
                                  timestamp_extractor=lambda record, _: record.value["ts_ms"])
        ```

        :param topics: a topic, or a list of topics read as one stream.
        :param consumed: serdes, source name, extractor and offset reset as a
            :class:`~fluvial.Consumed`; the keyword arguments take precedence over it.
        :param key_serde: serde of the keys (default: raw ``bytes``).
        :param value_serde: serde of the values (default: raw ``bytes``).
        :param timestamp_extractor: ``timestamp_extractor(record, partition_time_ms) -> int``.
        :param auto_offset_reset: ``"earliest"`` or ``"latest"``.
        :returns: the stream.
        """
        c = consumed or Consumed()
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        name = c.name or self._itb.new_processor_name(graph.SOURCE)
        key_serde = key_serde or c.key_serde
        value_serde = value_serde or c.value_serde
        self._itb.add_source(name, topic_list, key_serde, value_serde,
                             **_source_options(c, timestamp_extractor, auto_offset_reset))  # fmt: skip
        return KStream(self, name, key_serde, value_serde)

    def table(
        self,
        topic: str,
        consumed: Consumed | None = None,
        materialized: Materialized | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        auto_offset_reset: str | None = None,
    ) -> KTable:
        """A table whose rows are the latest value per key of ``topic`` (``None`` deletes).

        ``timestamp_extractor`` and ``auto_offset_reset`` as for :meth:`stream`.

        :param topic: the topic; its records are upserts (a ``None`` value deletes the key).
        :param consumed: serdes, source name, extractor and offset reset
            (:class:`~fluvial.Consumed`).
        :param materialized: the store's name (which makes the table queryable), serdes,
            caching, and history retention for a versioned table (:class:`~fluvial.Materialized`).
        :param key_serde: serde of the keys.
        :param value_serde: serde of the values.
        :param timestamp_extractor: ``timestamp_extractor(record, partition_time_ms) -> int``.
        :param auto_offset_reset: ``"earliest"`` or ``"latest"``.
        :returns: the table.
        """
        c = consumed or Consumed()
        m = materialized or Materialized()
        key_serde = key_serde or c.key_serde or m.key_serde
        value_serde = value_serde or c.value_serde or m.value_serde
        store = graph.store_name(self._itb, m, f"{topic}-")
        source = f"{c.name}-source" if c.name else self._itb.new_processor_name(graph.SOURCE)
        name = c.name or self._itb.new_processor_name("KTABLE-SOURCE-")
        self._itb.add_source(source, [topic], key_serde, value_serde,
                             **_source_options(c, timestamp_extractor, auto_offset_reset))  # fmt: skip
        self._itb.table_sources.add(source)
        k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
        self._itb.add_processor(name, lambda: TableSourceProcessor(store, k, v), [source])
        self._itb.add_store(graph.kv_store_spec(store, m, k, v), name)
        return KTable(
            self, name, key_serde, value_serde, store_name=store,
            getter=store_getter(store, k, v, m.versioned),
            old_values=SourceOldValues(queryable=m.store_name is not None),
        )  # fmt: skip

    def global_table(
        self,
        topic: str,
        consumed: Consumed | None = None,
        materialized: Materialized | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> GlobalKTable:
        """A table of *every* partition of ``topic``, replicated to every instance.

        Streams join it by a key they compute (``stream.join(global_table, joiner,
        key_selector=...)``), so neither repartitioning nor co-partitioning is needed.

        :param topic: the topic, read from its earliest offset by every instance.
        :param consumed: serdes, source name and extractor (:class:`~fluvial.Consumed`; no
            offset reset).
        :param materialized: the store's name and serdes (not versioned).
        :param key_serde: serde of the keys.
        :param value_serde: serde of the values.
        :returns: the global table.
        """
        c = consumed or Consumed()
        m = materialized or Materialized()
        if m.versioned:
            raise ValueError("a GlobalKTable cannot be versioned; use builder.table for that")
        if c.auto_offset_reset is not None:
            raise ValueError(
                "a GlobalKTable always reads its topic from the earliest offset: drop "
                "auto_offset_reset from its Consumed"
            )
        key_serde = key_serde or c.key_serde or m.key_serde
        value_serde = value_serde or c.value_serde or m.value_serde
        store = graph.store_name(self._itb, m, f"{topic}-")
        source = f"{c.name}-source" if c.name else self._itb.new_processor_name(graph.SOURCE)
        name = c.name or self._itb.new_processor_name("KTABLE-SOURCE-")
        k, v = graph.internal_serde(key_serde), graph.internal_serde(value_serde)
        # The topic itself is the changelog, and nothing is forwarded: no log, no cache.
        m = m.with_logging_disabled().with_caching_disabled()
        self._itb.add_global_store(
            graph.kv_store_spec(store, m, k, v), source, topic, key_serde, value_serde,
            name, lambda: TableSourceProcessor(store, k, v), c.timestamp_extractor,
        )  # fmt: skip
        return GlobalKTable(store, key_serde, value_serde, store_getter(store, k, v))

    def add_state_store(self, store_builder: StoreBuilder) -> StreamsBuilder:
        """Register a Processor API store; processors name it in ``KStream.process(..., name)``.

        :param store_builder: the store, from :class:`~fluvial.Stores`.
        :returns: this builder.
        """
        self._itb.add_store(store_builder.build_spec())
        return self

    def build(self) -> Topology:
        """Validate the topology and return it, ready to run or describe.

        :returns: the :class:`~fluvial.Topology`.
        :raises TopologyError: naming every problem found and its fix.
        """
        graph.resolve_null_key_filters(self._itb)
        resolve_key_serdes(self._itb)
        return self._itb.build()


def _source_options(
    consumed: Consumed,
    timestamp_extractor: Callable[[Any, int], int] | None,
    auto_offset_reset: str | None,
) -> dict[str, Any]:
    """A source's event time and starting point: the keyword arguments over ``Consumed``'s."""
    return {
        "timestamp_extractor": timestamp_extractor or consumed.timestamp_extractor,
        "auto_offset_reset": auto_offset_reset or consumed.auto_offset_reset or "earliest",
    }
