"""Backpressure: a partition whose task has too many records buffered stops being fetched.

The consumer fetches ahead of processing; without a bound, a task that falls behind (a slow
join, a partition far ahead of the others in stream time) would buffer a whole topic.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from fluvial.processor.task import StreamTask

MAX_BUFFERED_PER_PARTITION = 5000


class Backpressure:
    """The partitions a worker's consumer has paused, and when to pause and resume them."""

    def __init__(self) -> None:
        self.paused: set[tuple[str, int]] = set()

    def apply(self, consumer: Consumer, task_by_tp: Mapping[tuple[str, int], StreamTask]) -> None:
        """Pause partitions whose buffer is full; resume them once it drains."""
        to_pause, to_resume = [], []
        for tp, task in task_by_tp.items():
            depth = task.backpressure_depth(tp)
            if depth > MAX_BUFFERED_PER_PARTITION and tp not in self.paused:
                to_pause.append(tp)
            elif depth < MAX_BUFFERED_PER_PARTITION // 2 and tp in self.paused:
                to_resume.append(tp)
        if to_pause:
            consumer.pause([TopicPartition(t, p) for t, p in to_pause])
            self.paused.update(to_pause)
        if to_resume:
            consumer.resume([TopicPartition(t, p) for t, p in to_resume])
            self.paused.difference_update(to_resume)
