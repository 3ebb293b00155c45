"""KTable processors: materialize a changelog, transform changes, regroup, aggregate.

Everything here consumes and produces :class:`~fluvial.dsl.change.Change` values, so that every
operator downstream of a table sees both the new value and the one it replaces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluvial.dsl.change import Change
from fluvial.dsl.forwarding import TableForwarder, emit
from fluvial.dsl.old_values import OldValues
from fluvial.dsl.stateless import as_key_value
from fluvial.processor.fusion import FusableProcessor, Step
from fluvial.processor.metrics import LATE, NULL_KEY, dropped
from fluvial.processor_api import Processor
from fluvial.records import Record
from fluvial.serdes import Serde
from fluvial.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    VersionedKeyValueStore,
)


class TableSourceProcessor(Processor[Any, Any]):
    """Turns a stream of upserts (``None`` = delete) into table changes, via a store.

    Used by ``builder.table`` and ``KStream.to_table``; ``input_is_change`` is set when the
    input already carries changes (a materialized filter, map_values or join).

    Over a versioned store, an update older than the key's latest version only adds history:
    the table as of now is unchanged, so nothing is forwarded.
    """

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        input_is_change: bool = False,
        filtered: OldValues | None = None,
    ) -> None:
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.input_is_change = input_is_change
        self.filtered = filtered

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.versioned = isinstance(self.store, VersionedKeyValueStore)
        if not self.versioned:
            self.forwarder = TableForwarder(context, self.store, self.key_serde, self.value_serde)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            dropped(self.context, NULL_KEY)
            return
        value = record.value.new_value if self.input_is_change else record.value
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        if self.versioned:
            self._process_versioned(record, key_bytes, value)
            return
        found = self.store.get(key_bytes)
        old = None if found is None else self.value_serde.deserialize(None, found[0])
        if value is None and found is None:
            # Deleting a key that is not there changes no row, but Kafka Streams still forwards
            # the deletion (unless a cache absorbs it, or this is a filter's store and the
            # filter sends old values), and a join with a row on the other side turns it into
            # a revision of its own.
            if self.filtered is not None and self.filtered.enabled:
                return
            if not self.forwarder.cached:
                emit(self.context, record.key, Change(None, None), record.timestamp_ms)
            return
        self.store.put(key_bytes, self.value_serde.serialize(None, value), record.timestamp_ms)
        self.forwarder.maybe_forward(record.key, value, old, record.timestamp_ms)

    def _process_versioned(self, record: Record[Any, Any], key_bytes: bytes, value: Any) -> None:
        latest = self.store.get(key_bytes)
        code = self.store.put(
            key_bytes, self.value_serde.serialize(None, value), record.timestamp_ms
        )
        if code == PUT_RETURN_CODE_NOT_PUT:
            # Older than the history retention: no as-of query could ever see it.
            dropped(self.context, LATE)
            return
        if code != PUT_RETURN_CODE_VALID_TO_UNDEFINED:
            return  # out of order: history changed, the latest row did not
        old = None if latest is None else self.value_serde.deserialize(None, latest.value)
        if value is None and latest is None:
            return
        emit(self.context, record.key, Change(value, old), record.timestamp_ms)


class TableFilterProcessor(Processor[Any, Any]):
    """A value failing the predicate becomes ``None``, so the row leaves the filtered table."""

    def __init__(
        self,
        predicate: Callable[[Any, Any], bool],
        negate: bool,
        old_values: OldValues,
        queryable: bool,
    ) -> None:
        self.predicate = predicate
        self.negate = negate
        self.old_values = old_values
        self.queryable = queryable  # its own store decides: see TableSourceProcessor

    def _keep(self, key: Any, value: Any) -> Any:
        if value is None or bool(self.predicate(key, value)) == self.negate:
            return None
        return value

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        new = self._keep(record.key, change.new_value)
        old = self._keep(record.key, change.old_value)
        if new is None and old is None and self.old_values.enabled and not self.queryable:
            # Invisible in the filtered table. Kafka Streams drops it only where the table sends
            # old values (see fluvial.dsl.old_values); elsewhere it forwards the deletion.
            return
        self.context.forward(record.with_value(Change(new, old)))


class TableMapValuesProcessor(Processor[Any, Any]):
    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def _map(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return self.mapper(key, value) if self.with_key else self.mapper(value)

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        new = self._map(record.key, change.new_value)
        old = self._map(record.key, change.old_value)
        self.context.forward(record.with_value(Change(new, old)))


class TableToStreamProcessor(FusableProcessor):
    """The table's changelog as a stream: the new value of each change (``None`` = tombstone)."""

    # All it does: a windowed aggregate may write through it (NodeContext.windowed_writer).
    passes_new_values = True

    def fuse(self, downstream: Step) -> Step:
        def to_stream(key: Any, change: Change[Any], origin: Record[Any, Any]) -> None:
            downstream(key, change.new_value, origin)

        return to_stream


