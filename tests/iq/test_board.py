"""The task board an application shares with its reader process (no broker).

The reader may read a task's files only while the board says the task runs, in the generation
it opened them in; it catches up only when the task's commit count moved.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fluvial.iq.board import (
    COMMITTED,
    RESTORING,
    RUNNING,
    STARTING,
    BoardView,
    TaskBoard,
    board_path,
    remove_stale_reader_dirs,
)
from fluvial.processor.collector import TaskId

A, B, C = TaskId(0, 0), TaskId(1, 0), TaskId(1, 1)


def test_the_reader_sees_each_task_state_generation_and_commit_count(tmp_path: Path) -> None:
    path = board_path(tmp_path)
    board, view = TaskBoard(path), BoardView(path)
    assert not view.ready(), "nothing to read before the application planned its tasks"

    board.publish("app", {0: [A, B], 1: [C]})
    assert view.ready() and view.application_id == "app"
    assert view.task_ids == [A, B, C] and view.slots == {A: 0, B: 0, C: 1}
    assert view.running and view.serving() == (0, 3)
    assert view.task(C) == (STARTING, 1, 0)
    assert view.task(TaskId(7, 7)) is None

    board.update(1, C, RESTORING)
    assert view.task(C) == (RESTORING, 1, 1), "opened anew: a new generation"
    board.update(1, C, RUNNING)
    assert view.task(C) == (RUNNING, 1, 1) and view.serving() == (1, 3)
    board.update(1, C, COMMITTED)
    board.update(1, C, COMMITTED)
    assert view.commits(C) == 2 and view.task(C) == (RUNNING, 1, 1), "commits leave the state"

    # A restart after a failure: stopped, restored, running again in a new generation.
    board.update(1, C, STARTING)
    board.update(1, C, RESTORING)
    board.update(1, C, RUNNING)
    assert view.task(C) == (RUNNING, 1, 2)
    assert view.task(A) == (STARTING, 0, 0), "other tasks keep their words"

    board.stopped()
    assert not view.running
    view.close()
    board.close()


def test_a_board_published_again_is_a_new_file_the_old_view_keeps_its_own(tmp_path: Path) -> None:
    path = board_path(tmp_path)
    first, view = TaskBoard(path), BoardView(path)
    first.publish("app", {0: [A]})
    assert view.ready()
    first.update(0, A, RESTORING)
    second = TaskBoard(path)
    second.publish("app", {0: [A, B]})  # a second application process, by mistake
    assert view.task(A) == (RESTORING, 0, 1) and view.task(B) is None
    for item in (view, first, second):
        item.close()


def test_boards_of_dead_application_processes_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    gone = board_path(tmp_path, int(dead.stdout))
    mine = board_path(tmp_path)
    for path in (gone, mine):
        TaskBoard(path).publish("app", {0: [A]})
    remove_stale_reader_dirs(tmp_path)
    assert not gone.parent.exists()
    assert mine.exists() and mine.parent.name == str(os.getpid())
