"""``fluvial bench hotpath``: fluvial's own per-record CPU, with no broker and no other process.

A workload's sub-topologies run as :class:`~fluvial.processor.task.StreamTask` s with the
stores, transactional layers and commit steps a worker uses (``TaskState``), fed the bench's
input bytes directly. Records a task writes to a repartition topic reach the next sub-topology
after each commit, as a read_committed consumer would see them. Only the Kafka client calls are
left out, so the CPU time per input record is the part of Figure 2's cost that fluvial's own
code decides; it is measured with the process CPU clock, which other load on the machine does
not inflate the way it inflates wall time.

The digest covers every output record (topic, key, value, timestamp) in order: a change to the
hot path that keeps the digest keeps the results byte for byte.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

from fluvial import StreamsBuilder, StreamsConfig
from fluvial.bench.workloads import WORKLOADS, build_topology, generate_input
from fluvial.processor.collector import ConsumedRecord, Headers, TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.state import TaskState

BASE_MS = 1_700_000_000_000  # fixed, so every run processes the same records
INPUT, OUTPUT, TABLE = "views", "out", "users"


class _Collector:
    """Keeps what the tasks send: repartition records for the next hop, the rest to digest.

    It does about what the worker's collector does in Python per record (a dict lookup and a
    call), so the CPU measured is fluvial's; the digest is computed after the clock stops.
    """

    def __init__(self, repartition_topics: set[str], changelog_topics: set[str]) -> None:
        self.repartition_topics = repartition_topics
        self.changelog_topics = changelog_topics
        self.pending: dict[tuple[str, int], list[ConsumedRecord]] = {}
        self.offsets: dict[str, int] = {}
        self.changelog_end: dict[tuple[str, int], int] = {}
        self.outputs: list[tuple[str, bytes | None, bytes | None, int]] = []
        self.changelog_records = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        if topic in self.repartition_topics:
            self.pending.setdefault((topic, 0), []).append(
                ConsumedRecord(key, value, timestamp_ms, offset, list(headers))
            )
        elif topic in self.changelog_topics:
            self.changelog_end[(topic, partition or 0)] = offset
            self.changelog_records += 1
        else:
            self.outputs.append((topic, key, value, timestamp_ms))

    def digest(self) -> str:
        digest = hashlib.sha256()
        for topic, key, value, timestamp_ms in self.outputs:
            digest.update(b"%s|%s|%s|%d;" % (topic.encode(), key or b"", value or b"",
                                             timestamp_ms))  # fmt: skip
        return digest.hexdigest()[:16]


def run_hotpath(
    workload: str = "figure2",
    records: int = 200_000,
    commit_every: int = 2_000,
    *,
    guarantee: str = "exactly_once_v2",
    cache_max_bytes: int = 0,
) -> dict[str, Any]:
    """Run ``records`` input records through ``workload``; CPU seconds and what came out."""
    if WORKLOADS[workload].has_table:
        raise ValueError(f"the hot-path bench runs stream-only workloads, not {workload!r}")
    builder = StreamsBuilder()
    build_topology(builder, workload, INPUT, OUTPUT, TABLE)
    topology = builder.build()
    with tempfile.TemporaryDirectory(prefix="fluvial-hotpath-") as state_dir:
        config = StreamsConfig(
            application_id="hotpath", bootstrap_servers="127.0.0.1:1",
            processing_guarantee=guarantee, state_dir=state_dir,
            cache_max_bytes=cache_max_bytes,
        )  # fmt: skip
        subs = topology.subtopologies(config.application_id)
        repartition = {t for s in subs for t in s.repartition_source_topics}
        changelogs = {t for s in subs for t in s.changelog_topics().values()}
        collector = _Collector(repartition, changelogs)
        tasks, states = [], []
        for sub in subs:
            task_dir = Path(state_dir) / f"{sub.id}_0"
            task = StreamTask(TaskId(sub.id, 0), sub, config, task_dir, collector)
            state = TaskState(task, task_dir)
            state.open()
            task.initialize()
            tasks.append(task)
            states.append(state)
        source = next(t for t in tasks if INPUT in t.subtopology.source_topics)
        readers = {
            topic: task for task in tasks for topic in task.subtopology.repartition_source_topics
        }
        inputs = [
            ConsumedRecord(r.key, r.value, r.timestamp_ms, offset)
            for offset, r in enumerate(generate_input(workload, records, base_ms=BASE_MS))
        ]
        now_ms = int(time.time() * 1000)
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        for begin in range(0, len(inputs), commit_every):
            source.add_records(INPUT, 0, inputs[begin : begin + commit_every])
            for task in tasks:
                _drain(task, now_ms)
            # The commit: flush, then (the transaction committed) the stores record it.
            for task in tasks:
                task.flush()
            for state in states:
                state.committed(collector.changelog_end)
            collector.changelog_end.clear()
            # What the transaction committed becomes readable by the next hop.
            for (topic, partition), batch in collector.pending.items():
                readers[topic].add_records(topic, partition, batch)
            collector.pending = {}
        for task in tasks:
            _drain(task, now_ms)
            task.flush()
        for state in states:
            state.committed(collector.changelog_end)
        cpu_s = time.process_time() - started_cpu
        wall_s = time.perf_counter() - started_wall
        for state in states:
            state.close()
    return {
        "workload": workload,
        "records": records,
        "commit_every": commit_every,
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "cpu_us_per_record": cpu_s / records * 1e6,
        "output_records": len(collector.outputs),
        "changelog_records": collector.changelog_records,
        "output_digest": collector.digest(),
    }


def _drain(task: StreamTask, now_ms: int) -> None:
    # The worker's loop (Worker._process): batches of records, then wall-clock punctuation.
    while task.process_batch(500, now_ms):
        pass
    task.punctuate_wall_clock(now_ms)
