"""The Spark driver's live counters add up over the attempts of a lease: when Spark runs a slot
task again (its Python worker died), what the first attempt counted is not replaced by the
retry's smaller figures, so no counter on the status line goes down."""

from __future__ import annotations

import json
import socket
import threading

from fluvial.spark.progress import LeaseProgress


def report(progress: LeaseProgress, slot: int, lease: int, attempt: int, **metrics: float) -> None:
    """One progress line, as a slot task sends it, over the driver's real TCP endpoint."""
    host, port = progress.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        message = {"token": progress.token, "slot": slot, "lease": lease, "attempt": attempt,
                   "metrics": metrics}  # fmt: skip
        sock.sendall(json.dumps(message).encode() + b"\n")
        answer = sock.makefile("rb").readline()
    assert json.loads(answer) == {"stop": False}


def test_a_retried_attempt_adds_to_what_the_first_counted() -> None:
    progress = LeaseProgress("127.0.0.1", threading.Event())
    try:
        report(progress, 0, 7, 0, records_in=16, late_records=3, lag=40)
        assert progress.current(0, 7) == {"records_in": 16, "late_records": 3, "lag": 40}
        # Spark ran the slot task again: the retry counts from zero, its gauges are current.
        report(progress, 0, 7, 1, records_in=4, late_records=1, lag=5)
        now = progress.current(0, 7)
        assert now is not None
        assert (now["records_in"], now["late_records"], now["lag"]) == (20, 4, 5)
        # What the lease's result (attempt 1's) leaves out, for the driver to add.
        assert progress.earlier_attempts(0, 7, 1)["records_in"] == 16
        assert progress.earlier_attempts(0, 7, None)["late_records"] == 4
        # A new lease starts over; an older lease's late report changes nothing.
        report(progress, 0, 8, 0, records_in=2)
        report(progress, 0, 7, 1, records_in=9)
        assert progress.current(0, 8) == {"records_in": 2}
        assert progress.current(0, 7) is None
    finally:
        progress.close()
