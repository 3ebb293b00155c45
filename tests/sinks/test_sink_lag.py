"""``fluvial sink``'s lag reaches 0 once it has written a transactional topic to its end:
transaction markers take offsets but are no records to write."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Producer

from fluvial.sinks import PostgresSink
from tests.event_times import event_time_base_ms

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_lag_of_a_caught_up_sink_is_zero(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("views", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": topic,
                         "partitioner": "murmur2_random"})  # fmt: skip
    producer.init_transactions(30)
    base = event_time_base_ms()
    for i in range(12):  # a transaction per record: a marker after each
        producer.begin_transaction()
        producer.produce(topic, key=f"user-{i}", value=json.dumps({"n": i}), timestamp=base + i)
        producer.commit_transaction(30)
    sink = PostgresSink(topic, table=table_name("views"), dsn=pg_dsn,
                        bootstrap_servers=bootstrap_servers, value_serde="json",
                        value_schema="n long", commit_interval_ms=50)  # fmt: skip
    runner = threading.Thread(target=sink.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 90
        while True:
            progress = sink.progress()
            if progress.rows_written == 12 and progress.lag == 0:
                break
            assert time.monotonic() < deadline, progress.line()
            assert runner.is_alive(), "the sink stopped"
            time.sleep(0.2)
        assert "lag 0" in progress.line()
    finally:
        sink.stop()
        runner.join(30)
    assert not runner.is_alive()
