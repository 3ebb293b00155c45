"""What each isolation sees of one task's stores, step by step through a commit (no broker).

A transcript: records are processed (not committed), the transaction commits, more records
are processed, the task crashes. ``committed`` must only ever show committed counts, so no
answer it gave can be taken back; ``latest`` shows the newest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.iq.queries import LocalQueries, StoreUnavailableError
from fluvial.processor.collector import ConsumedRecord, TaskId
from fluvial.processor.task import StreamTask
from fluvial.runtime.state import TaskState


class Sink:
    def __init__(self) -> None:
        self.records: list[tuple] = []

    def send(self, topic, key, value, timestamp_ms, headers, partition) -> None:  # noqa: ANN001
        self.records.append((topic, key, value, partition))


class OneTask:
    """The :class:`~fluvial.iq.queries.TaskSource` of a single task."""

    def __init__(self, task: StreamTask) -> None:
        self.task: StreamTask | None = task

    def find(self, task_id: TaskId) -> tuple[StreamTask | None, str]:
        return (self.task, "running") if self.task is not None else (None, "not running")

    def slot_of(self, task_id: TaskId) -> int | None:
        return 0


@pytest.mark.parametrize("caching", [0, 10_000_000], ids=["no-cache", "cache"])
def test_committed_shows_only_committed_counts_latest_shows_the_newest(
    tmp_path: Path, caching: int
) -> None:
    builder = StreamsBuilder()
    builder.stream("clicks", key_serde=serdes.string(), value_serde=serdes.string()).group_by_key(
    ).count(materialized=Materialized.as_("clicks-per-user"))  # fmt: skip
    topology = builder.build()
    config = StreamsConfig(application_id="iq", state_dir=str(tmp_path), cache_max_bytes=caching,
                           processing_guarantee="exactly_once_v2")  # fmt: skip
    (sub,) = topology.subtopologies("iq")
    task = StreamTask(TaskId(0, 0), sub, config, tmp_path / "0_0", Sink())
    state = TaskState(task, tmp_path / "0_0")
    state.open()
    task.initialize()
    source = OneTask(task)
    queries = LocalQueries(topology, "iq", [TaskId(0, 0)], source, exactly_once=True)
    committed = queries.store("clicks-per-user")
    latest = queries.store("clicks-per-user", isolation="latest")

    def click(user: str, offset: int) -> None:
        task.add_records("clicks", 0, [ConsumedRecord(user.encode(), b"x", 1000 + offset, offset)])
        while task.process_one(0):
            pass

    click("ann", 0)
    click("ann", 1)
    click("bob", 2)
    assert committed.get("ann") is None and committed.all() == []
    assert latest.get("ann") == 2 and latest.get("bob") == 1

    # The commit: flush caches into the transaction, then (after Kafka committed) apply.
    task.flush()
    state.committed({("iq-clicks-per-user-changelog", 0): 2})
    assert committed.get("ann") == 2 and committed.all() == [("ann", 2), ("bob", 1)]

    click("ann", 3)
    task.flush()  # in the open transaction, not committed
    assert latest.get("ann") == 3
    assert committed.get("ann") == 2, "a count the crash below takes back must not be answered"

    # A crash: the open transaction is gone, and so is the task until it restarts.
    state.close()
    with pytest.raises(StoreUnavailableError, match="restarting"):
        committed.get("ann")
    source.task = None
    with pytest.raises(StoreUnavailableError, match="not running"):
        committed.get("ann")

    # Restarted from the same state directory: committed state is what the last commit held.
    task = StreamTask(TaskId(0, 0), sub, config, tmp_path / "0_0", Sink())
    state = TaskState(task, tmp_path / "0_0")
    state.open()
    with pytest.raises(StoreUnavailableError):
        source.task = task  # restored but not initialized: still restoring
        committed.get("ann")
    task.initialize()
    assert committed.get("ann") == 2 and latest.get("ann") == 2
    state.close()
