"""What a worker reports after each commit: its tasks' counters, its input lag, its standbys' lag.

These read the running tasks and clients and write :class:`~fluvial.metrics.WorkerMetrics`,
which the status line, the HTTP endpoint and the Spark driver show.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from fluvial.metrics import WorkerMetrics
from fluvial.processor.collector import TaskId
from fluvial.processor.metrics import (
    DEAD_LETTERS,
    DESERIALIZATION_ERRORS,
    INVALID_TIMESTAMPS,
    LATE_RECORDS,
    NULL_KEY_RECORDS,
    PROCESSING_ERRORS,
)
from fluvial.processor.task import StreamTask
from fluvial.runtime.standby import StandbyTasks

#: Worker counter <- the task counter it sums.
_BY_REASON = {
    "late_records": LATE_RECORDS,
    "null_key_records": NULL_KEY_RECORDS,
    "invalid_timestamps": INVALID_TIMESTAMPS,
    "undecodable_records": DESERIALIZATION_ERRORS,
    "failed_records": PROCESSING_ERRORS,
    "dead_letters": DEAD_LETTERS,
}


def record_task_counters(
    metrics: WorkerMetrics,
    tasks: Mapping[TaskId, StreamTask],
    closed: Mapping[str, Mapping[str, int]] | None = None,
) -> None:
    """Every task's own counters, by task id, and their records dropped for each reason summed.

    ``closed``: what tasks counted before they were last closed (a restart from the last
    commit opens them anew, counting from zero), added so that no counter goes down.
    """
    closed = closed or {}
    per_task: dict[str, dict[str, int]] = {tid: dict(counts) for tid, counts in closed.items()}
    for tid, task in tasks.items():
        counts = per_task.setdefault(str(tid), {})
        for name, count in task.metrics.as_dict().items():
            counts[name] = counts.get(name, 0) + count
    metrics.task_metrics = per_task
    for field, name in _BY_REASON.items():
        setattr(metrics, field, sum(c.get(name, 0) for c in per_task.values()))


def input_lag(
    consumer: Consumer, task_by_tp: Mapping[tuple[str, int], StreamTask], previous: int
) -> int:
    """Input records not processed yet: past the consumer's position, plus those buffered.

    Not the end offset less the processed position: transaction markers take offsets
    that are never delivered, and a caught-up task would show one record behind per
    transaction. The consumer's position moves past them. ``previous`` when the consumer
    cannot say its positions.
    """
    tps = list(task_by_tp)
    try:
        positions = consumer.position([TopicPartition(t, p) for t, p in tps])
    except KafkaException:
        return previous
    lag = 0
    for (topic, partition), fetched in zip(tps, positions, strict=True):
        task = task_by_tp[(topic, partition)]
        try:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True
            )
        except KafkaException:
            continue
        processed = task.committable_offsets().get((topic, partition))
        if high < 0 or processed is None:
            continue
        buffered = task.buffered_in((topic, partition))
        if fetched.offset >= 0:
            lag += max(0, high - fetched.offset) + buffered
        else:
            lag += max(0, high - processed)
    return lag


def record_standby_lag(metrics: WorkerMetrics, standbys: StandbyTasks, *, fresh: bool) -> None:
    """How many changelog records the standby stores have not applied yet, per task and store
    and in all (see :meth:`fluvial.runtime.worker.Worker.refresh_standby_lag`)."""
    per_task: dict[str, dict[str, int]] = {}
    for lag in standbys.lags(fresh=fresh):
        if lag.offset_lag is not None:
            per_task.setdefault(str(lag.task), {})[lag.store] = lag.offset_lag
    metrics.standby_lags = per_task
    metrics.standby_lag = sum(n for stores in per_task.values() for n in stores.values())
