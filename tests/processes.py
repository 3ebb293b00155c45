"""Processes a test starts, stopped with everything they started however the test ends.

``spawn`` starts a process in a session of its own, so its process group holds whatever it
starts in turn (a Spark JVM, Python workers, executors), and registers it with the running test.
When the test ends (passed, failed, errored, or timed out by pytest-timeout) the autouse fixture
in ``tests/conftest.py`` stops every process the test registered that is still running; a
session finaliser stops whatever is left and the terminal summary names it.

``stop`` is the one way to stop a process here: SIGTERM then SIGCONT (a stopped process acts on
SIGTERM only once it runs again), SIGKILL after a grace period, each sent to every process of
its group and to every descendant that left the group. Tests that stop a process on purpose (a
graceful ``SIGTERM``, a ``kill -9``) still do that themselves: this module is the safety net.

Where ``setpriv`` exists, a spawned process also gets SIGKILL if the test process itself dies
without cleaning up (``kill -9`` of pytest), so not even that leaves a process behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GRACE_S = 10.0  # SIGTERM to SIGKILL
KILL_WAIT_S = 30.0  # SIGKILL to gone
SETTLE_S = 5.0  # what is left of a tree whose process exited may end by itself meanwhile

# The kernel sends the child SIGKILL when the thread that forked it exits; only used from the
# main thread, where that means the test process.
_SETPRIV = shutil.which("setpriv")


@dataclass(eq=False)
class Tracked:
    """A process a test started (or adopted), and the test it belongs to."""

    pid: int
    what: str
    owner: str | None  # the test's node id; None for the session
    popen: subprocess.Popen | None = None
    own_group: bool = True  # its process group is its own (pgid == pid)
    start_time: str | None = None  # from /proc, so a reused pid is never mistaken for it

    def describe(self) -> str:
        return f"{self.what} (pid {self.pid})"


_registry: list[Tracked] = []
_lock = threading.Lock()
_owner: str | None = None


def set_owner(owner: str | None) -> None:
    """Processes spawned from now on belong to ``owner`` (a test's node id), or to the session."""
    global _owner
    _owner = owner


def spawn(cmd: Sequence[str | os.PathLike[str]], *, what: str | None = None,
          **popen_kwargs: object) -> subprocess.Popen:  # fmt: skip
    """``subprocess.Popen(cmd, **popen_kwargs)`` in a new session, registered for cleanup."""
    if "start_new_session" in popen_kwargs or "process_group" in popen_kwargs:
        raise TypeError("spawn always starts a new session; do not pass start_new_session")
    argv = [os.fspath(part) for part in cmd]
    launch = argv
    if _SETPRIV and threading.current_thread() is threading.main_thread():
        launch = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    proc = subprocess.Popen(launch, start_new_session=True, **popen_kwargs)  # type: ignore[call-overload]
    tracked = Tracked(proc.pid, what or _short(argv), _owner, proc, True, _start_time(proc.pid))
    with _lock:
        _registry.append(tracked)
    return proc


def adopt(pid: int, what: str) -> None:
    """Register a process the test started indirectly, e.g. a broker a CLI left running."""
    try:
        own_group = os.getpgid(pid) == pid != os.getpgid(0)
    except ProcessLookupError:
        return
    with _lock:
        if any(t.pid == pid and t.popen is None for t in _registry):
            return
        _registry.append(Tracked(pid, what, _owner, None, own_group, _start_time(pid)))


def run(cmd: Sequence[str | os.PathLike[str]], *, timeout: float, what: str | None = None,
        input: str | None = None, **popen_kwargs: object) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Like ``subprocess.run(cmd, capture_output=True, text=True, timeout=...)``, except that a
    timeout or any exception (pytest-timeout's included) stops the process and all it started.
    """
    argv = [os.fspath(part) for part in cmd]
    proc = spawn(argv, what=what, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        stdout, stderr = proc.communicate()
        raise AssertionError(
            f"{what or _short(argv)} did not finish within {timeout:.0f} s; stopped it. "
            f"Its last output:\n{(stdout or '')[-2000:]}{(stderr or '')[-3000:]}"
        ) from None
    except BaseException:
        stop(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def stop(process: subprocess.Popen | Tracked, grace_s: float = GRACE_S) -> bool:
    """Stop a process, its group and its descendants; True if any of them was still running."""
    return bool(_stop(process if isinstance(process, Tracked) else _tracked_for(process), grace_s))


def _stop(tracked: Tracked, grace_s: float, settle_s: float = 0.0) -> list[str]:
    """Stop the tracked tree; describe the processes of it that were running (none: [])."""
    _reap(tracked)
    members = _members(tracked)
    if members and settle_s and tracked.pid not in {pid for pid, _start in members}:
        # The process itself has exited and what is left of its group is on its way out (a
        # Spark JVM ends within a second of its driver): not left running unless it stays.
        _wait_gone(tracked, members, settle_s)
        members = _alive(members) | _members(tracked)
    if not members:
        return []
    running = [f"{pid} {_command(pid)}" for pid, _start in sorted(members)]
    _signal(members, signal.SIGTERM)
    _signal(members, signal.SIGCONT)
    if not _wait_gone(tracked, members, grace_s):
        members |= _members(tracked)
        _signal(members, signal.SIGKILL)
        if not _wait_gone(tracked, members, KILL_WAIT_S):
            left = ", ".join(str(pid) for pid, _start in sorted(_alive(members)))
            raise RuntimeError(f"{tracked.describe()}: processes {left} survived SIGKILL")
    _reap(tracked)
    return running


def stop_all(owner: str | None = None, *, everything: bool = False) -> list[str]:
    """Stop the registered processes of ``owner`` (every one with ``everything``) that still
    run, forget them, and describe the ones that had to be stopped."""
    with _lock:
        mine = [t for t in _registry if everything or t.owner == owner]
        for tracked in mine:
            _registry.remove(tracked)
    stopped = []
    for tracked in mine:
        try:
            running = _stop(tracked, GRACE_S, settle_s=SETTLE_S)
        except RuntimeError as error:
            stopped.append(str(error))
            continue
        if running:
            stopped.append(f"{tracked.describe()}: {'; '.join(running)}")
    return stopped


# -- the process table ------------------------------------------------------------------------


def _stat(pid: int | str) -> tuple[int, int, str, str] | None:
    """(ppid, pgid, state, start time) of a process from /proc, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces
    return int(fields[1]), int(fields[2]), fields[0], fields[19]


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    args = [a.decode(errors="replace") for a in argv if a]
    if args and os.path.basename(args[0]) == "setpriv" and "--" in args:
        # Read before setpriv ran the command (a loaded machine): name the command itself.
        args = args[args.index("--") + 1 :]
    return _short(args)


def _start_time(pid: int) -> str | None:
    stat = _stat(pid)
    return stat[3] if stat else None


def _members(tracked: Tracked) -> set[tuple[int, str]]:
    """Every live (not zombie) process of the tracked process's group or among its descendants."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None:
                table[int(entry)] = stat
    root = table.get(tracked.pid)
    if root is not None and tracked.start_time is not None and root[3] != tracked.start_time:
        # The pid was reused. The kernel keeps a pid reserved while it names a process group,
        # so the reuse also means nothing of the tracked group is left.
        return set()
    found = set()
    if root is not None:
        found.add(tracked.pid)
    if tracked.own_group:
        found |= {pid for pid, stat in table.items() if stat[1] == tracked.pid}
    # Descendants that left the group (a new session of their own) are found by parentage.
    frontier = set(found)
    while frontier:
        frontier = {pid for pid, stat in table.items() if stat[0] in frontier} - found
        found |= frontier
    me = os.getpid()
    return {(pid, table[pid][3]) for pid in found if pid != me and table[pid][2] not in "ZX"}


def _alive(members: set[tuple[int, str]]) -> set[tuple[int, str]]:
    alive = set()
    for pid, start in members:
        stat = _stat(pid)
        if stat is not None and stat[2] not in ("Z", "X") and stat[3] == start:
            alive.add((pid, start))
    return alive


def _signal(members: set[tuple[int, str]], sig: int) -> None:
    # Each process by its pid (checked against its start time), never a whole group by its id:
    # a group id whose processes are all gone may already name someone else's group.
    for pid, _start in _alive(members):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(tracked: Tracked, members: set[tuple[int, str]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(tracked)
        if not _alive(members) and not _members(tracked):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _reap(tracked: Tracked) -> None:
    if tracked.popen is not None:
        tracked.popen.poll()


def _tracked_for(proc: subprocess.Popen) -> Tracked:
    with _lock:
        for tracked in _registry:
            if tracked.popen is proc:
                return tracked
    # Not spawned here: treat it as a group leader only if it really leads its own group.
    try:
        own_group = os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    except ProcessLookupError:
        own_group = False
    return Tracked(proc.pid, _short(proc.args), None, proc, own_group, _start_time(proc.pid))


def _short(argv: object) -> str:
    parts = [str(a) for a in argv] if isinstance(argv, list | tuple) else [str(argv)]
    text = " ".join(Path(parts[0]).name if i == 0 else p for i, p in enumerate(parts))
    return text if len(text) <= 120 else text[:117] + "..."
