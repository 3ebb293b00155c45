"""Standby replicas keep a warm copy on another machine, so a failover restores almost nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fluvial.loader import load_app
from fluvial.processor.collector import TaskId
from fluvial.runtime.engine import assign_standbys, plan_tasks
from fluvial.runtime.standby import standby_copies
from fluvial.runtime.topics import ensure_internal_topics
from fluvial.runtime.worker import Worker
from tests.runtime.harness import (
    APP,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    read_topic,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_assign_standbys_never_places_a_standby_with_its_active() -> None:
    assignment = {0: [TaskId(0, 0), TaskId(1, 0)], 1: [TaskId(0, 1)], 2: [TaskId(1, 1)]}
    standbys = assign_standbys(assignment, replicas=2)
    for slot, tasks in standbys.items():
        assert not set(tasks) & set(assignment[slot])
    every = [t for tasks in standbys.values() for t in tasks]
    assert sorted(every) == sorted(
        t for tasks in assignment.values() for t in tasks for _ in range(2)
    )
    assert assign_standbys(assignment, replicas=0) == {0: [], 1: [], 2: []}


def test_promoted_standby_restores_only_what_it_had_not_seen(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, monkeypatch
) -> None:
    views = generate_views(seed=3, count=2000)
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("counts")
    app_id = unique_name("app")
    for name, value in {
        "FLUVIAL_TEST_INPUT": input_topic, "FLUVIAL_TEST_OUTPUT": output_topic,
        "FLUVIAL_TEST_APP_ID": app_id, "FLUVIAL_TEST_BOOTSTRAP": bootstrap_servers,
        "FLUVIAL_TEST_STATE_DIR": str(tmp_path / "unused"),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    loaded = load_app(APP)
    assert loaded.config is not None
    # Two "machines": each has its own state directory.
    host_a = loaded.config.with_overrides(state_dir=str(tmp_path / "host-a"))
    host_b = loaded.config.with_overrides(state_dir=str(tmp_path / "host-b"))
    plan = ensure_internal_topics(loaded.topology, host_a)
    tasks = plan_tasks(loaded.topology, host_a, plan)

    active = Worker(0, loaded.topology, host_a, tasks)
    standby = Worker(1, loaded.topology, host_b, [], standby_task_ids=tasks)
    stop = threading.Event()

    def tail() -> None:
        standby.start()
        while not stop.is_set():
            standby.run_once()
        standby.close()

    tailer = threading.Thread(target=tail)
    tailer.start()
    try:
        active.start()
        # Paced: each chunk's counts are committed before the next is sent, so the changelog
        # spans 20 commits (a commit logs each key it changed once).
        deadline = time.monotonic() + 300
        for end in range(100, len(views) + 1, 100):
            produce(bootstrap_servers, input_topic, views[end - 100 : end])
            reached = oracle_counts(views[:end])[0]
            while dict(read_revisions(bootstrap_servers, output_topic)) != reached:
                assert time.monotonic() < deadline, "the active did not reach the oracle in 300 s"
                for _ in range(50):
                    active.run_once()
        # Everything is committed and the active runs no more: the changelog is complete. The
        # standby has caught up once it has applied every committed record of it.
        changelog = f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog"
        written = len(read_topic(bootstrap_servers, changelog))
        wait_until(lambda: standby.metrics.standby_applied >= written, 180,
                   f"the standby to apply all {written} changelog records")  # fmt: skip
    finally:
        stop.set()
        tailer.join(60)
        active.close(clean=False)  # host A dies

    # The task moves to host B, where the standby kept its stores warm in a directory of its
    # own; the promoted task takes that copy over instead of restoring from scratch.
    root_b = tmp_path / "host-b" / app_id
    kept = [t for t in tasks if standby_copies(root_b, t)]
    assert kept, "the standby kept copies apart from the task directories"
    promoted = Worker(0, loaded.topology, host_b, tasks)
    promoted.start()
    try:
        assert not any(standby_copies(root_b, t) for t in kept), "the copies were taken over"
        applied = standby.metrics.standby_applied
        assert applied >= written > 100, "the standby applied the changelog as it was written"
        assert promoted.metrics.restore_total <= 0.05 * applied, (
            promoted.metrics.restore_total,
            applied,
        )
    finally:
        promoted.close(clean=True)

    # Without a standby, the same move replays the whole changelog.
    cold = Worker(0, loaded.topology, loaded.config.with_overrides(
        state_dir=str(tmp_path / "host-c")), tasks)  # fmt: skip
    cold.start()
    try:
        assert cold.metrics.restore_total >= applied
    finally:
        cold.close(clean=True)
