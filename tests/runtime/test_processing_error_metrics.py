"""Processing errors in the Prometheus text: per worker, and per task and node."""

from __future__ import annotations

from fluvial.metrics import WorkerMetrics, prometheus_text, summarize


def test_processing_errors_are_exposed_per_node_and_summed_for_the_status_line():
    workers = [
        WorkerMetrics(0, processing_errors=3, task_metrics={
            "0_0": {"processing-errors": 3, "processing-errors:check": 2,
                    "processing-errors:enrich": 1, "records-processed": 10},
        }),
        WorkerMetrics(1, processing_errors=1, task_metrics={
            "0_1": {"processing-errors": 1, "processing-errors:check": 1},
        }),
    ]  # fmt: skip
    text = prometheus_text("app", workers)
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line and not line.startswith("#")}  # fmt: skip
    node = 'fluvial_node_processing_errors_total{application_id="app",node="%s",task="%s"}'
    assert samples[node % ("check", "0_0")] == 2
    assert samples[node % ("enrich", "0_0")] == 1
    assert samples[node % ("check", "0_1")] == 1
    assert samples['fluvial_task_processing_errors_total{application_id="app",task="0_0"}'] == 3
    assert samples['fluvial_worker_processing_errors_total{application_id="app",slot="1"}'] == 1
    assert not any(":" in name.split("{")[0] for name in samples), "no node name in a metric name"
    assert summarize(workers)["processing_errors"] == 4
