"""A task's local state between commits: what survives a crash, and what must not.

Local stores are a cache of their changelogs. Each records the changelog offset it reflects
(``committed_offset``), so a restart restores only the missing suffix.

Under exactly-once, writes made after the last commit must never survive a crash. A store whose
task was not closed cleanly since its last commit is marked dirty on disk (``.eos-dirty``); the
next start wipes such stores and restores them from the changelog, which only holds committed
records.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from fluvial.errors import StreamsError
from fluvial.processor.task import StreamTask

DIRTY_MARKER = ".eos-dirty"


class TaskState:
    def __init__(self, task: StreamTask, task_dir: Path, exactly_once: bool) -> None:
        self.task = task
        self.task_dir = task_dir
        self.exactly_once = exactly_once
        self.wiped = False
        self._lock: IO[str] | None = None

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
        marker = self.task_dir / DIRTY_MARKER
        if self.exactly_once and marker.exists():
            # The last run died between commits: its stores may hold uncommitted writes.
            for store in self.task.stores.values():
                if store.persistent:
                    store.destroy()
                    store.init(self.task_dir)
            self.wiped = True
        if self.exactly_once:
            marker.touch()
            _fsync_dir(self.task_dir)

    def committed(self, changelog_end: dict[tuple[str, int], int]) -> None:
        """Record, in every store, the changelog offset the committed state reaches."""
        for name, tp in self.task.changelog_partitions().items():
            last = changelog_end.get(tp)
            if last is not None:
                self.task.stores[name].committed_offset = last + 1
        for store in self.task.stores.values():
            store.flush()

    def close(self, *, clean: bool) -> None:
        if clean:
            (self.task_dir / DIRTY_MARKER).unlink(missing_ok=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
