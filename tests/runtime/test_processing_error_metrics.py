"""Records that reached no output, in the Prometheus text and on the status line: one counter
per reason (late, null key, undecodable, failed in user code, dead-lettered, not produced), per
worker, task and node, each with a help text that says what it counts."""

from __future__ import annotations

import time

from fluvial.metrics import WorkerMetrics, prometheus_text, summarize
from fluvial.runtime.runner import status_line


def _samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}  # fmt: skip


def _help(text: str) -> dict[str, str]:
    found = {line.split(" ", 3)[2]: line.split(" ", 3)[3]
             for line in text.splitlines() if line.startswith("# HELP ")}  # fmt: skip
    return {name.removesuffix("_total"): help_text for name, help_text in found.items()}


WORKERS = [
    WorkerMetrics(0, failed_records=3, late_records=4, undecodable_records=7, dead_letters=9,
                  task_metrics={
        "0_0": {"processing-errors": 3, "processing-errors:check": 2,
                "processing-errors:enrich": 1, "records-processed": 10,
                "late-records": 4, "dropped-records:late:count-by-window": 4,
                "dropped-records": 14, "deserialization-errors": 7},
    }),
    WorkerMetrics(1, failed_records=1, null_key_records=2, unproduced_records=5, task_metrics={
        "0_1": {"processing-errors": 1, "processing-errors:check": 1,
                "dropped-records:null-key:count-by-window": 2},
    }),
]  # fmt: skip


def test_processing_errors_are_exposed_per_node_and_summed_for_the_status_line():
    text = prometheus_text("app", WORKERS)
    samples = _samples(text)
    node = 'fluvial_node_processing_errors_total{application_id="app",node="%s",task="%s"}'
    assert samples[node % ("check", "0_0")] == 2
    assert samples[node % ("enrich", "0_0")] == 1
    assert samples[node % ("check", "0_1")] == 1
    assert samples['fluvial_task_processing_errors_total{application_id="app",task="0_0"}'] == 3
    assert samples['fluvial_worker_failed_records_total{application_id="app",slot="1"}'] == 1
    assert not any(":" in name.split("{")[0] for name in samples), "no node name in a metric name"
    assert summarize(WORKERS)["failed_records"] == 4


def test_each_reason_has_its_own_counter_and_a_help_text_that_says_what_it_counts():
    text = prometheus_text("app", WORKERS)
    samples, helps = _samples(text), _help(text)
    worker = 'fluvial_worker_%s_total{application_id="app",slot="%d"}'
    assert samples[worker % ("late_records", 0)] == 4
    assert samples[worker % ("undecodable_records", 0)] == 7
    assert samples[worker % ("failed_records", 0)] == 3
    assert samples[worker % ("dead_letters", 0)] == 9
    assert samples[worker % ("null_key_records", 1)] == 2
    assert samples[worker % ("unproduced_records", 1)] == 5
    assert not any(name.startswith("fluvial_worker_dropped_records") for name in samples), (
        "no worker counter mixes reasons"
    )
    # Per operator, with its reason, as Kafka Streams' dropped-records.
    by_node = ('fluvial_node_dropped_records_total{application_id="app",node="count-by-window",'
               'reason="%s",task="%s"}')  # fmt: skip
    assert samples[by_node % ("late", "0_0")] == 4
    assert samples[by_node % ("null-key", "0_1")] == 2
    assert "late" in helps["fluvial_worker_late_records"]
    assert "grace" in helps["fluvial_worker_late_records"]
    assert "deserialized" in helps["fluvial_worker_undecodable_records"]
    assert "raised" in helps["fluvial_worker_failed_records"]
    assert "dead_letter_topic" in helps["fluvial_worker_dead_letters"]
    assert "could not deliver" in helps["fluvial_worker_unproduced_records"]
    assert "reason" in helps["fluvial_node_dropped_records"]
    assert "Task counter" not in helps["fluvial_task_deserialization_errors"]


def test_the_status_line_names_each_reason_apart():
    class App:
        def metrics(self) -> list[WorkerMetrics]:
            return WORKERS

    line = status_line(App(), time.monotonic())  # type: ignore[arg-type]
    assert "late 4" in line, line
    assert "undecodable 7" in line and "failed 4" in line and "dead-letters 9" in line, line
    assert "null-key 2" in line and "unproduced 5" in line, line
    assert "dropped-late" not in line and "skipped" not in line, line
