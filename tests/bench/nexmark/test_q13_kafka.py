"""q13 on real Kafka: the side input written by ``fill_side_input`` (placed by Java's
partitioner) and read as a GlobalKTable before the first bid, joined with bids from two
partitions; the committed output is the oracle's, per key in order."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import StreamsBuilder, StreamsConfig
from fluvial.bench.nexmark.queries import q13
from fluvial.partitioner import default_partition
from fluvial.runtime import Application
from tests.bench.nexmark.drive import generated, key
from tests.runtime.harness import flush, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def committed(bootstrap: str, topic: str, partitions: int) -> list:
    return [m for p in range(partitions) for m in read_topic(bootstrap, topic, partition=p)]


def test_q13_joins_bids_with_the_side_input_on_kafka(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    bid_topic, output = topic_factory("bid", 2), topic_factory("out", 2)
    side_topic = unique_name("side-input")
    q13.fill_side_input(bootstrap_servers, side_topic, partitions=2)
    side = committed(bootstrap_servers, side_topic, 2)
    assert len(side) == q13.SIDE_INPUT_ROWS
    assert all(m.partition() == default_partition(m.key(), 2) for m in side)
    assert {(m.key(), m.value()) for m in side} >= {(b"42", b'"42"'), (b"9999", b'"9999"')}

    events = generated(400, base_ms=int(time.time() * 1000) - 60_000)
    bids = [e for e in events if "bidder" in e]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    for bid in bids:
        producer.produce(bid_topic, key=key(bid).encode(), timestamp=bid["dateTime"],
                         value=json.dumps(bid, separators=(",", ":"), sort_keys=True).encode())  # fmt: skip
    flush(producer)

    builder = StreamsBuilder()
    q13.build(builder, {"bid": bid_topic, "side_input": side_topic}, output)
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path))  # fmt: skip
    with Application(builder.build(), config) as app:
        wait_until(lambda: len(committed(bootstrap_servers, output, 2)) >= len(bids), 120,
                   "every bid to be joined")  # fmt: skip
    app.raise_if_failed()
    got: dict[str, list] = {}
    for m in committed(bootstrap_servers, output, 2):
        got.setdefault(m.key().decode(), []).append(json.loads(m.value()))
    assert got == q13.oracle(events)
