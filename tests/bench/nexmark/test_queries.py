"""q0–q9 in fluvial's TopologyTestDriver against their plain-Python oracles.

One partition per topic, events piped in generation order: the oracles' partition-dependent
parts (which auctions and windows are closed at the end) see one task.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.bench.nexmark import model
from fluvial.bench.nexmark.generator import generate
from fluvial.bench.nexmark.queries import QUERIES, expected
from fluvial.testing import TopologyTestDriver

TOPICS = model.topics("nx")
OUTPUT = "nx-out"
# 100 events/s: 6,000 events span a minute, so windows and auctions close within the input.
EVENTS = generate(6_000, seed=11, base_ms=1_700_000_000_000, rate=100)
STREAMS = {"q0", "q1", "q2"}  # every record is a result, not an update of one


def run(
    query: str, events: list[dict[str, Any]], store_type: str = "in_memory"
) -> list[tuple[str, Any]]:
    builder = StreamsBuilder()
    QUERIES[query].build(builder, TOPICS, OUTPUT)
    config = StreamsConfig(application_id=f"nexmark-{query}", cache_max_bytes=0)
    with TopologyTestDriver(builder.build(), config, store_type=store_type) as driver:
        inputs = {}
        for kind, topic in TOPICS.items():
            with contextlib.suppress(ValueError):  # ValueError: the query does not read it
                inputs[kind] = driver.create_input_topic(topic, serdes.string(), serdes.json())
        for event in events:
            topic = inputs.get(model.kind(event))
            if topic is not None:
                topic.pipe_input(model.key(event), event, event["dateTime"])
        out = driver.create_output_topic(OUTPUT, serdes.bytes_(), serdes.json())
        return [(k.decode(), v) for k, v in out.read_key_values()]


@pytest.mark.parametrize("query", [f"q{i}" for i in range(10)])
def test_query_matches_its_oracle(query: str) -> None:
    records = run(query, EVENTS)
    oracle = expected(QUERIES[query], EVENTS, partitions=1)
    if query in STREAMS:
        got: dict[str, list[Any]] = {}
        for key, value in records:
            got.setdefault(key, []).append(value)
    else:
        last: dict[str, Any] = {}
        for key, value in records:
            last[key] = value
        got = {k: v for k, v in last.items() if v is not None}
    assert got == oracle
    # Every query finds something in a minute of events (the oracle is not vacuous).
    assert len(oracle) >= 3, oracle
