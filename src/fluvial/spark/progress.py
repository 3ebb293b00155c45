"""Live progress of a lease, from the slots to the driver, and the driver's stop back.

A lease reports its metrics when it ends, and leases last seconds (``FLUVIAL_SPARK_LEASE_MS``,
10 s by default) so that Spark schedules at a coarse grain. Between those reports the driver
would be blind, and a stop would wait for the lease's end. So while a lease runs, each slot
task sends the driver a small report four times a second over TCP (one JSON line: its records,
commits, lag and restoration so far in this lease), and the driver answers each with one line
saying whether the application is stopping. A slot told to stop ends its lease on a commit at
once.

The driver listens on its own address (``spark.driver.host``), which executors reach anyway.
A random token travels with each lease (never in an environment) and every report carries it.
Progress is a side service: a slot that cannot reach the driver processes on and reports at
the end of its lease as before.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.25
CONNECT_TIMEOUT_S = 2.0
_MAX_LINE = 64 * 1024


@dataclass
class Report:
    lease: int
    metrics: dict[str, float]
    at: float


class LeaseProgress:
    """The driver's side: receives the slots' reports, answers whether to stop."""

    def __init__(self, host: str, stopping: threading.Event) -> None:
        self.token = secrets.token_hex(16)
        self._stopping = stopping
        self._lock = threading.Lock()
        self._reports: dict[int, Report] = {}
        progress = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 30.0

            def handle(self) -> None:
                for line in self.rfile:
                    if len(line) > _MAX_LINE or not progress._take(line):
                        return
                    answer = {"stop": progress._stopping.is_set()}
                    self.wfile.write(json.dumps(answer).encode() + b"\n")
                    self.wfile.flush()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        self.address = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.2,), name="fluvial-lease-progress",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def _take(self, line: bytes) -> bool:
        try:
            message = json.loads(line)
            token = str(message["token"])
            slot, lease = int(message["slot"]), int(message["lease"])
            metrics = {str(k): float(v) for k, v in message["metrics"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        if not hmac.compare_digest(token, self.token):
            return False
        with self._lock:
            known = self._reports.get(slot)
            if known is None or known.lease <= lease:
                self._reports[slot] = Report(lease, metrics, time.monotonic())
        return True

    def current(self, slot: int, lease: int) -> dict[str, float] | None:
        """What ``slot`` reported of ``lease`` so far, if anything."""
        with self._lock:
            report = self._reports.get(slot)
        if report is None or report.lease != lease:
            return None
        return report.metrics

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class ProgressReporter:
    """A slot task's side: reports ``snapshot()`` to the driver until closed; sets ``stop``
    when the driver says it is stopping."""

    def __init__(
        self,
        address: str,
        token: str,
        *,
        slot: int,
        lease: int,
        snapshot: Callable[[], dict[str, float] | None],
        stop: threading.Event,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._target = (host, int(port))
        self._token = token
        self._slot = slot
        self._lease = lease
        self._snapshot = snapshot
        self.stop = stop
        self._done = threading.Event()
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._thread = threading.Thread(
            target=self._run, name=f"fluvial-slot-{slot}-progress", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        failed = False
        while not self._done.is_set():
            try:
                self._report()
                failed = False
            except (OSError, ValueError) as error:
                if not failed:
                    log.warning(
                        "slot %d cannot report its progress to the driver: %s", self._slot, error
                    )
                failed = True
                self._disconnect()
            self._done.wait(REPORT_INTERVAL_S)
        self._disconnect()

    def _report(self) -> None:
        metrics = self._snapshot()
        if metrics is None:
            return
        if self._sock is None:
            self._sock = socket.create_connection(self._target, timeout=CONNECT_TIMEOUT_S)
            self._reader = self._sock.makefile("rb")
        message = {"token": self._token, "slot": self._slot, "lease": self._lease,
                   "metrics": metrics}  # fmt: skip
        self._sock.sendall(json.dumps(message).encode() + b"\n")
        answer = self._reader.readline()
        if not answer:
            raise ValueError("the driver closed the connection")
        if json.loads(answer).get("stop"):
            self.stop.set()

    def _disconnect(self) -> None:
        if self._sock is not None:
            try:
                self._reader.close()
                self._sock.close()
            except OSError:
                pass
            self._sock = None
            self._reader = None

    def close(self) -> None:
        self._done.set()
        self._thread.join(CONNECT_TIMEOUT_S + 1)
