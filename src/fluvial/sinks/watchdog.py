"""The sink's watchdog: a process of its own that ends, on the server, a transaction of the
sink that waits for its client past ``transaction_timeout_ms``.

PostgreSQL ends a session idle in a transaction after ``idle_in_transaction_session_timeout``,
and a statement after ``statement_timeout``, but neither reaches a ``COPY ... FROM STDIN``
waiting for data from a client that stopped sending (a paused process: SIGSTOP, a debugger, a
suspended machine; TCP keepalives do not help, since a paused process's kernel still answers
them). Such a session keeps its row locks on the offsets table. A thread of the sink would be
paused with it, so a separate process watches: it ends (``pg_terminate_backend``) any session
of the sink, by its ``application_name``, that has been in a transaction longer than the
timeout while waiting to read from its client. It exits when the sink does (its stdin closes).

Started by :class:`fluvial.sinks.postgres.PostgresSink`; not a command of its own.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

#: What the watchdog says when it ends a session; the sink repeats the cause when it resumes.
ENDED = "ended a transaction waiting for its client for longer than transaction_timeout_ms"


def start(dsn: str, application_name: str, timeout_ms: int) -> Any:
    """The watchdog process for the sessions named ``application_name``; stop it with
    :func:`stop`. The DSN travels on its stdin (it may hold a password)."""
    import os
    import subprocess

    from fluvial import children

    proc = children.popen(
        [sys.executable, "-m", "fluvial.sinks.watchdog"],
        # libpq's own variables (PGPASSWORD, PGPASSFILE, ...): it connects as the sink does.
        keep=[k for k in os.environ if k.startswith("PG")],
        stdin=subprocess.PIPE,
        start_new_session=True,  # a Ctrl-C or a SIGSTOP of the sink's group must not reach it
    )
    assert proc.stdin is not None
    settings = {"dsn": dsn, "application_name": application_name, "timeout_ms": timeout_ms}
    proc.stdin.write(json.dumps(settings).encode() + b"\n")
    proc.stdin.flush()
    return proc


def stop(proc: Any) -> None:
    import contextlib
    import subprocess

    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main() -> None:
    import psycopg

    settings = json.loads(sys.stdin.readline() or "{}")
    if not settings:
        return
    done = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at EOF: the sink closed it, or exited
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    timeout_s = settings["timeout_ms"] / 1000
    interval_s = min(1.0, max(0.1, timeout_s / 10))
    conn: psycopg.Connection[Any] | None = None
    while not done.wait(interval_s):
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(
                    settings["dsn"], autocommit=True, connect_timeout=10,
                    application_name=f"{settings['application_name']}:watchdog"[:63],
                )  # fmt: skip
            ended = conn.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND state = 'active' AND wait_event = 'ClientRead' "
                "AND xact_start < now() - make_interval(secs => %s)",
                [settings["application_name"], timeout_s],
            ).fetchall()
            for pid, _ in ended:
                sys.stderr.write(
                    f"fluvial sink watchdog: {ENDED} (backend pid {pid}); the sink's process "
                    "may be paused (SIGSTOP, a debugger, a suspended machine) or stuck\n"
                )
        except psycopg.Error:
            conn = None  # the database is away: try again on the next round
            time.sleep(interval_s)


if __name__ == "__main__":
    main()
