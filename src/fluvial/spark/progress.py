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

The same server places slots on Python workers. Spark gives a lease's tasks to whichever of an
executor's idle Python workers comes first, so on ``local[2]`` a slot's task lands in the
process that ran the *other* slot in about half of the leases: both Workers would then close,
reopen their stores and start new clients. So each slot task first asks the driver which slot it
runs, naming the slots whose warm Worker its process holds, and the driver hands each partition
of the lease one slot, preferring a warm one (:meth:`LeaseProgress.place`).
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

#: What a slot reports (live and when its lease ends): counters, as differences since the lease
#: began, which the driver adds up over leases, attempts and slots, and gauges, as they are now.
COUNTERS = (
    "records_in",
    "records_processed",
    "records_out",
    "commits",
    "commit_latency_total_s",
    "late_records",
    "null_key_records",
    "invalid_timestamps",
    "undecodable_records",
    "failed_records",
    "dead_letters",
    "unproduced_records",
    "copartition_mismatches",
    "restore_total",
    "restored",
    "standby_applied",
)
GAUGES = ("lag", "commit_latency_max_s", "standby_lag", "stores_to_restore", "stores_restored")


@dataclass
class Report:
    lease: int
    attempt: int
    metrics: dict[str, float]
    at: float


class LeaseProgress:
    """The driver's side: receives the slots' reports, answers whether to stop."""

    def __init__(self, host: str, stopping: threading.Event) -> None:
        self.token = secrets.token_hex(16)
        self._stopping = stopping
        self._lock = threading.Lock()
        # Per slot, the last report of each attempt of its newest lease: Spark may run a slot
        # task again within a lease, and what an earlier attempt counted still counts.
        self._reports: dict[int, dict[int, Report]] = {}
        # The lease in flight, its slots, and the slot each of its partitions runs (place).
        self._lease: int | None = None
        self._slots: frozenset[int] = frozenset()
        self._placed: dict[int, int] = {}
        progress = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 30.0

            def handle(self) -> None:
                for line in self.rfile:
                    answer = progress._answer(line) if len(line) <= _MAX_LINE else None
                    if answer is None:
                        return
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

    def _answer(self, line: bytes) -> dict[str, Any] | None:
        """The answer to one line: a placement (``partition``) or a report; None ends the
        connection (a malformed line, a wrong token)."""
        try:
            message = json.loads(line)
            token = str(message["token"])
        except (ValueError, KeyError, TypeError):
            return None
        if not hmac.compare_digest(token, self.token):
            return None
        if "partition" in message:
            try:
                lease, partition = int(message["lease"]), int(message["partition"])
                holding = [int(s) for s in message.get("holding", [])]
            except (ValueError, KeyError, TypeError):
                return None
            return {"slot": self.place(lease, partition, holding)}
        if not self._take(message):
            return None
        return {"stop": self._stopping.is_set()}

    def begin_lease(self, lease: int, slots: list[int]) -> None:
        """The driver is about to run ``lease``, one task per slot of ``slots`` (task index
        ``i`` is partition ``i``; ``slots`` are ``0 .. n-1``)."""
        with self._lock:
            self._lease, self._slots, self._placed = lease, frozenset(slots), {}

    def place(self, lease: int, partition: int, holding: list[int]) -> int:
        """The slot that task ``partition`` of ``lease`` runs. ``holding``: the slots whose
        warm Worker (the one that completed the slot's last lease) the task's process holds.

        Every partition gets one slot and no slot goes twice, as long as every task asks: a
        retried task gets the slot its partition was given; a warm slot comes first; then the
        partition's own slot; else, when a task that held it took it, the own slot of a
        partition placed elsewhere, which no one else will run. Outside the lease in flight,
        a partition runs its own slot, as it would without asking."""
        with self._lock:
            if lease != self._lease or partition not in self._slots:
                return partition
            placed = self._placed.get(partition)
            if placed is not None:
                return placed
            taken = set(self._placed.values())
            warm = [s for s in holding if s in self._slots and s not in taken]
            if partition in warm or (not warm and partition not in taken):
                slot = partition
            elif warm:
                slot = warm[0]
            else:
                # As many partitions were placed as slots taken, and this partition's own slot
                # is one of the taken: so some placed partition's own slot is free.
                slot = min(p for p in self._placed if p not in taken)
            self._placed[partition] = slot
            return slot

    def _take(self, message: dict[str, Any]) -> bool:
        try:
            slot, lease = int(message["slot"]), int(message["lease"])
            attempt = int(message.get("attempt", 0))
            metrics = {str(k): float(v) for k, v in message["metrics"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        with self._lock:
            known = self._reports.get(slot)
            newest = max((r.lease for r in known.values()), default=lease) if known else lease
            if known is None or newest < lease:
                known = self._reports[slot] = {}
            if newest <= lease:
                known[attempt] = Report(lease, attempt, metrics, time.monotonic())
        return True

    def current(self, slot: int, lease: int) -> dict[str, float] | None:
        """What ``slot`` reported of ``lease`` so far, if anything: its counters summed over
        the lease's attempts, its gauges as the newest attempt has them."""
        with self._lock:
            reports = [r for r in self._reports.get(slot, {}).values() if r.lease == lease]
        if not reports:
            return None
        reports.sort(key=lambda r: r.attempt)
        merged = dict(reports[-1].metrics)
        for report in reports[:-1]:
            for name in COUNTERS:
                merged[name] = merged.get(name, 0.0) + report.metrics.get(name, 0.0)
        return merged

    def earlier_attempts(self, slot: int, lease: int, attempt: int | None) -> dict[str, float]:
        """The counters of the attempts of ``lease`` other than ``attempt`` (None: all of them),
        as they last reported: work a failed attempt did, which its lease's result leaves out."""
        with self._lock:
            reports = [r for r in self._reports.get(slot, {}).values()
                       if r.lease == lease and r.attempt != attempt]  # fmt: skip
        total: dict[str, float] = {}
        for report in reports:
            for name in COUNTERS:
                total[name] = total.get(name, 0.0) + report.metrics.get(name, 0.0)
        return total

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def ask_slot(
    address: str, token: str, *, lease: int, partition: int, holding: list[int]
) -> int | None:
    """Which slot task ``partition`` of ``lease`` runs, as the driver places it (see
    :meth:`LeaseProgress.place`); None when the driver cannot be asked."""
    host, _, port = address.rpartition(":")
    message = {"token": token, "lease": lease, "partition": partition, "holding": holding}
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.sendall(json.dumps(message).encode() + b"\n")
            with sock.makefile("rb") as reader:
                answer = json.loads(reader.readline())
        return int(answer["slot"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("task %d of lease %d cannot ask the driver for its slot: %s",
                    partition, lease, error)  # fmt: skip
        return None


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
        attempt: int = 0,
        snapshot: Callable[[], dict[str, float] | None],
        stop: threading.Event,
    ) -> None:
        host, _, port = address.rpartition(":")
        self._target = (host, int(port))
        self._token = token
        self._slot = slot
        self._lease = lease
        self._attempt = attempt
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
                   "attempt": self._attempt, "metrics": metrics}  # fmt: skip
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