class TableSelectProcessor(Processor[Any, Any]):
    """``KTable.group_by``: re-key both halves of a change.

    The old value goes to its old group as a removal and the new value to its new group as an
    addition, old first, so an aggregate never counts a row twice. When both land in the same
    group they travel together as one change.
    """

    def __init__(self, selector: Callable[[Any, Any], Any]) -> None:
        self.selector = selector

    def _select(self, key: Any, value: Any) -> tuple[Any, Any] | None:
        if value is None:
            return None
        new_key, new_value = as_key_value(self.selector(key, value), "group_by")
        if new_key is None or new_value is None:
            return None
        return new_key, new_value

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        new_pair = self._select(record.key, change.new_value)
        old_pair = self._select(record.key, change.old_value)
        if new_pair is not None and old_pair is not None and new_pair[0] == old_pair[0]:
            self.context.forward(
                record.with_key_value(new_pair[0], Change(new_pair[1], old_pair[1]))
            )
            return
        if old_pair is not None:
            self.context.forward(record.with_key_value(old_pair[0], Change(None, old_pair[1])))
        if new_pair is not None:
            self.context.forward(record.with_key_value(new_pair[0], Change(new_pair[1], None)))


class TableAggregateProcessor(Processor[Any, Any]):
    """``KGroupedTable`` count/reduce/aggregate: subtract the old value, then add the new one.

    ``initializer`` None means reduce: the first value added is the aggregate.
    """

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        agg_serde: Serde[Any],
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        old_values: OldValues | None = None,
    ) -> None:
        self.store_name = store_name
        self.key_serde = key_serde
        self.agg_serde = agg_serde
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor
        self.old_values = old_values  # the result table's: whether downstream reads old values

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.forwarder = TableForwarder(
            context, self.store, self.key_serde, self.agg_serde, self.old_values
        )

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            dropped(self.context, NULL_KEY)
            return
        change: Change[Any] = record.value
        key_bytes = self.key_serde.serialize(None, record.key)
        assert key_bytes is not None
        found = self.store.get(key_bytes)
        old_agg = None if found is None else self.agg_serde.deserialize(None, found[0])
        agg = old_agg
        # Subtract first: the old value was counted in this group before.
        if change.old_value is not None and agg is not None:
            agg = self.subtractor(record.key, change.old_value, agg)
        if change.new_value is not None:
            if agg is None:
                agg = (
                    change.new_value
                    if self.initializer is None
                    else self.adder(record.key, change.new_value, self.initializer())
                )
            else:
                agg = self.adder(record.key, change.new_value, agg)
        timestamp = record.timestamp_ms if found is None else max(record.timestamp_ms, found[1])
        self.store.put(key_bytes, self.agg_serde.serialize(None, agg), timestamp)
        self.forwarder.maybe_forward(record.key, agg, old_agg, timestamp)
