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
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from fluvial.errors import StreamsError
from fluvial.processor.task import StreamTask
from fluvial.state.rocksdb import read_committed_offset

log = logging.getLogger(__name__)


class TaskState:
    def __init__(self, task: StreamTask, task_dir: Path) -> None:
        self.task = task
        self.task_dir = task_dir
        self._lock: IO[str] | None = None
        # Persistent stores arrive with their transactional layer: processor.stores builds it.

    def open(self, adopt: Sequence[Path] = ()) -> None:
        """Lock the task directory and open the stores.

        ``adopt`` lists other copies of this task's state on this machine (standby replicas'):
        one that no process holds and that is further along its changelogs than the task
        directory takes its place first, so restoration replays only what it had not seen.
        """
        self.task_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.task_dir)
        if self._lock is None:
            raise StreamsError(
                f"task {self.task.task_id}'s state directory {self.task_dir} is in use by another "
                "process: two instances must not share a state_dir for the same task"
            )
        if adopt:
            self._adopt_best(adopt)
        self.task.open_stores()

    def _persistent_stores(self) -> list[str] | None:
        """The task's persistent stores, or ``None`` when a copy of them could not stand in
        for the task's own (a persistent store without a changelog would come back empty)."""
        changelogs = self.task.changelog_partitions()
        stores = [n for n, stack in self.task.store_stacks.items() if stack.bottom.persistent]
        if not stores or any(name not in changelogs for name in stores):
            return None
        return stores

    def _adopt_best(self, copies: Sequence[Path]) -> None:
        stores = self._persistent_stores()
        if stores is None:
            return
        best: tuple[int, Path, IO[str]] | None = None
        for copy in copies:
            lock = _lock(copy) if copy.is_dir() else None
            if lock is None:
                continue  # a live standby holds it: it stays where it is
            gain = copy_gain(self.task_dir, copy, stores)
            if gain is not None and (best is None or gain > best[0]):
                if best is not None:
                    best[2].close()
                best = (gain, copy, lock)
            else:
                lock.close()
        if best is None:
            return
        gain, copy, lock = best
        # Both directories are locked by this process: swap them, and keep the lock of the
        # copy, which is the task directory's lock file from now on.
        replaced = self.task_dir.with_name(f".{self.task_dir.name}.replaced-{os.getpid()}")
        os.replace(self.task_dir, replaced)
        os.replace(copy, self.task_dir)
        assert self._lock is not None
        self._lock.close()
        self._lock = lock
        shutil.rmtree(replaced, ignore_errors=True)
        log.info("task %s takes over the standby copy in %s: %d changelog records it need "
                 "not restore", self.task.task_id, copy, gain)  # fmt: skip

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


def _lock(directory: Path) -> IO[str] | None:
    """An exclusive lock on ``directory``, held while the returned file stays open; ``None``
    when another process (or another open of this one) holds it."""
    handle = open(directory / ".lock", "w")  # noqa: SIM115 - held until closed
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def copy_gain(task_dir: Path, copy: Path, stores: Sequence[str]) -> int | None:
    """How many changelog records a task in ``task_dir`` would not restore with ``copy``'s
    ``stores`` instead of its own; ``None`` unless the copy is as far along for every store
    (the task directory may hold nothing at all) and further in all. Reads both read-only.
    """
    own = {name: read_committed_offset(task_dir / name) for name in stores}
    theirs = {name: read_committed_offset(copy / name) for name in stores}
    if not all(_at_least(theirs[name], mine) for name, mine in own.items()):
        return None
    gain = sum((theirs[name] or 0) - (mine or 0) for name, mine in own.items())
    return gain if gain > 0 else None


def _at_least(offset: int | None, other: int | None) -> bool:
    """Whether a store at changelog ``offset`` holds all a store at ``other`` holds."""
    return offset is not None and (other is None or offset >= other)
