"""Per-task counters: cheap enough to bump on every record, read by the runtime and the test driver.

Names follow Kafka Streams' metric names where one exists (``dropped-records``,
``process-total`` is spelled ``records-processed`` here for clarity).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

RECORDS_PROCESSED = "records-processed"
DROPPED_RECORDS = "dropped-records"
REVISIONS_EMITTED = "revisions-emitted"
RECORDS_PRODUCED = "records-produced"
CHANGELOG_RECORDS = "changelog-records"
PUNCTUATIONS = "punctuations"
DESERIALIZATION_ERRORS = "deserialization-errors"
# Records a user's code raised on and the log-and-continue handler skipped; counted in all and
# per node as "processing-errors:NODE".
PROCESSING_ERRORS = "processing-errors"
SUPPRESSION_EMITS = "suppression-emits"
# Stream-table join lookups that found no row for a record older than the table's earliest
# update (the table runs ahead of the stream in time); counted per join as "...:NODE".
JOIN_MISSES_BEFORE_TABLE = "join-misses-before-table"


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
