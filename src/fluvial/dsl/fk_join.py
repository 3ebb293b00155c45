"""Foreign-key table-table joins, through subscription and response topics as in Kafka Streams.

The left table (keyed by primary key ``pk``) joins the right table on ``fk =
extractor(left_value)``. The tables need not be co-partitioned, so the join talks over two
internal topics:

1. *subscription registration* (keyed by fk, partitioned like the right table): the left side
   subscribes ``pk`` to ``fk`` with a hash of the left value, and unsubscribes from the old fk
   when a row's fk changes or the row is deleted;
2. the right side keeps subscriptions in a store keyed by ``(fk, pk)``. It answers each new
   subscription with the current right row, and answers every subscriber again whenever that
   right row changes;
3. *subscription response* (keyed by pk, partitioned like the left table): the left side joins
   the response with its *current* row, dropping responses whose hash no longer matches, i.e.
   answers to a subscription that a newer left value has superseded.

The result is materialized in a store, so downstream operators get correct ``(new, old)`` pairs.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluvial import serdes
from fluvial.dsl import graph
from fluvial.dsl.change import Change
from fluvial.dsl.copartition import DECLARED, DEFAULT, mark_key_format
from fluvial.dsl.getters import GetterSupplier, store_getter
from fluvial.dsl.old_values import SourceOldValues
from fluvial.dsl.options import Materialized
from fluvial.dsl.stream_table_join import Joiner, value_joiner
from fluvial.dsl.table_ops import TableSourceProcessor
from fluvial.processor_api import Processor
from fluvial.records import Record
from fluvial.serdes import Serde
from fluvial.topology.nodes import KEY_VALUE, SourceNode, StoreSpec

if TYPE_CHECKING:
    from fluvial.dsl.ktable import KTable

# What the right side should do with a subscription.
DELETE_AND_PROPAGATE = 0  # the left row is gone: unsubscribe, and answer so the result is deleted
DELETE_NO_PROPAGATE = 1  # the left row moved to another fk: unsubscribe quietly
PROPAGATE_NULL_IF_NO_FK = 2  # answer even without a right row (the result must change)
PROPAGATE_ONLY_IF_FK = 3  # answer only if a right row exists

_LEN = struct.Struct(">i")
HASH_BYTES = 16


def value_hash(data: bytes | None) -> bytes | None:
    return None if data is None else hashlib.blake2b(data, digest_size=HASH_BYTES).digest()


def _pack_hash(digest: bytes | None) -> bytes:
    return b"\x00" if digest is None else b"\x01" + digest


def _unpack_hash(data: bytes, pos: int) -> tuple[bytes | None, int]:
    if data[pos] == 0:
        return None, pos + 1
    return data[pos + 1 : pos + 1 + HASH_BYTES], pos + 1 + HASH_BYTES


def subscription_bytes(instruction: int, digest: bytes | None, pk: bytes) -> bytes:
    return bytes([instruction]) + _pack_hash(digest) + pk


def parse_subscription(data: bytes) -> tuple[int, bytes | None, bytes]:
    digest, pos = _unpack_hash(data, 1)
    return data[0], digest, data[pos:]


def response_bytes(digest: bytes | None, value: bytes | None) -> bytes:
    return _pack_hash(digest) + (b"\x00" if value is None else b"\x01" + value)


def parse_response(data: bytes) -> tuple[bytes | None, bytes | None]:
    digest, pos = _unpack_hash(data, 0)
    return digest, (None if data[pos] == 0 else data[pos + 1 :])


def subscription_prefix(fk: bytes) -> bytes:
    """Store keys are ``len(fk) + fk + pk``: the length keeps fk ``ab`` apart from ``abc``."""
    return _LEN.pack(len(fk)) + fk


class SubscriptionSender(Processor[Any, Any]):
    """Left side: turns left-row changes into (un)subscriptions, or into local results when a
    row has no foreign key."""

    def __init__(
        self,
        extractor: Callable[[Any], Any],
        left_join: bool,
        joiner: Joiner,
        fk_serde: Serde[Any],
        pk_serde: Serde[Any],
        value_serde: Serde[Any],
        sink: str,
        result: str,
    ) -> None:
        self.extractor = extractor
        self.left_join = left_join
        self.joiner = joiner
        self.fk_serde = fk_serde
        self.pk_serde = pk_serde
        self.value_serde = value_serde
        self.sink = sink
        self.result = result

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            return
        change: Change[Any] = record.value
        new, old = change.new_value, change.old_value
        old_fk = None if old is None else self.extractor(old)
        new_fk = None if new is None else self.extractor(new)
        pk = self.pk_serde.serialize(None, record.key)
        assert pk is not None
        if new is None and old is None:
            return  # deleting a row that was never there: nothing to join or to revoke
        digest = None if new is None else value_hash(self.value_serde.serialize(None, new))
        if self.left_join:
            # Every change of a left row gets an answer, the deletion included.
            if old_fk is not None and old_fk != new_fk:
                self._send(record, old_fk, DELETE_NO_PROPAGATE, digest, pk)
            if new_fk is None:
                # No foreign key (or no row), nothing to look up: the result is known here, at
                # the left row's time, as Kafka Streams answers a subscription without a key.
                self._result(record, None if new is None else self.joiner(record.key, new, None))
            else:
                self._send(record, new_fk, PROPAGATE_NULL_IF_NO_FK, digest, pk)
            return
        if new is None or new_fk is None:
            # The row is gone (or lost its foreign key): revoke its result, if it had one.
            if old_fk is not None:
                self._send(record, old_fk, DELETE_AND_PROPAGATE, digest, pk)
            return
        if old_fk is not None and old_fk != new_fk:
            self._send(record, old_fk, DELETE_NO_PROPAGATE, digest, pk)
            self._send(record, new_fk, PROPAGATE_NULL_IF_NO_FK, digest, pk)
        else:
            self._send(record, new_fk, PROPAGATE_ONLY_IF_FK, digest, pk)

    def _send(
        self, record: Record[Any, Any], fk: Any, instruction: int, digest: bytes | None, pk: bytes
    ) -> None:
        fk_bytes = self.fk_serde.serialize(None, fk)
        value = subscription_bytes(instruction, digest, pk)
        self.context.forward(Record(fk_bytes, value, record.timestamp_ms), self.sink)

    def _result(self, record: Record[Any, Any], value: Any) -> None:
        self.context.forward(
            Record(record.key, Change(value, None), record.timestamp_ms), self.result
        )


class SubscriptionReceiver(Processor[Any, Any]):
    """Right side: stores subscriptions and answers them with the current right row."""

    def __init__(
        self,
        store_name: str,
        right: GetterSupplier,
        fk_serde: Serde[Any],
        right_value_serde: Serde[Any],
    ) -> None:
        self.store_name = store_name
        self.right_supplier = right
        self.fk_serde = fk_serde
        self.right_value_serde = right_value_serde

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.right = self.right_supplier.make()
        self.right.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        fk_bytes: bytes = record.key
        instruction, digest, pk = parse_subscription(record.value)
        store_key = subscription_prefix(fk_bytes) + pk
        row = self.right.get(self.fk_serde.deserialize(None, fk_bytes))
        # A response is as recent as the newer of the left row and the right row it carries.
        timestamp = record.timestamp_ms if row is None else max(record.timestamp_ms, row[1])
        if instruction in (DELETE_AND_PROPAGATE, DELETE_NO_PROPAGATE):
            self.store.put(store_key, None, record.timestamp_ms)
            if instruction == DELETE_AND_PROPAGATE:
                self.context.forward(Record(pk, response_bytes(digest, None), timestamp))
            return
        self.store.put(store_key, _pack_hash(digest), record.timestamp_ms)
        if row is None and instruction == PROPAGATE_ONLY_IF_FK:
            return
        value = None if row is None else self.right_value_serde.serialize(None, row[0])
        self.context.forward(Record(pk, response_bytes(digest, value), timestamp))


class RightChangeNotifier(Processor[Any, Any]):
    """Right side: a changed right row is sent to every left row subscribed to it."""

    def __init__(
        self, store_name: str, fk_serde: Serde[Any], right_value_serde: Serde[Any]
    ) -> None:
        self.store_name = store_name
        self.fk_serde = fk_serde
        self.right_value_serde = right_value_serde

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            return
        fk_bytes = self.fk_serde.serialize(None, record.key)
        assert fk_bytes is not None
        prefix = subscription_prefix(fk_bytes)
        new = record.value.new_value
        value = None if new is None else self.right_value_serde.serialize(None, new)
        for store_key, stored in list(self.store.range(prefix, None)):
            if not store_key.startswith(prefix):
                break
            digest, _ = _unpack_hash(stored, 0)
            pk = store_key[len(prefix) :]
            self.context.forward(Record(pk, response_bytes(digest, value), record.timestamp_ms))


class ResponseResolver(Processor[Any, Any]):
    """Left side: joins a response with the current left row, unless the row changed since."""

    def __init__(
        self,
        left: GetterSupplier,
        joiner: Joiner,
        left_join: bool,
        pk_serde: Serde[Any],
        left_value_serde: Serde[Any],
        right_value_serde: Serde[Any],
    ) -> None:
        self.left_supplier = left
        self.joiner = joiner
        self.left_join = left_join
        self.pk_serde = pk_serde
        self.left_value_serde = left_value_serde
        self.right_value_serde = right_value_serde

    def init(self, context: Any) -> None:
        super().init(context)
        self.left = self.left_supplier.make()
        self.left.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        pk = self.pk_serde.deserialize(None, record.key)
        digest, right_bytes = parse_response(record.value)
        row = self.left.get(pk)
        current = None if row is None else row[0]
        current_bytes = None if current is None else self.left_value_serde.serialize(None, current)
        if value_hash(current_bytes) != digest:
            return  # an answer for a left value that has been replaced since
        right = (
            None if right_bytes is None else self.right_value_serde.deserialize(None, right_bytes)
        )
        if current is None or (right is None and not self.left_join):
            result = None
        else:
            result = self.joiner(pk, current, right)
        self.context.forward(Record(pk, Change(result, None), record.timestamp_ms))


def foreign_key_join(
    left: KTable,
    right: KTable,
    extractor: Callable[[Any], Any],
    joiner: Callable[..., Any],
    left_join: bool,
    name: str | None,
    materialized: Materialized | None,
    with_key: bool,
) -> KTable:
    from fluvial.dsl.ktable import KTable

    itb = left._itb
    fn = value_joiner(joiner, with_key)
    # Both sides send old values: a changed foreign key unsubscribes the old one, and a right
    # row that did not change is not propagated.
    right._old_values.enable(True)
    left._old_values.enable(True)
    lg, rg = left._value_getter(), right._value_getter()
    pk_serde = graph.internal_serde(left.key_serde)
    fk_serde = graph.internal_serde(right.key_serde)
    lv = graph.internal_serde(left.value_serde)
    rv = graph.internal_serde(right.value_serde)
    raw = serdes.bytes_()

    def new_name(part: str) -> str:
        return (
            f"{name}-{part.lower()}" if name else itb.new_processor_name(f"KTABLE-FK-JOIN-{part}-")
        )

    sub_topic = f"{new_name('SUBSCRIPTION-REGISTRATION')}-topic"
    sender, sub_sink = new_name("SUBSCRIPTION-REGISTRATION-PROCESSOR"), new_name("SUB-SINK")
    sub_source, receiver = new_name("SUB-SOURCE"), new_name("SUBSCRIPTION-PROCESSOR")
    sub_store = f"{new_name('SUBSCRIPTION-STATE-STORE')}"
    notifier = new_name("SUBSCRIPTION-UPDATE-PROCESSOR")
    resp_topic = f"{new_name('SUBSCRIPTION-RESPONSE')}-topic"
    resp_sink, resp_source = new_name("RESPONSE-SINK"), new_name("RESPONSE-SOURCE")
    resolver, result = new_name("RESPONSE-RESOLVER"), new_name("OUTPUT")

    def topics_of(node: str) -> tuple[str, ...]:
        found = []
        for source in graph.source_nodes(itb, node):
            source_node = itb.nodes[source]
            assert isinstance(source_node, SourceNode)
            found += source_node.topics
        return tuple(found)

    # Subscriptions are partitioned like the right table, responses like the left one.
    itb.add_repartition_topic(sub_topic, follows=topics_of(right.node))
    itb.add_repartition_topic(resp_topic, follows=topics_of(left.node))
    # Subscriptions are keyed by the foreign key as the right table writes it, responses by
    # the left table's key: the same bytes, or the joined topics are not co-partitioned.
    for topic, serde in ((sub_topic, right.key_serde), (resp_topic, left.key_serde)):
        mark_key_format(
            itb, topic, DECLARED if serde is not None else DEFAULT, graph.internal_serde(serde)
        )
    itb.add_processor(
        sender,
        lambda: SubscriptionSender(
            extractor, left_join, fn, fk_serde, pk_serde, lv, sub_sink, result
        ),
        [left.node],
    )
    itb.add_sink(sub_sink, sub_topic, [sender], raw, raw)
    itb.add_source(sub_source, [sub_topic], None, None)
    itb.add_processor(
        receiver, lambda: SubscriptionReceiver(sub_store, rg, fk_serde, rv), [sub_source], rg.stores
    )
    itb.add_processor(notifier, lambda: RightChangeNotifier(sub_store, fk_serde, rv), [right.node])
    itb.add_store(
        StoreSpec(
            name=sub_store, kind=KEY_VALUE, key_serde=raw, value_serde=raw,
            caching_enabled=False, internal_format=True,
        ),
        receiver, notifier,
    )  # fmt: skip
    itb.add_sink(resp_sink, resp_topic, [receiver, notifier], raw, raw)
    itb.add_source(resp_source, [resp_topic], None, None)
    itb.add_processor(
        resolver,
        lambda: ResponseResolver(lg, fn, left_join, pk_serde, lv, rv),
        [resp_source],
        lg.stores,
    )
    m = materialized or Materialized()
    store = graph.store_name(itb, m, "KTABLE-FK-JOIN-OUTPUT-")
    value_serde = m.value_serde
    v = graph.internal_serde(value_serde)
    itb.add_processor(
        result,
        lambda: TableSourceProcessor(store, pk_serde, v, input_is_change=True),
        [resolver, sender],
    )
    itb.add_store(graph.kv_store_spec(store, m, pk_serde, v), result)
    graph.copartition(itb, sub_source, right.node)
    graph.copartition(itb, resp_source, left.node)
    return KTable(
        left._builder, result, left.key_serde, value_serde, store_name=store,
        getter=store_getter(store, pk_serde, v, m.versioned),
        old_values=SourceOldValues(queryable=m.store_name is not None),
    )  # fmt: skip
