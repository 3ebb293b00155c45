"""The driver places each task of a lease on one slot, over its real TCP endpoint: a task whose
Python worker holds a slot's warm Worker runs that slot, every slot runs exactly once, and a
retried task runs the slot its partition was given."""

from __future__ import annotations

import itertools
import random
import threading

import pytest

from fluvial.spark.progress import LeaseProgress, ask_slot


@pytest.fixture
def progress():
    server = LeaseProgress("127.0.0.1", threading.Event())
    yield server
    server.close()


def ask(progress: LeaseProgress, lease: int, partition: int, holding: list[int]) -> int | None:
    return ask_slot(progress.address, progress.token, lease=lease, partition=partition,
                    holding=holding)  # fmt: skip


def test_two_tasks_that_landed_in_each_others_process_swap_slots(progress) -> None:
    progress.begin_lease(5, [0, 1])
    # Spark gave partition 0 to the process that ran slot 1 last lease, and partition 1 to the
    # one that ran slot 0: each runs the slot it holds warm.
    assert ask(progress, 5, 0, [1]) == 1
    assert ask(progress, 5, 1, [0]) == 0
    # Spark runs partition 0 again (its Python worker died): the same slot, whatever it holds.
    assert ask(progress, 5, 0, []) == 1


def test_a_task_whose_slot_another_took_runs_the_slot_left_over(progress) -> None:
    progress.begin_lease(2, [0, 1, 2])
    assert ask(progress, 2, 0, [2]) == 2  # warm
    assert ask(progress, 2, 1, []) == 1  # its own
    # Its own slot (2) went to partition 0: slot 0, whose partition runs slot 2, is left.
    assert ask(progress, 2, 2, []) == 0


def test_outside_the_lease_in_flight_a_task_runs_its_own_slot(progress) -> None:
    progress.begin_lease(3, [0, 1])
    assert ask(progress, 2, 0, [1]) == 0  # a task of an older lease
    assert ask(progress, 3, 7, [1]) == 7  # not a slot of this lease
    # Neither took a slot of lease 3 from its own tasks.
    assert ask(progress, 3, 0, [0]) == 0
    assert ask(progress, 3, 1, [1]) == 1


def test_a_wrong_token_gets_no_slot(progress) -> None:
    progress.begin_lease(1, [0, 1])
    assert ask_slot(progress.address, "0" * 32, lease=1, partition=0, holding=[1]) is None
    assert ask(progress, 1, 0, [1]) == 1  # the slot was not given away


@pytest.mark.parametrize("slots", [1, 2, 3, 4])
def test_every_slot_runs_once_whatever_the_order_and_holdings(progress, slots: int) -> None:
    rng = random.Random(slots)
    for lease, order in enumerate(itertools.permutations(range(slots)), start=1):
        # Each slot's warm Worker is in at most one process; a process holds 0 to 2 of them.
        holders = [rng.randrange(slots + 1) for _ in range(slots)]  # slot -> partition's process
        holding = {p: [s for s in range(slots) if holders[s] == p] for p in range(slots)}
        progress.begin_lease(lease, list(range(slots)))
        placed = {p: ask(progress, lease, p, holding[p]) for p in order}
        assert sorted(placed.values()) == list(range(slots)), (order, holding, placed)
        for partition, slot in placed.items():
            # Warm wins unless an earlier task already took every slot this process holds.
            warm = holding[partition]
            if warm and slot not in warm:
                earlier = [placed[p] for p in order[: order.index(partition)]]
                assert all(s in earlier for s in warm), (order, holding, placed)
        retried = rng.randrange(slots)
        assert ask(progress, lease, retried, []) == placed[retried]
