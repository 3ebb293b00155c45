"""Purging repartition topics: the records below their reader's committed offset are deleted.

Repartition topics are internal, and each partition is read by one task of this application:
once the task has committed an offset, the records below it are never read again, and deleting
them keeps the topics small. Purging is housekeeping: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from fluvial.config import StreamsConfig
from fluvial.runtime.clients import admin_settings

log = logging.getLogger(__name__)

REPARTITION_PURGE_INTERVAL_S = 30.0


class RepartitionPurge:
    """Deletes a worker's repartition records below its committed offsets, now and then."""

    def __init__(self, config: StreamsConfig) -> None:
        self.config = config
        self._admin: AdminClient | None = None
        self._last_purge = time.monotonic()

    def due(self) -> bool:
        """Whether the purge interval has passed since the last purge."""
        return time.monotonic() - self._last_purge >= REPARTITION_PURGE_INTERVAL_S

    def purge(self, committed: Mapping[tuple[str, int], int], topics: Collection[str]) -> None:
        """Delete repartition records below the committed offsets: nobody will read them again."""
        self._last_purge = time.monotonic()
        purge = [
            TopicPartition(t, p, off)
            for (t, p), off in committed.items()
            if t in topics and off > 0
        ]
        if not purge:
            return
        if self._admin is None:
            self._admin = AdminClient(admin_settings(self.config))
        try:
            futures = self._admin.delete_records(purge, request_timeout=10)
            for future in futures.values():
                future.result()
        except Exception as exc:  # purging is housekeeping: never fail processing for it
            log.warning("could not purge repartition records: %s", exc)
        # Serves the admin client's librdkafka log lines (they reach Python logging on poll).
        self._admin.poll(0)
