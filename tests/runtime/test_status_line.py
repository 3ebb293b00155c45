"""The status line and metrics read right: lag reaches 0 over transactional input, a skipped
malformed record is "undecodable" and not "late", and a restore counts up to its total."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.metrics import summarize
from fluvial.runtime import Application
from fluvial.runtime.runner import status_line
from tests.event_times import event_time_base_ms

pytestmark = [pytest.mark.kafka]


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


def produce_in_transactions(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer",
         "partitioner": "murmur2_random"}
    )  # fmt: skip
    producer.init_transactions(30)
    base = event_time_base_ms()
    for i, (key, value) in enumerate(records):
        # One record per transaction: as many markers as records, the worst case for lag.
        producer.begin_transaction()
        producer.produce(topic, key=key.encode(), value=value, timestamp=base + i)
        producer.commit_transaction(30)


def counting_app(source: str, sink: str) -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=serdes.string(), value_serde=serdes.json())
        .group_by_key()
        .count()
        .to_stream()
        .to(sink, value_serde=serdes.long()))  # fmt: skip
    return builder


@pytest.mark.slow
def test_lag_reaches_zero_skips_are_skips_and_restores_finish(
    bootstrap_servers: str, topic_factory: Callable[..., str], app_id_factory, tmp_path: Path
) -> None:
    source, sink = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    good = [(f"user-{i % 5}", json.dumps({"n": i}).encode()) for i in range(20)]
    produce_in_transactions(bootstrap_servers, source, [*good, ("user-0", b"{not json")])
    config = StreamsConfig(
        application_id=app_id_factory(), bootstrap_servers=bootstrap_servers,
        processing_guarantee="exactly_once_v2", state_dir=str(tmp_path / "state"),
        default_deserialization_exception_handler="log_and_continue",
    )  # fmt: skip
    topology = counting_app(source, sink).build()
    started = time.monotonic()
    with Application(topology, config) as app:

        def caught_up() -> bool:
            totals = summarize(app.metrics())
            return totals["undecodable_records"] == 1 and totals["lag"] == 0

        wait_for(caught_up, 120, "the malformed record skipped and lag 0")
        line = status_line(app, started)
        assert "lag 0" in line and "late 0" in line and "undecodable 1" in line, line

    # A fresh state directory restores every store from its changelog, whose transactions
    # leave markers between the records: the restore still counts up to its total.
    fresh = config.with_overrides(state_dir=str(tmp_path / "fresh"))
    with Application(topology, fresh) as app:
        wait_for(
            lambda: summarize(app.metrics())["restore_total"] > 0
            and summarize(app.metrics())["restored"] == summarize(app.metrics())["restore_total"],
            120, "the restore to reach its total",
        )  # fmt: skip
        wait_for(lambda: summarize(app.metrics())["lag"] == 0, 60, "lag 0 after the restore")
        wait_for(lambda: "restoring" not in status_line(app, started), 60,
                 "the status line to stop saying 'restoring'")  # fmt: skip


def test_status_line_shows_restoring_k_of_n() -> None:
    class Restoring:
        def metrics(self):  # noqa: ANN202 - the shape status_line reads
            from fluvial.metrics import WorkerMetrics

            return [WorkerMetrics(slot=0, restore_total=5000, restored=1234, lag=7,
                                  stores_to_restore=2, stores_restored=1)]  # fmt: skip

    line = status_line(Restoring(), time.monotonic())  # type: ignore[arg-type]
    assert "restoring 1 of 2 stores (1,234 of 5,000 records)" in line and "lag 7" in line
