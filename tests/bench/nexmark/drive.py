"""Runs one Nexmark query module in fluvial's TopologyTestDriver on a list of events."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from fluvial import Record, StreamsBuilder, StreamsConfig, serdes
from fluvial.bench.nexmark.generator import generate
from fluvial.bench.nexmark.model import key, kind, topics
from fluvial.testing import TopologyTestDriver
from fluvial.testing.topics import TestInputTopic

TOPICS = topics("nx")
OUTPUT = "nx-out"


#: 23:58:00 UTC on 2024-05-01: hand-made events near a midnight.
START_MS = 1_714_607_880_000


def generated(
    count: int, *, seed: int = 7, base_ms: int = START_MS + 115_000, rate: int = 100
) -> list[dict[str, Any]]:
    """Events of the Nexmark generator: by default from 23:59:55, across midnight (at 100
    events/s, past 500 events)."""
    return generate(count, seed=seed, base_ms=base_ms, rate=rate)


def run(
    query: ModuleType,
    events: list[dict[str, Any]],
    *,
    before: list[tuple[str, Any, Any]] = (),  # type: ignore[assignment]
    store_type: str = "in_memory",
    raw: bool = False,
    **build_options: Any,
) -> list[Record[str, Any]]:
    """Every record the query writes, in order, keys as text; ``before``: (topic, key, value)
    rows piped first (a side input); ``raw``: values as their UTF-8 text too, not decoded;
    ``build_options`` go to the query's ``build``."""
    builder = StreamsBuilder()
    query.build(builder, TOPICS, OUTPUT, **build_options)
    config = StreamsConfig(application_id="nexmark-test", cache_max_bytes=0)
    with TopologyTestDriver(builder.build(), config, store_type=store_type) as driver:
        inputs: dict[str, TestInputTopic | None] = {}

        def topic(name: str) -> TestInputTopic | None:
            if name not in inputs:
                inputs[name] = None
                with contextlib.suppress(ValueError):  # a topic the query does not read
                    inputs[name] = driver.create_input_topic(name, serdes.string(), serdes.json())
            return inputs[name]

        for name, k, v in before:
            side = topic(name)
            if side is not None:
                side.pipe_input(k, v, 0)
        for event in events:
            into = topic(TOPICS[kind(event)])
            if into is not None:
                into.pipe_input(key(event), event, event["dateTime"])
        value_serde = serdes.string() if raw else serdes.json()
        return driver.create_output_topic(OUTPUT, serdes.string(), value_serde).read_records()


def final(records: list[Record[str, Any]]) -> dict[str, Any]:
    """The last value per key, keys whose last value is null left out."""
    last: dict[str, Any] = {}
    for record in records:
        last[record.key] = record.value
    return {k: v for k, v in last.items() if v is not None}


def per_key(records: list[Record[str, Any]]) -> dict[str, list[Any]]:
    """Every value per key, in order: the result of a stream that is not a table."""
    result: dict[str, list[Any]] = {}
    for record in records:
        result.setdefault(record.key, []).append(record.value)
    return result
