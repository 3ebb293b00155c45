"""A worker that starts again from its last commit (as the local engine restarts a failed slot)
opens its tasks anew, counting from zero: its counters still go on from where they were. And a
record the broker rejects, skipped by ``default_production_exception_handler="continue"``, is
counted as unproduced, apart from every other reason."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.processor.collector import TaskId
from fluvial.runtime.worker import Worker

S = serdes.string()
# Random bytes: compression cannot bring them under the output topic's 2000-byte limit.
BIG = random.Random(3).randbytes(20_000)


def checked(value: str) -> bytes:
    if value == "fail":
        raise ValueError("marked to fail")
    return BIG if value == "big" else value.encode()


def run_until(worker: Worker, condition, what: str, timeout_s: float = 120) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while True:
        worker.run_once()
        worker.commit(force=True)  # the counters are refreshed at commits
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {worker.metrics}")


@pytest.mark.kafka
@pytest.mark.slow
def test_counters_go_on_over_a_restart_and_unproduced_records_count_apart(
    bootstrap_servers: str, topic_factory, app_id_factory, tmp_path: Path
) -> None:
    source = topic_factory("in")
    sink = topic_factory("out", max_message_bytes="2000")
    builder = StreamsBuilder()
    builder.stream(source, key_serde=S, value_serde=S).map_values(checked).to(
        sink, key_serde=S, value_serde=serdes.bytes_()
    )
    config = StreamsConfig(
        application_id=app_id_factory(), bootstrap_servers=bootstrap_servers,
        processing_guarantee="at_least_once", commit_interval_ms=100, state_dir=str(tmp_path),
        processing_exception_handler="log_and_continue",
        default_production_exception_handler="continue",
    )  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})

    def produce(*values: str) -> None:
        for value in values:
            producer.produce(source, value.encode(), b"k")
        assert producer.flush(30) == 0

    worker = Worker(0, builder.build(), config, [TaskId(0, 0)])
    metrics = worker.metrics
    worker.start()
    try:
        # The rejected record alone in its batch: the broker rejects a batch whole.
        produce("a", "fail")
        run_until(worker, lambda: metrics.records_processed == 2, "the first records")
        produce("big")
        run_until(worker, lambda: metrics.unproduced_records == 1, "the rejected record")
        produce("b", "fail")
        run_until(worker, lambda: metrics.failed_records == 2, "two failed records")
        assert metrics.records_out >= 3 and metrics.unproduced_records == 1, metrics
        assert (metrics.late_records, metrics.undecodable_records, metrics.null_key_records) == (
            0, 0, 0
        )  # fmt: skip
    finally:
        worker.close(clean=True)

    # The same worker starts again (the local engine's restart): fresh tasks, counting on.
    produce("fail", "c")
    worker.start()
    try:
        run_until(worker, lambda: metrics.records_processed >= 7, "the new records processed")
        assert metrics.failed_records == 3, metrics
        assert metrics.unproduced_records == 1, metrics
        assert metrics.task_metrics["0_0"]["processing-errors"] == 3, metrics.task_metrics
    finally:
        worker.close(clean=True)
