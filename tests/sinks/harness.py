"""Driving ``fluvial sink postgres`` as a real process, and watching its database session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

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
        code = self.proc.wait(30)
        assert code == -signal.SIGKILL, (
            f"the sink had exited ({code}) before the kill:\n{self.output()}"
        )

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


def kill9_inside_a_transaction(
    sink: SinkProcess, offsets_table: str = "fluvial_sink_offsets"
) -> bool:
    """kill -9 ``sink`` inside an open database transaction: after it has written a batch's
    rows and before it moves the batch's offsets. True when pg_stat_activity confirms it.

    The test holds the offsets table in SHARE mode, which lets the sink lock its offset rows and
    write its rows but not move its offsets. Once the sink's session waits for that lock, inside
    its transaction, the process is killed, and the session looked at again: the same backend
    still waiting in the same transaction (same ``xact_start``) means that the kill landed
    inside it, since a client that is gone can no longer send COMMIT. Then the lock is let go,
    and the server ends the session and rolls its transaction back."""
    application_name = f"fluvial-sink:{sink.sink_id}"[:63]
    with (
        psycopg.connect(sink.dsn, autocommit=True) as gate,
        psycopg.connect(sink.dsn, autocommit=True) as watcher,
    ):

        def waiting() -> list[tuple]:
            # (pid, xact_start, statement) of the sink's sessions that wait for the gate's lock
            return watcher.execute(
                "SELECT pid, xact_start, query FROM pg_stat_activity WHERE application_name = %s "
                "AND xact_start IS NOT NULL AND %s = ANY(pg_blocking_pids(pid))",
                [application_name, gate.info.backend_pid],
            ).fetchall()

        with gate.transaction():
            gate.execute(
                sql.SQL("LOCK TABLE {} IN SHARE MODE").format(sql.Identifier(offsets_table))
            )
            before = wait_until(waiting, 60, "the sink to wait, inside its transaction, to move "
                                "its offsets", interval_s=0.01)  # fmt: skip
            sink.kill9()
            after = waiting()
        pids = [pid for pid, _start, _statement in before]
        wait_until(
            lambda: not watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
            ).fetchall(),
            60, "the killed sink's session to end",
        )  # fmt: skip
    moving_offsets = all(
        statement.lstrip().startswith("UPDATE") and offsets_table in statement
        for _pid, _start, statement in before
    )
    return after == before and moving_offsets


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
