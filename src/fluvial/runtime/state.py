"""A task's local state between commits: what survives a crash, and what must not.

Local stores are a cache of their changelogs. Each records the changelog offset it reflects
(``committed_offset``), so a restart restores only the missing suffix.

Writes made after the last commit must never survive a crash: under exactly-once they would
double-count, and under at-least-once they would put the store ahead of the input offsets it is
replayed from. Persistent stores therefore have a transactional layer under their caches (built
with the store, in :func:`fluvial.processor.stores.create_store`): writes stay in a bounded
in-memory buffer (their changelog records already go into the open Kafka transaction) and reach
RocksDB, in one batch together with the changelog offset, only once that transaction committed.
After a crash the store on disk is exactly the last commit, and recovery replays only the
changelog suffix since then, however large the state.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

from fluvial.errors import StreamsError
from fluvial.processor.task import StreamTask


class TaskState:
    def __init__(self, task: StreamTask, task_dir: Path) -> None:
        self.task = task
        self.task_dir = task_dir
        self._lock: IO[str] | None = None
        # Persistent stores arrive with their transactional layer: processor.stores builds it.

    def open(self) -> None:
        self.task_dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.task_dir / ".lock", "w")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StreamsError(
                f"task {self.task.task_id}'s state directory {self.task_dir} is in use by another "
                "process: two instances must not share a state_dir for the same task"
            ) from None
        self.task.open_stores()

    def committed(self, changelog_end: dict[tuple[str, int], int]) -> None:
        """The Kafka transaction (or ALOS commit) succeeded: make the local state match it."""
        partitions = self.task.changelog_partitions()
        for name, stack in self.task.store_stacks.items():
            tp = partitions.get(name)
            last = changelog_end.get(tp) if tp is not None else None
            # Data and offset land in one synced write (see StoreStack.committed).
            stack.committed(last + 1 if last is not None else stack.store.committed_offset)

    def uncommitted_full(self) -> bool:
        return any(stack.commit_needed for stack in self.task.store_stacks.values())

    def close(self, *, clean: bool = True) -> None:
        # Closing a transactional store drops uncommitted writes, as a crash would. The task
        # may never have started (a failed restore), so close it here too; closing is idempotent.
        self.task.close(clean=clean)
        if self._lock is not None:
            self._lock.close()
            self._lock = None
