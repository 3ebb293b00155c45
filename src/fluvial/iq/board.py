"""Where a running application's tasks stand, shared with its reader process.

The reader process (:mod:`fluvial.iq.reader`) answers committed queries from the task
stores' files. It may do so only while a task *runs*: during a restore the files hold an older
or partly rebuilt state, which must never be answered. The application process says where each
task stands on a small board, a memory-mapped file:

- a header (JSON): the application id, every task and the slot it runs in;
- one 8-byte word for the application (running, or stopped), and two per task:
  - its state (starting, restoring, running), its slot, and its *generation*, which goes up
    each time the task is opened anew. A task restarted after a failure, even one that came
    back to the same state, is a new generation: the reader reopens its view of the files;
  - how many commits its stores have taken in, counted *after* each commit reached them: the
    reader catches up with the files only when that count moved, not on every query.

The application writes a task's word *before* it touches the task's stores (a restore), and
the reader reads it *after* it looked at the files. So a reader that finds "running, generation
G" after catching up with the files knows they held generation G's committed state only.

Each word is written and read whole: an aligned 8-byte store or load (``memoryview`` of format
``q`` copies the 8 bytes at once), so a reader never sees half of an update.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from fluvial.processor.collector import TaskId

STARTING, RESTORING, RUNNING = 0, 1, 2
STOPPED = 3  # the application word only
COMMITTED = 4  # an event, not a state: the task's stores took in a commit
_STATE_BITS, _SLOT_BITS = 8, 16
_HEADER_LENGTH = 8  # bytes holding the length of the JSON header that follows


def _word(state: int, slot: int, generation: int) -> int:
    return (generation << (_STATE_BITS + _SLOT_BITS)) | (slot << _STATE_BITS) | state


def _unword(word: int) -> tuple[int, int, int]:
    state = word & ((1 << _STATE_BITS) - 1)
    slot = (word >> _STATE_BITS) & ((1 << _SLOT_BITS) - 1)
    return state, slot, word >> (_STATE_BITS + _SLOT_BITS)


def _words_offset(header: bytes) -> int:
    # Words start 8-byte aligned after the header.
    return (_HEADER_LENGTH + len(header) + 7) // 8 * 8


class TaskBoard:
    """The application's side: publishes its tasks, then each change of a task's state."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._index: dict[TaskId, int] = {}
        self._generations: dict[TaskId, int] = {}
        self._map: mmap.mmap | None = None
        self._words: memoryview | None = None

    def publish(self, application_id: str, assignment: dict[int, list[TaskId]]) -> None:
        """Write the board: every task starting in its slot, the application running."""
        tasks = sorted((task, slot) for slot, tasks in assignment.items() for task in tasks)
        header = json.dumps({
            "application_id": application_id,
            "tasks": [[str(task), slot] for task, slot in tasks],
        }).encode()  # fmt: skip
        offset = _words_offset(header)
        data = bytearray(offset + 8 * (1 + 2 * len(tasks)))
        data[:_HEADER_LENGTH] = len(header).to_bytes(_HEADER_LENGTH, "little")
        data[_HEADER_LENGTH : _HEADER_LENGTH + len(header)] = header
        words = memoryview(data)[offset:].cast("q")
        words[0] = _word(RUNNING, 0, 0)
        for index, (_, slot) in enumerate(tasks):
            words[1 + 2 * index] = _word(STARTING, slot, 0)
        words.release()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        partial.write_bytes(bytes(data))
        with open(partial, "r+b") as file:
            mapped = mmap.mmap(file.fileno(), len(data))
        # Readers only ever see a complete board: it appears under its name in one rename.
        partial.replace(self.path)
        with self._lock:
            self._map = mapped
            self._words = memoryview(mapped)[offset:].cast("q")
            self._index = {task: 1 + 2 * index for index, (task, _) in enumerate(tasks)}
            self._generations = {task: 0 for task, _ in tasks}

    def update(self, slot: int, task_id: TaskId, event: int) -> None:
        """``task_id`` of ``slot`` is now ``event`` (a state): call it *before* restoring its
        stores. Or it ``COMMITTED``: call it *after* the commit reached its stores."""
        with self._lock:
            if self._words is None or task_id not in self._index:
                return
            index = self._index[task_id]
            if event == COMMITTED:
                self._words[index + 1] += 1
                return
            if event == RESTORING:
                self._generations[task_id] += 1
            self._words[index] = _word(event, slot, self._generations[task_id])

    def stopped(self) -> None:
        """The application stops: its health turns to "stopped"."""
        with self._lock:
            if self._words is not None:
                self._words[0] = _word(STOPPED, 0, 0)

    def close(self) -> None:
        with self._lock:
            if self._words is not None:
                self._words.release()
                self._words = None
            if self._map is not None:
                self._map.close()
                self._map = None


