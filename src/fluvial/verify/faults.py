"""Processes of the fault matrix and the faults injected into them, for real.

Each ``fluvial run`` of the verify app starts in a process group of its own. Under the Spark
engine that group holds the driver's Python process, its JVM and the PySpark Python workers,
so a driver ``kill -9`` (``kill-app``) takes them all down at once, as a machine loss would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fluvial import children

APP = Path(__file__).with_name("app.py")
READY_LINE = "Ctrl-C commits and stops"


def wait_for(condition: Callable[[], object], timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return False


class AppProcess:
    """One ``fluvial run`` process of the verify app (and, on Spark, its JVM and workers)."""

    def __init__(self, env: dict[str, str], engine: str, log_dir: Path, state_dir: Path) -> None:
        self.env, self.engine, self.log_dir, self.state_dir = env, engine, log_dir, state_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    def start(self) -> AppProcess:
        env = {**self.env, "FLUVIAL_VERIFY_STATE_DIR": str(self.state_dir)}
        self.log = self.log_dir / f"app-{time.monotonic_ns()}.log"
        # Not --quiet: the log keeps a status line every few seconds, for post-mortems.
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", self.engine]
        if self.engine == "spark":
            cmd += ["--master", "local[2]"]
        with open(self.log, "wb") as out:
            self.proc = children.popen(
                cmd,
                keep=children.own_secrets(),
                extra_env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def app_dir(self) -> Path:
        return self.state_dir / self.env["FLUVIAL_VERIFY_APP_ID"]

    def ready(self) -> bool:
        text = self.log.read_text(errors="replace") if self.log and self.log.exists() else ""
        return READY_LINE in text

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        """Signal every process of the run (a SIGSTOP must freeze the JVM and workers too).

        Only while the driver is not reaped: its pid, the group's id, is ours until then."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """``kill -9`` of the whole run: driver, JVM and Python workers."""
        self.signal_group(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> int | None:
        """SIGTERM the driver only: it lets the current lease or commit finish, then exits."""
        if self.proc is None:
            return None
        wait_for(lambda: self.ready() or not self.running(), 120)
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()  # whatever the driver left behind (a JVM, a worker)
        return code

    # -- the Spark engine's view of the run ---------------------------------------------------

    def leases(self) -> list[dict]:
        """The Spark driver's lease log: one entry per lease (slots, attempts, pids)."""
        path = self.app_dir / "leases.jsonl"
        if not path.exists():
            return []
        lines = path.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.strip().endswith("}")]

    def completed_leases(self) -> int:
        return sum(1 for lease in self.leases() if "slots" in lease)

    def task_retries(self) -> int:
        """Slot tasks that Spark ran again within their lease (attempt > 0)."""
        return sum(
            1 for lease in self.leases() for s in lease.get("slots", []) if s.get("attempt", 0) > 0
        )

    def slot_worker_pids(self) -> dict[int, int]:
        """slot -> the PySpark Python worker of this run running the slot's task now.

        A slot's task writes its worker's pid to ``.slots/slot-<n>.pid`` as it starts, and the
        driver appends to its lease log once every task of the lease is done: a pid file newer
        than the lease log belongs to a task still running (killing its worker fails the task).
        """
        workers = set(spark_python_workers(self.proc.pid)) if self.running() else set()  # type: ignore[union-attr]
        log = self.app_dir / "leases.jsonl"
        try:
            lease_ended = log.stat().st_mtime_ns
        except OSError:
            lease_ended = 0  # the first lease is still running
        slots = {}
        for path in (self.app_dir / ".slots").glob("slot-*.pid"):
            try:
                started = path.stat().st_mtime_ns
                slot, pid = int(path.stem.removeprefix("slot-")), int(path.read_text())
            except (OSError, ValueError):
                continue
            if pid in workers and started > lease_ended:
                slots[slot] = pid
        return slots


def _process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every process, read from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        # The command name in stat may hold spaces and parentheses: split after the last ')'.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        table[int(entry)] = (
            int(ppid),
            state,
            cmdline.replace(b"\0", b" ").decode(errors="replace"),
        )
    return table


# The daemon PySpark forks its Python workers from: fluvial's own on local masters (it imports
# fluvial first, see fluvial.spark.daemon), PySpark's elsewhere.
SPARK_DAEMONS = ("fluvial.spark.daemon", "pyspark.daemon")


def is_spark_daemon(cmd: str) -> bool:
    return any(daemon in cmd for daemon in SPARK_DAEMONS)


def spark_python_workers(root_pid: int) -> list[int]:
    """The live PySpark Python workers below ``root_pid`` (a ``fluvial run --engine spark``).

    The JVM starts one daemon process (:data:`SPARK_DAEMONS`), which forks a worker per task:
    a worker is a child of the daemon with the daemon's command line. Without the daemon,
    workers run as ``pyspark.worker``.
    """
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state, _cmd) in table.items():
        children.setdefault(ppid, []).append(pid)
    below, todo = [], list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        below.append(pid)
        todo.extend(children.get(pid, []))
    workers = []
    for pid in below:
        ppid, state, cmd = table[pid]
        if state == "Z":
            continue
        forked = is_spark_daemon(cmd) and is_spark_daemon(table.get(ppid, (0, "", ""))[2])
        if forked or "pyspark.worker" in cmd:
            workers.append(pid)
    return sorted(workers)
