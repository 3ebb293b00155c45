"""The safety net for processes tests start: ``tests/processes.py`` stops whole process trees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import processes
from tests.processes import _stat


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] not in "ZX"


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        stat = _stat(entry) if entry.isdigit() else None
        if stat is not None and stat[0] == pid and stat[2] not in "ZX":
            found.append(int(entry))
    return found


def wait_for(condition, what: str, timeout_s: float = 30):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_stopped_tree_is_continued_terminated_and_gone() -> None:
    # A shell with a child in its group and a grandchild in a session of its own.
    proc = processes.spawn(["sh", "-c", "sleep 300 & setsid sleep 301 & wait"])
    shell_children = wait_for(lambda: len(children_of(proc.pid)) == 2 and children_of(proc.pid),
                              "the shell's two children")  # fmt: skip
    os.killpg(proc.pid, signal.SIGSTOP)  # as a test does to a zombie
    for pid in shell_children:
        os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    assert processes.stop(proc) is True
    assert time.monotonic() - started < processes.GRACE_S, "SIGTERM sufficed, no SIGKILL wait"
    assert proc.returncode == -signal.SIGTERM
    assert not any(alive(pid) for pid in [proc.pid, *shell_children])
    assert processes.stop(proc) is False, "stopping it again finds nothing running"


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period() -> None:
    proc = processes.spawn(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"],
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    started = time.monotonic()
    assert processes.stop(proc, grace_s=0.5) is True
    assert proc.returncode == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - started < 10


def test_stop_all_stops_what_a_test_left_running_and_names_it() -> None:
    processes.set_owner("test-a")
    try:
        left = processes.spawn(["sleep", "300"], what="left running")
        done = processes.spawn(["true"], what="finished by itself")
        # Leaders that exited at once: one leaves a child that ends a moment later by itself
        # (as a Spark JVM after its driver), the other a child that would run on.
        ending = processes.spawn(["sh", "-c", "sleep 1 &"], what="leaves a short child")
        orphan = processes.spawn(["sh", "-c", "sleep 302 &"], what="leaves an orphan")
        processes.set_owner("test-b")
        other = processes.spawn(["sleep", "300"], what="another test's")
    finally:
        processes.set_owner(None)
    for proc in (done, ending, orphan):
        proc.wait(30)
    stopped = processes.stop_all("test-a")
    assert len(stopped) == 2, stopped
    assert stopped[0] == f"left running (pid {left.pid}): {left.pid} sleep 300"
    assert stopped[1].startswith(f"leaves an orphan (pid {orphan.pid}): ")
    assert stopped[1].endswith(" sleep 302")
    assert left.poll() == -signal.SIGTERM
    assert other.poll() is None, "only the finished test's processes are stopped"
    assert processes.stop_all("test-b") == [
        f"another test's (pid {other.pid}): {other.pid} sleep 300"
    ]


def test_run_stops_the_process_on_timeout_and_returns_output_otherwise() -> None:
    result = processes.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    started = time.monotonic()
    try:
        processes.run(["sh", "-c", "echo begun; exec sleep 300"], timeout=1, what="a sleeper")
    except AssertionError as error:
        assert "a sleeper did not finish within 1 s" in str(error)
        assert "begun" in str(error)
    else:
        raise AssertionError("run did not time out")
    assert time.monotonic() - started < processes.GRACE_S


def test_a_process_caught_before_setpriv_ran_it_is_named_by_its_command() -> None:
    """On a loaded machine stop_all can read a process while it is still the setpriv wrapper:
    the name it reports is the command the test started all the same."""
    script = "import time; time.sleep(60)"
    # A process whose command line is the wrapper's, as seen before it executes the command.
    wrapper = subprocess.Popen(["bash", "-c", f'exec -a setpriv {sys.executable} -c "{script}" '
                                "--pdeathsig KILL -- sleep 300"])  # fmt: skip
    try:
        # bash's own command line also holds "--pdeathsig": wait for the exec, not the word.
        wait_for(lambda: Path(f"/proc/{wrapper.pid}/cmdline").read_bytes().startswith(b"setpriv\0"),
                 "the wrapper's command line")  # fmt: skip
        assert processes._command(wrapper.pid) == "sleep 300"
    finally:
        wrapper.kill()
        wrapper.wait(30)
