"""Per-task counters: cheap enough to bump on every record, read by the runtime and the test driver.

Names follow Kafka Streams' metric names where one exists (``dropped-records``,
``process-total`` is spelled ``records-processed`` here for clarity).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

RECORDS_PROCESSED = "records-processed"
# Every record of the task that reached no output, whatever the reason (Kafka Streams'
# task-level ``dropped-records``): the sum of the counters by reason below.
DROPPED_RECORDS = "dropped-records"
# By reason, in all and per node as "dropped-records:REASON:NODE" (see :func:`dropped`):
#: an operator's window, session or join window had closed (stream time - grace), or the
#: record was older than a versioned table's history retention.
LATE = "late"
#: a null key (or value) an operator cannot use: no group, window or join to put it in.
NULL_KEY = "null-key"
#: the task's counter of each reason an operator drops records for.
LATE_RECORDS = "late-records"
NULL_KEY_RECORDS = "null-key-records"
_BY_REASON = {LATE: LATE_RECORDS, NULL_KEY: NULL_KEY_RECORDS}
# A record whose Kafka timestamp is negative (no extractor gave it an event time).
INVALID_TIMESTAMPS = "invalid-timestamps"
REVISIONS_EMITTED = "revisions-emitted"
RECORDS_PRODUCED = "records-produced"
CHANGELOG_RECORDS = "changelog-records"
PUNCTUATIONS = "punctuations"
DESERIALIZATION_ERRORS = "deserialization-errors"
# Records a user's code raised on and the log-and-continue handler skipped; counted in all and
# per node as "processing-errors:NODE".
PROCESSING_ERRORS = "processing-errors"
# Records sent to the dead-letter topic: undecodable ones and those a user's code raised on.
DEAD_LETTERS = "dead-letters"
SUPPRESSION_EMITS = "suppression-emits"
# Stream-table join lookups that found no row for a record older than the table's earliest
# update (the table runs ahead of the stream in time); counted per join as "...:NODE".
JOIN_MISSES_BEFORE_TABLE = "join-misses-before-table"

#: What each task counter counts, for the metrics' help texts.
HELP = {
    RECORDS_PROCESSED: "Records the task processed",
    DROPPED_RECORDS: "Records of the task that reached no output, for any reason (the sum of "
    "late, null-key, invalid-timestamp, undecodable and failed records)",
    LATE_RECORDS: "Records an operator dropped as late: their window, session or join window "
    "had closed (stream time minus grace), or older than a versioned table's history",
    NULL_KEY_RECORDS: "Records an operator dropped for a null key (or value) it cannot use",
    INVALID_TIMESTAMPS: "Records skipped for a negative Kafka timestamp",
    DESERIALIZATION_ERRORS: "Records skipped because their key or value could not be "
    "deserialized or their event time extracted (log_and_continue)",
    PROCESSING_ERRORS: "Records a user's function or processor raised on, skipped at that "
    "operator (processing_exception_handler=log_and_continue)",
    DEAD_LETTERS: "Records sent to the dead-letter topic (undecodable, or failed in user code)",
    REVISIONS_EMITTED: "Revisions of windowed results emitted",
    RECORDS_PRODUCED: "Records produced to output topics",
    CHANGELOG_RECORDS: "Records produced to changelog topics",
    PUNCTUATIONS: "Punctuations run",
    SUPPRESSION_EMITS: "Results a suppress() released",
}


def dropped(context: Any, reason: str) -> None:
    """An operator drops the record in process for ``reason`` (:data:`LATE`, :data:`NULL_KEY`):
    counted in the task's total, by reason, and by node and reason."""
    metrics = context.metrics
    metrics.increment(DROPPED_RECORDS)
    metrics.increment(_BY_REASON[reason])
    metrics.increment(f"{DROPPED_RECORDS}:{reason}:{context.node_name}")


class TaskMetrics:
    """Named monotonically increasing counters of one task.

    The hottest counters (records processed, produced, changelog records) are plain ints kept
    by their owners and registered here with :meth:`register`: bumping an int costs nothing
    next to a named increment, and readers see the sum of both.
    """

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._live: dict[str, list[Callable[[], int]]] = {}

    def increment(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` (default 1) to the counter ``name``."""
        self._counts[name] += amount

    def register(self, name: str, read: Callable[[], int]) -> None:
        """Count ``read()`` under ``name`` too: a counter its owner keeps as a plain int."""
        self._live.setdefault(name, []).append(read)

    def get(self, name: str) -> int:
        """The counter ``name``'s value (0 if never counted)."""
        return self._counts.get(name, 0) + sum(read() for read in self._live.get(name, ()))

    def as_dict(self) -> dict[str, int]:
        """Every counter by name, as a plain dict."""
        counts = dict(self._counts)
        for name, reads in self._live.items():
            live = sum(read() for read in reads)
            if live or name in counts:
                counts[name] = counts.get(name, 0) + live
        return counts

    def __repr__(self) -> str:
        return f"TaskMetrics({dict(sorted(self.as_dict().items()))})"


def combine(metrics: list[TaskMetrics]) -> dict[str, int]:
    """Sum counters over several tasks (a worker, or the whole test driver)."""
    total: Counter[str] = Counter()
    for m in metrics:
        total.update(m.as_dict())
    return dict(total)
