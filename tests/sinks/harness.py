"""Driving ``fluvial sink postgres`` as a real process, and watching its database session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.runtime.harness import wait_until
from tests.sinks.conftest import query


@dataclass
class SinkProcess:
    """One ``fluvial sink postgres`` process; ``args`` are its options after the subcommand."""

    dsn: str
    sink_id: str
    args: list[str]
    work_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    logs: list[Path] = field(default_factory=list)

    def start(self) -> None:
        cmd = [sys.executable, "-m", "fluvial.cli", "sink", "postgres", "--sink-id",
               self.sink_id, *self.args]  # fmt: skip
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.work_dir / f"sink-{time.monotonic_ns()}.log"
        self.logs.append(self.log)
        env = {**os.environ, "FLUVIAL_SINK_DSN": self.dsn}  # the DSN stays off the command line
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""

    def all_output(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs)

    def wait_ready(self, timeout_s: float = 90) -> None:
        wait_until(
            lambda: "Ctrl-C commits and stops" in self.output() or self.proc.poll() is not None,
            timeout_s, "the sink to claim its partitions", interval_s=0.05,
        )  # fmt: skip
        assert self.proc.poll() is None, f"the sink exited:\n{self.output()}"

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode


def sessions(dsn: str, sink_id: str) -> list[tuple]:
    """(pid, state, in a transaction, waiting on) of the sink's database sessions."""
    return query(
        dsn,
        "SELECT pid, state, xact_start IS NOT NULL, wait_event FROM pg_stat_activity "
        "WHERE application_name = %s",
        [f"fluvial-sink:{sink_id}"[:63]],
    )


def in_transaction(dsn: str, sink_id: str) -> bool:
    return any(in_xact for _pid, _state, in_xact, _wait in sessions(dsn, sink_id))


def slow_statements(dsn: str, table: str, seconds: float) -> None:
    """Make every statement that writes ``table`` take ``seconds`` longer (a trigger that
    sleeps), so that a test can stop or kill the sink inside an open transaction."""
    query(
        dsn,
        f"CREATE OR REPLACE FUNCTION {table}_slow() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$",
    )
    query(
        dsn,
        f"CREATE TRIGGER {table}_slow AFTER INSERT ON {table} FOR EACH STATEMENT "
        f"EXECUTE FUNCTION {table}_slow()",
    )
