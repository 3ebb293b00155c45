"""A stream-GlobalKTable join on real Kafka: the table is loaded before processing starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.runtime import Application
from tests.runtime.harness import read_topic, wait_until

pytestmark = [pytest.mark.kafka]


def test_stream_global_table_join_on_kafka(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    products, orders, out = (
        topic_factory("products", 2),
        topic_factory("orders"),
        topic_factory("out"),
    )
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    producer.produce(products, key=b"p1", value=b"apple", partition=0)
    producer.produce(products, key=b"p2", value=b"pear", partition=1)
    producer.produce(orders, key=b"o1", value=json.dumps({"product": "p1", "qty": 2}).encode())
    producer.produce(orders, key=b"o2", value=json.dumps({"product": "p2", "qty": 5}).encode())
    assert producer.flush(10) == 0

    builder = StreamsBuilder()
    table = builder.global_table(products, key_serde=serdes.string(), value_serde=serdes.string())
    (
        builder.stream(orders, key_serde=serdes.string(), value_serde=serdes.json())
        .join(
            table,
            lambda order, product: f"{order['qty']}x{product}",
            key_selector=lambda _order_id, order: order["product"],
        )  # fmt: skip
        .to(out, value_serde=serdes.string())
    )
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path))  # fmt: skip

    def joined() -> list[tuple[bytes, bytes]]:
        return [(m.key(), m.value()) for m in read_topic(bootstrap_servers, out)]

    with Application(builder.build(), config) as app:
        # The table was loaded before the orders, though both topics were written together.
        wait_until(lambda: len(joined()) == 2, 60, "both orders to be joined")
        producer.produce(products, key=b"p1", value=b"green apple", partition=0)
        producer.flush(10)
        wait_until(lambda: app.workers[0].global_tables.stores, 10, "the global store")
        store = next(iter(app.workers[0].global_tables.stores.values()))

        def updated() -> bool:
            current = store.get(b"p1")  # (value, timestamp) in a timestamped store
            value = current[0] if isinstance(current, tuple) else current
            return value == b"green apple"

        wait_until(updated, 30, "the table update to arrive")
        producer.produce(orders, key=b"o3", value=json.dumps({"product": "p1", "qty": 1}).encode())
        producer.flush(10)
        wait_until(lambda: len(joined()) == 3, 60, "the third order to be joined")
    app.raise_if_failed()
    assert joined() == [(b"o1", b"2xapple"), (b"o2", b"5xpear"), (b"o3", b"1xgreen apple")]