class BoardView:
    """The reader's side: reads the board once the application has published it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.application_id: str | None = None
        self.task_ids: list[TaskId] = []
        self.slots: dict[TaskId, int] = {}
        self._index: dict[TaskId, int] = {}
        self._map: mmap.mmap | None = None
        self._words: memoryview | None = None

    def ready(self) -> bool:
        """Whether the board is published (the application planned its tasks)."""
        if self._words is not None:
            return True
        try:
            with open(self.path, "rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except (FileNotFoundError, ValueError):
            return False
        length = int.from_bytes(mapped[:_HEADER_LENGTH], "little")
        header: dict[str, Any] = json.loads(mapped[_HEADER_LENGTH : _HEADER_LENGTH + length])
        self.application_id = header["application_id"]
        tasks = [(TaskId(*map(int, text.split("_"))), slot) for text, slot in header["tasks"]]
        self.task_ids = [task for task, _ in tasks]
        self.slots = dict(tasks)
        self._index = {task: 1 + 2 * index for index, (task, _) in enumerate(tasks)}
        offset = (_HEADER_LENGTH + length + 7) // 8 * 8
        self._map = mapped
        self._words = memoryview(mapped)[offset:].cast("q")
        return True

    def task(self, task_id: TaskId) -> tuple[int, int, int] | None:
        """(state, slot, generation) of a task, or ``None`` for a task the board lacks."""
        index = self._index.get(task_id)
        if index is None or self._words is None:
            return None
        return _unword(self._words[index])

    def commits(self, task_id: TaskId) -> int:
        """How many commits the task's stores took in (since the application started)."""
        index = self._index.get(task_id)
        if index is None or self._words is None:
            return 0
        return int(self._words[index + 1])

    @property
    def running(self) -> bool:
        return self._words is not None and _unword(self._words[0])[0] == RUNNING

    def serving(self) -> tuple[int, int]:
        """(tasks running, tasks) on the board."""
        if self._words is None:
            return 0, 0
        words = self._words
        states = [_unword(words[index])[0] for index in self._index.values()]
        return states.count(RUNNING), len(self.task_ids)

    def close(self) -> None:
        if self._words is not None:
            self._words.release()
            self._words = None
        if self._map is not None:
            self._map.close()
            self._map = None


def board_path(state_root: Path, pid: int | None = None) -> Path:
    """The board of the application process ``pid`` (this one by default)."""
    return reader_dir(state_root, pid) / "tasks.board"


def reader_dir(state_root: Path, pid: int | None = None) -> Path:
    """What one application process shares with its reader: the board and the reader's
    RocksDB secondary instances' own files, under ``<state_dir>/<application_id>/.reader``."""
    return Path(state_root) / ".reader" / str(os.getpid() if pid is None else pid)


def remove_stale_reader_dirs(state_root: Path) -> None:
    """Remove what application processes that are gone shared with their readers."""
    parent = Path(state_root) / ".reader"
    if not parent.is_dir():
        return
    for entry in parent.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            os.kill(int(entry.name), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # alive, and not ours
