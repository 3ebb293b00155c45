"""Worker and application metrics, readable from Python and as Prometheus text, and how far a
standby store is behind its changelog (:class:`StoreLag`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fluvial.processor.collector import TaskId


@dataclass
class WorkerMetrics:
    """Counters of one worker (slot); the per-task counters ride along in ``task_metrics``."""

    slot: int
    records_in: int = 0
    records_processed: int = 0
    records_out: int = 0
    commits: int = 0
    commit_latency_total_s: float = 0.0
    commit_latency_max_s: float = 0.0
    dropped_records: int = 0
    processing_errors: int = 0
    # Of the dropped records, those skipped because they could not be deserialized (the
    # rest are late): the status line shows them apart.
    skipped_records: int = 0
    lag: int = 0
    restore_total: int = 0
    restored: int = 0
    # Changelog partitions of the slot's stores, and how many of them are restored (or were
    # up to date): "restoring k of n stores" while they differ.
    stores_to_restore: int = 0
    stores_restored: int = 0
    standby_applied: int = 0
    # Changelog records the slot's standby replicas have not applied yet, in all and per task
    # and store (``{"1_0": {"counts": 3}}``).
    standby_lag: int = 0
    standby_lags: dict[str, dict[str, int]] = field(default_factory=dict)
    # Restores refused because the changelog no longer held what the store needed, and
    # standby replicas dropped because their changelog position was deleted under them.
    restore_gaps: int = 0
    standby_gaps: int = 0
    # Records of joined or table topics found on another partition than their key's.
    copartition_mismatches: int = 0
    task_metrics: dict[str, dict[str, int]] = field(default_factory=dict)

    def record_commit(self, seconds: float) -> None:
        self.commits += 1
        self.commit_latency_total_s += seconds
        self.commit_latency_max_s = max(self.commit_latency_max_s, seconds)

    @property
    def commit_latency_avg_s(self) -> float:
        return self.commit_latency_total_s / self.commits if self.commits else 0.0


_WORKER_COUNTERS = (
    ("records_in", "counter", "Records consumed from input partitions"),
    ("records_processed", "counter", "Records processed by tasks"),
    ("records_out", "counter", "Records produced to output and repartition topics"),
    ("commits", "counter", "Commits completed"),
    ("commit_latency_avg_s", "gauge", "Average commit latency in seconds"),
    ("commit_latency_max_s", "gauge", "Maximum commit latency in seconds"),
    ("dropped_records", "counter", "Records dropped (late, or undeserializable and skipped)"),
    ("processing_errors", "counter", "Records a user's code raised on, skipped (log_and_continue)"),
    ("skipped_records", "counter", "Undeserializable records skipped (log_and_continue)"),
    ("lag", "gauge", "Records behind the end of the input partitions"),
    ("restore_total", "counter", "Changelog records to restore"),
    ("restored", "counter", "Changelog records restored"),
    ("stores_to_restore", "gauge", "Store changelog partitions the slot's tasks restore"),
    ("stores_restored", "gauge", "Store changelog partitions restored (or up to date)"),
    ("standby_applied", "counter", "Changelog records applied to standby replicas"),
    ("standby_lag", "gauge", "Changelog records the slot's standby replicas have not applied"),
    ("restore_gaps", "counter", "Restores refused: the changelog lost records the store needs"),
    ("standby_gaps", "counter", "Standby stores dropped: their changelog position was deleted"),
    (
        "copartition_mismatches",
        "counter",
        "Records of joined or table topics on another partition than Java's partitioner gives "
        "their key (sampled)",
    ),
)


def summarize(workers: list[WorkerMetrics]) -> dict[str, float]:
    """Totals over workers, for the status line."""
    total: dict[str, float] = {}
    for name, _kind, _help in _WORKER_COUNTERS:
        values = [float(getattr(w, name)) for w in workers]
        total[name] = max(values, default=0.0) if name.endswith("_max_s") else sum(values)
    return total


class WorkerMetricsCollector(Collector):
    """The workers' counters for ``prometheus_client``: one sample per slot (and per task).

    Counters are exposed with the ``_total`` suffix Prometheus requires of them.
    """

    def __init__(self, application_id: str, workers: Callable[[], list[WorkerMetrics]]) -> None:
        self.application_id = application_id
        self.workers = workers

    def describe(self) -> list[Metric]:
        return []  # samples appear as workers do; nothing to register up front

    def collect(self) -> Iterator[Metric]:
        workers = self.workers()
        for name, kind, help_text in _WORKER_COUNTERS:
            family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = family_type(
                f"fluvial_worker_{name}", help_text, labels=["application_id", "slot"]
            )
            for w in workers:
                family.add_metric([self.application_id, str(w.slot)], float(getattr(w, name)))
            yield family
        standby = GaugeMetricFamily(
            "fluvial_standby_lag_records",
            "Changelog records a standby replica of a task's store has not applied yet",
            labels=["application_id", "slot", "task", "store"],
        )
        for w in workers:
            for task_id, stores in sorted(w.standby_lags.items()):
                for store, lag in sorted(stores.items()):
                    standby.add_metric([self.application_id, str(w.slot), task_id, store], lag)
        yield standby
        task_names = sorted({n for w in workers for m in w.task_metrics.values() for n in m})
        per_node = [n for n in task_names if ":" in n]  # "processing-errors:NODE"
        for base in sorted({n.split(":", 1)[0] for n in per_node}):
            family = CounterMetricFamily(
                f"fluvial_node_{base.replace('-', '_')}",
                f"Node counter {base}",
                labels=["application_id", "task", "node"],
            )
            for w in workers:
                for task_id, counters in sorted(w.task_metrics.items()):
                    for name, count in sorted(counters.items()):
                        if name.startswith(base + ":"):
                            node = name.split(":", 1)[1]
                            family.add_metric([self.application_id, task_id, node], float(count))
            yield family
        for name in (n for n in task_names if ":" not in n):
            family = CounterMetricFamily(
                "fluvial_task_" + name.replace("-", "_"),
                f"Task counter {name}",
                labels=["application_id", "task"],
            )
            for w in workers:
                for task_id, counters in sorted(w.task_metrics.items()):
                    family.add_metric([self.application_id, task_id], float(counters.get(name, 0)))
            yield family


def prometheus_text(application_id: str, workers: list[WorkerMetrics]) -> str:
    """Metrics in the Prometheus text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerMetricsCollector(application_id, lambda: workers))
    return generate_latest(registry).decode()


@dataclass(frozen=True)
class StoreLag:
    """How far one standby store is behind its changelog partition."""

    task: TaskId
    store: str
    topic: str
    partition: int
    #: The next changelog offset the standby will apply.
    position: int | None
    #: The changelog's end: its last stable offset under exactly-once (``None``: unknown).
    end: int | None
    #: Timestamp of the last changelog record the standby applied (``None``: none yet).
    last_applied_timestamp_ms: int | None

    @property
    def offset_lag(self) -> int | None:
        if self.end is None or self.position is None:
            return None
        return max(0, self.end - self.position)

    def to_json(self) -> dict[str, object]:
        return {
            "task": str(self.task),
            "store": self.store,
            "changelog": self.topic,
            "partition": self.partition,
            "position": self.position,
            "end": self.end,
            "offset_lag": self.offset_lag,
            "last_applied_timestamp_ms": self.last_applied_timestamp_ms,
        }
