"""Standby replicas on the Spark engine, and stale reads from them while a task's active is down.

``fluvial run --engine spark --master local[2] --serve`` runs the served Figure 2 app with
``num_standby_replicas=1``: each of the two slots keeps a standby of the other's tasks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.iq.harness import (
    STORE,
    ServedRunner,
    ask,
    counts_of,
    get,
    in_grace_views,
    standbys_caught_up,
)
from tests.runtime.harness import produce, read_revisions, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def slot_pid(runner: ServedRunner, slot: int) -> int | None:
    """The Python worker process that runs (or last ran) a slot."""
    path = runner.state_dir / runner.app_id / ".slots" / f"slot-{slot}.pid"
    try:
        pid = int(path.read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def try_lock(directory: Path) -> IO[str] | None:
    handle = open(directory / ".lock", "a")  # noqa: SIM115 - held by the caller
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


@contextlib.contextmanager
def slot_held_down(runner: ServedRunner, slot: int, tasks: list[str]) -> Iterator[int]:
    """kill -9 the Python worker that runs ``slot``, then hold its task directories as a
    process still handing them over would: the slot's next attempt waits to start (its active
    tasks are "starting") for as long as the block runs. Yields the killed pid."""
    root = runner.state_dir / runner.app_id
    for _ in range(3):
        pid = wait_until(lambda: slot_pid(runner, slot), 120, f"a live process to run slot {slot}",
                         interval_s=0.1)  # fmt: skip
        os.kill(pid, signal.SIGKILL)
        held: list[IO[str]] = []
        deadline = time.monotonic() + 10
        while len(held) < len(tasks) and time.monotonic() < deadline:
            lock = try_lock(root / tasks[len(held)])
            if lock is None:
                time.sleep(0.002)
            else:
                held.append(lock)
        if len(held) < len(tasks):
            # The slot's next attempt took a directory first: let it run, and kill again.
            for lock in held:
                lock.close()
            wait_until(lambda p=pid: slot_pid(runner, slot) not in (None, p), 120,
                       "the slot to run again")  # fmt: skip
            continue
        try:
            yield pid
        finally:
            for lock in held:
                lock.close()
        return
    raise AssertionError(f"slot {slot}'s next attempt took its task directories first 3 times")


def diagnosis(runner: ServedRunner) -> str:
    """What a failing check should show: the slots' registrations, the leases, the log."""
    root = runner.state_dir / runner.app_id
    slots = {p.name: p.read_text() for p in sorted((root / ".slots").iterdir()) if p.is_file()}
    leases_path = root / "leases.jsonl"
    leases = leases_path.read_text().splitlines()[-6:] if leases_path.exists() else []
    return f"slots {slots}; leases {leases}; log:\n{runner.output()[-4000:]}"


def test_stale_reads_come_from_the_standby_while_the_active_is_down(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    views = in_grace_views(seed=21, count=3000)
    oracle = counts_of(views)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state", engine="spark",
                          extra_env={"FLUVIAL_TEST_STANDBYS": "1"})  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()
        port = runner.port
        produce(bootstrap_servers, runner.input_topic, views)
        wait_until(
            lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
            180, "the committed output to reach the oracle",
        )  # fmt: skip

        # Each slot keeps a standby of the other slot's store tasks.
        standbys = get(port, "/health").body["standbys"]
        store_tasks = {"0": ["1_1", "1_3"], "1": ["1_0", "1_2"]}
        for slot, tasks in store_tasks.items():
            assert set(tasks) <= set(standbys[slot]), standbys

        # At quiescence the standbys catch up: every standby store's lag reaches 0.
        wait_until(lambda: standbys_caught_up(port, store_tasks), 120,
                   "every standby's lag to reach 0", interval_s=1)  # fmt: skip

        # Who owns what, asked as a client would without allow_stale.
        owner: dict[str, tuple[int, str]] = {}
        for (category, start), count in sorted(oracle.items()):
            answer = ask(port, f"/stores/{STORE}/keys/{category}?time={start}")
            assert answer.status == 200 and answer.body["value"] == count, answer.body
            assert answer.body["standby_slots"] == [1 - answer.body["slot"]], answer.body
            owner[category] = (answer.body["slot"], answer.body["task"])
        down = {k: v for k, v in oracle.items() if owner[k[0]][0] == 0}
        up = {k: v for k, v in oracle.items() if owner[k[0]][0] == 1}
        assert down and up, "keys of both slots"
        down_tasks = store_tasks["1"]  # slot 0's store tasks: slot 1 keeps their standbys
        assert {owner[c][1] for c, _ in down} <= set(down_tasks)

        with slot_held_down(runner, 0, down_tasks) as killed:
            # Without allow_stale nothing changes: 503 with Retry-After, never a value.
            (category, start), _ = sorted(down.items())[0]
            refused = get(port, f"/stores/{STORE}/keys/{category}?time={start}", timeout=30)
            assert refused.status == 503, refused.body
            assert refused.headers.get("Retry-After") or refused.headers.get("retry-after")
            assert "value" not in refused.body

            # With allow_stale the standby on slot 1 answers: the committed value, marked
            # stale, with how far behind each changelog partition read is (nothing, here).
            for (category, start), count in sorted(down.items()):
                path = f"/stores/{STORE}/keys/{category}?time={start}&allow_stale=true"
                answer = ask(port, path, timeout_s=60)
                body = answer.body
                assert answer.status == 200, (body, killed, diagnosis(runner))
                assert body["value"] == count, (category, start, body)
                assert body["stale"] is True and body["standby_slot"] == 1, body
                assert body["slot"] == 0 and body["isolation"] == "committed", body
                assert body["lag"]["offset_lag"] == 0, body
                [partition] = body["lag"]["partitions"]
                assert partition["changelog"].endswith(f"-{STORE}-changelog"), partition
                assert partition["partition"] == body["partition"], partition
                assert partition["position"] == partition["end"] > 0, partition

            stale_total = sum(
                float(line.rsplit(" ", 1)[1])
                for line in get(port, "/metrics").body["text"].splitlines()
                if line.startswith(f'fluvial_queries_stale_total{{store="{STORE}"}}')
            )
            assert stale_total >= len(down), "the driver counts the stale answers"

            # The other slot's keys come from their active task, not stale.
            (category, start), count = sorted(up.items())[0]
            answer = ask(port, f"/stores/{STORE}/keys/{category}?time={start}&allow_stale=true")
            assert answer.status == 200 and answer.body["value"] == count, answer.body
            assert answer.body["stale"] is False, answer.body

            # A scan merges slot 1's own tasks with its standbys of slot 0's.
            everything = ask(port, f"/stores/{STORE}/windows?allow_stale=true", timeout_s=60)
            assert everything.status == 200, everything.body
            assert everything.body["stale"] is True, everything.body
            assert {
                (w["key"], w["start"]): w["value"] for w in everything.body["windows"]
            } == oracle
            assert {p["task"] for p in everything.body["lag"]["partitions"]} == set(down_tasks)

        # Once slot 0 runs again, its keys are answered by their active task again.
        for (category, start), count in sorted(down.items()):
            answer = ask(port, f"/stores/{STORE}/keys/{category}?time={start}", timeout_s=180)
            assert answer.status == 200 and answer.body["value"] == count, answer.body
        assert dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle
        assert runner.stop() == 0, runner.output()[-5000:]
    finally:
        if runner.alive():
            runner.kill9()
