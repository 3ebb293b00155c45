"""Per-task counters: cheap enough to bump on every record, read by the runtime and the test driver.

Names follow Kafka Streams' metric names where one exists (``dropped-records``,
``process-total`` is spelled ``records-processed`` here for clarity).
"""

from __future__ import annotations

from collections import Counter

RECORDS_PROCESSED = "records-processed"
DROPPED_RECORDS = "dropped-records"
REVISIONS_EMITTED = "revisions-emitted"
RECORDS_PRODUCED = "records-produced"
CHANGELOG_RECORDS = "changelog-records"
PUNCTUATIONS = "punctuations"
DESERIALIZATION_ERRORS = "deserialization-errors"
SUPPRESSION_EMITS = "suppression-emits"


class TaskMetrics:
    """Named monotonically increasing counters of one task."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def increment(self, name: str, amount: int = 1) -> None:
        self._counts[name] += amount

    def get(self, name: str) -> int:
        return self._counts.get(name, 0)

    def as_dict(self) -> dict[str, int]:
        return dict(self._counts)

    def __repr__(self) -> str:
        return f"TaskMetrics({dict(sorted(self._counts.items()))})"


def combine(metrics: list[TaskMetrics]) -> dict[str, int]:
    """Sum counters over several tasks (a worker, or the whole test driver)."""
    total: Counter[str] = Counter()
    for m in metrics:
        total.update(m.as_dict())
    return dict(total)
