"""A windowed aggregate whose results go through ``to_stream`` alone to a sink writes them
straight to the collector: the same records, byte for byte and partition for partition, as
forwarding them through the nodes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.processor.collector import ConsumedRecord, TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.state import TaskState

PARTITIONS = 3


class Collector:
    """Every record a task sends, with the partition it was placed on; the output topic has
    ``PARTITIONS`` partitions, so windowed keys are placed by their inner key."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, topic: str, key: Any, value: Any, timestamp_ms: int, headers: Any,
             partition: int | None) -> None:  # fmt: skip
        self.sent.append((topic, key, value, timestamp_ms, list(headers), partition))

    def partition_count(self, topic: str) -> int:
        return PARTITIONS


def counts(forwarded: bool, rekeyed: bool, aggregate: str) -> StreamsBuilder:
    """Windowed results to "out" through to_stream(); ``forwarded`` puts a peek after it, so
    that every result is forwarded node by node. ``rekeyed`` groups by a new key without a
    serde (the store's key bytes are JSON, the output's UTF-8), as Figure 2 does."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
    if rekeyed:
        grouped = stream.map(lambda k, v: KeyValue(f"page-{v}", v)).group_by_key()
    else:
        grouped = stream.group_by_key()
    windowed = grouped.windowed_by(TimeWindows.of_size_and_grace(size_ms=10, grace_ms=5))
    if aggregate == "count":
        table = windowed.count()
        value_serde = serdes.long()
    else:
        table = windowed.reduce(lambda a, b: a + b)
        value_serde = serdes.string()
    results = table.to_stream()
    if forwarded:
        results = results.peek(lambda k, v: None)
    results.to("out", key_serde=serdes.time_windowed(serdes.string(), 10), value_serde=value_serde)
    return builder


def run(builder: StreamsBuilder, records: list[tuple[str, str, int]], tmp: Path) -> list:
    collector = Collector()
    config = StreamsConfig(application_id="writer", cache_max_bytes=0, state_dir=str(tmp))
    topology = builder.build()
    subs = topology.subtopologies(config.application_id)
    tasks = []
    for sub in subs:
        task = StreamTask(TaskId(sub.id, 0), sub, config, tmp / str(sub.id), collector)
        state = TaskState(task, tmp / str(sub.id))
        state.open()
        task.initialize()
        tasks.append(task)
    by_topic = {t: task for task in tasks for t in task.subtopology.source_topics}
    pending = [("in", [ConsumedRecord(k.encode(), v.encode(), ts, i)
                       for i, (k, v, ts) in enumerate(records)])]  # fmt: skip
    while pending:
        topic, batch = pending.pop(0)
        task = by_topic[topic]
        task.add_records(topic, 0, batch)
        before = len(collector.sent)
        while task.process_batch(100, 0):
            pass
        hop = [r for r in collector.sent[before:] if r[0] in by_topic]
        if hop:
            consumed = [ConsumedRecord(k, v, ts, i, h) for i, (_, k, v, ts, h, _) in enumerate(hop)]
            pending.append((hop[0][0], consumed))
    return [r for r in collector.sent if r[0] == "out"]


@pytest.mark.parametrize("aggregate", ["count", "reduce"])
@pytest.mark.parametrize("rekeyed", [False, True], ids=["same-key-bytes", "rekeyed"])
def test_direct_writes_equal_forwarded_results(aggregate: str, rekeyed: bool, tmp_path: Path):
    rng = random.Random(5)
    records = []
    for i in range(600):
        # Out of order now and then, some beyond grace: revisions, late drops, many windows.
        ts = 1_000 + i * 2 - (rng.randrange(40) if rng.random() < 0.2 else 0)
        records.append((f"user-{rng.randrange(30)}", f"v{rng.randrange(8)}", ts))
    direct = run(counts(False, rekeyed, aggregate), records, tmp_path / "direct")
    forwarded = run(counts(True, rekeyed, aggregate), records, tmp_path / "forwarded")
    assert len(direct) > 500
    assert {r[5] for r in direct} == set(range(PARTITIONS)), "placed on every partition"
    assert direct == forwarded


def test_the_aggregate_writes_directly_only_where_to_stream_alone_leads_to_a_sink(tmp_path: Path):
    def writer_of(builder: StreamsBuilder) -> Any:
        config = StreamsConfig(application_id="writer", cache_max_bytes=0)
        [sub] = builder.build().subtopologies(config.application_id)
        task = StreamTask(TaskId(sub.id, 0), sub, config, None, Collector())
        task.initialize()
        [aggregate] = [
            n.processor for n in task._nodes.values() if hasattr(n.processor, "_sink_write")
        ]
        return aggregate._sink_write

    assert writer_of(counts(False, False, "count")) is not None
    assert writer_of(counts(True, False, "count")) is None, "a peek after to_stream"
    guarded = StreamsConfig(application_id="writer", cache_max_bytes=0,
                            processing_exception_handler="log_and_continue")  # fmt: skip
    [sub] = counts(False, False, "count").build().subtopologies(guarded.application_id)
    task = StreamTask(TaskId(sub.id, 0), sub, guarded, None, Collector())
    task.initialize()
    [aggregate] = [n.processor for n in task._nodes.values() if hasattr(n.processor, "_sink_write")]
    assert aggregate._sink_write is None, "an exception handler sees each node's errors apart"
