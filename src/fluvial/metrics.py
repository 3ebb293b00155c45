"""Worker and application metrics, readable from Python and as Prometheus text, and how far a
standby store is behind its changelog (:class:`StoreLag`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fluvial.processor.collector import TaskId
from fluvial.processor.metrics import DROPPED_RECORDS
from fluvial.processor.metrics import HELP as TASK_HELP


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
    # Why records reached no output, one counter per reason (see _WORKER_COUNTERS). Each
    # counts on over task restarts and slot moves: it never goes down within a run.
    late_records: int = 0
    null_key_records: int = 0
    invalid_timestamps: int = 0
    undecodable_records: int = 0
    failed_records: int = 0
    dead_letters: int = 0
    unproduced_records: int = 0
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
        """Count one commit that took ``seconds``."""
        self.commits += 1
        self.commit_latency_total_s += seconds
        self.commit_latency_max_s = max(self.commit_latency_max_s, seconds)

    @property
    def commit_latency_avg_s(self) -> float:
        """Mean commit duration in seconds (0.0 before the first commit)."""
        return self.commit_latency_total_s / self.commits if self.commits else 0.0


_WORKER_COUNTERS = (
    ("records_in", "counter", "Records consumed from input partitions"),
    ("records_processed", "counter", "Records processed by tasks"),
    ("records_out", "counter", "Records produced to output and repartition topics"),
    ("commits", "counter", "Commits completed"),
    ("commit_latency_avg_s", "gauge", "Average commit latency in seconds"),
    ("commit_latency_max_s", "gauge", "Maximum commit latency in seconds"),
    (
        "late_records",
        "counter",
        "Records an operator dropped as late: their window, session or join window had closed "
        "(stream time minus grace), or older than a versioned table's history. Per operator: "
        'fluvial_node_dropped_records_total{reason="late"}',
    ),
    (
        "null_key_records",
        "counter",
        "Records an operator dropped for a null key (or value) it cannot group, window or join",
    ),
    ("invalid_timestamps", "counter", "Records skipped for a negative Kafka timestamp"),
    (
        "undecodable_records",
        "counter",
        "Records skipped because their key or value could not be deserialized or their event "
        "time extracted (default_deserialization_exception_handler=log_and_continue)",
    ),
    (
        "failed_records",
        "counter",
        "Records a user's function or processor raised on, skipped at that operator "
        "(processing_exception_handler=log_and_continue), dead-lettered or not",
    ),
    (
        "dead_letters",
        "counter",
        "Records sent to dead_letter_topic: undecodable ones and those a user's code raised on",
    ),
    (
        "unproduced_records",
        "counter",
        "Output or repartition records the producer could not deliver, skipped "
        "(default_production_exception_handler=continue)",
    ),
    (
        "lag",
        "gauge",
        "Records the slot has still to process in its input and repartition partitions, "
        "fetched or not (held by catch-up completeness included)",
    ),
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
        yield from self._node_families(workers, task_names)
        for name in (n for n in task_names if ":" not in n):
            family = CounterMetricFamily(
                "fluvial_task_" + name.replace("-", "_"),
                TASK_HELP.get(name, f"Task counter {name}"),
                labels=["application_id", "task"],
            )
            for w in workers:
                for task_id, counters in sorted(w.task_metrics.items()):
                    family.add_metric([self.application_id, task_id], float(counters.get(name, 0)))
            yield family

    def _node_families(self, workers: list[WorkerMetrics], names: list[str]) -> Iterator[Metric]:
        """Per-node counters: "processing-errors:NODE", and "dropped-records:REASON:NODE"
        as one family with a ``reason`` label (as Kafka Streams' dropped-records)."""
        per_node = [n for n in names if ":" in n]
        dropped = DROPPED_RECORDS + ":"
        reasons = CounterMetricFamily(
            "fluvial_node_dropped_records",
            "Records an operator dropped, by node and reason: late (its window, session or join "
            "window had closed, or older than a versioned table's history) or null-key (a null "
            "key or value it cannot use)",
            labels=["application_id", "task", "node", "reason"],
        )
        for w in workers:
            for task_id, counters in sorted(w.task_metrics.items()):
                for name, count in sorted(counters.items()):
                    if name.startswith(dropped):
                        reason, _, node = name[len(dropped) :].partition(":")
                        reasons.add_metric([self.application_id, task_id, node, reason], count)
        yield reasons
        for base in sorted({n.split(":", 1)[0] for n in per_node} - {DROPPED_RECORDS}):
            family = CounterMetricFamily(
                f"fluvial_node_{base.replace('-', '_')}",
                TASK_HELP.get(base, f"Node counter {base}") + ", by node",
                labels=["application_id", "task", "node"],
            )
            for w in workers:
                for task_id, counters in sorted(w.task_metrics.items()):
                    for name, count in sorted(counters.items()):
                        if name.startswith(base + ":"):
                            node = name.split(":", 1)[1]
                            family.add_metric([self.application_id, task_id, node], float(count))
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
