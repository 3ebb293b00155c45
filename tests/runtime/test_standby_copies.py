"""Which standby copy a starting task takes over: only a free one, and only when it is ahead.

No broker: the copies are RocksDB stores written here, at the changelog offsets a standby
would have checkpointed.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.collector import NoOutputCollector
from fluvial.runtime.state import TaskState
from fluvial.state.base import ChangelogRecord

STORE = "totals"
TASK = TaskId(0, 0)


def task_at(directory: Path, store_type: str | None = None) -> StreamTask:
    builder = StreamsBuilder()
    materialized = Materialized.as_(STORE)
    if store_type is not None:
        materialized = materialized.with_store_type(store_type)
    views = builder.stream("views", key_serde=serdes.string(), value_serde=serdes.string())
    views.group_by_key().count(materialized=materialized)
    config = StreamsConfig(application_id="copies", state_dir=str(directory.parent))
    [sub] = builder.build().subtopologies("copies")
    return StreamTask(TASK, sub, config, directory, NoOutputCollector("copies test"))


def write_copy(directory: Path, offset: int, value: bytes) -> None:
    """A task directory whose store holds one key, at changelog ``offset``."""
    task = task_at(directory)
    state = TaskState(task, directory)
    state.open()
    task.stores[STORE].restore([ChangelogRecord(b"k", value, 1)])
    task.stores[STORE].committed_offset = offset
    task.stores[STORE].flush()
    state.close()


def open_with(directory: Path, copies: list[Path]) -> tuple[int | None, bytes | None]:
    """Open the task with these copies on offer: its store's offset and raw value of k."""
    task = task_at(directory)
    state = TaskState(task, directory)
    state.open(adopt=copies)
    try:
        stack = task.store_stacks[STORE]
        return stack.bottom.committed_offset, stack.bottom.get(b"k")
    finally:
        state.close()


def test_a_free_copy_further_along_is_taken_over(tmp_path: Path) -> None:
    own, behind, ahead = tmp_path / "0_0", tmp_path / "s1" / "0_0", tmp_path / "s2" / "0_0"
    write_copy(own, 40, b"own")
    write_copy(behind, 30, b"behind")
    write_copy(ahead, 100, b"ahead")
    offset, value = open_with(own, [behind, ahead])
    assert offset == 100 and value is not None and value.endswith(b"ahead")
    assert not ahead.exists(), "the copy became the task directory"
    assert behind.exists(), "a copy behind stays where it is"


def test_a_copy_behind_or_held_is_left_alone(tmp_path: Path) -> None:
    own, behind, held = tmp_path / "0_0", tmp_path / "s1" / "0_0", tmp_path / "s2" / "0_0"
    write_copy(own, 40, b"own")
    write_copy(behind, 30, b"behind")
    write_copy(held, 100, b"held")
    with open(held / ".lock", "a") as lock:  # a live standby holds this copy
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        offset, value = open_with(own, [behind, held])
    assert offset == 40 and value is not None and value.endswith(b"own")
    assert behind.exists() and held.exists()


def test_a_fresh_task_directory_takes_any_copy(tmp_path: Path) -> None:
    copy = tmp_path / "s1" / "0_0"
    write_copy(copy, 7, b"copy")
    offset, value = open_with(tmp_path / "0_0", [copy])
    assert offset == 7 and value is not None and value.endswith(b"copy")


def test_stores_kept_in_memory_are_never_taken_from_a_copy(tmp_path: Path) -> None:
    copy = tmp_path / "s1" / "0_0"
    write_copy(copy, 7, b"copy")
    task = task_at(tmp_path / "0_0", "in_memory")
    state = TaskState(task, tmp_path / "0_0")
    state.open(adopt=[copy])
    try:
        assert task.store_stacks[STORE].bottom.get(b"k") is None
    finally:
        state.close()
    assert copy.exists()
