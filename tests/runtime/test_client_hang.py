"""A transactional Kafka client call that blocks past its own timeout must not stall a slot.

Seen in the fault matrix: after the broker holding the group coordinator was killed and
restarted, ``send_offsets_to_transaction`` never returned, and the slot never committed again.
The worker bounds such calls, abandons the producer, and fails so the slot restarts.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import StreamsError
from fluvial.runtime import client_calls
from fluvial.runtime.worker import Worker


def echo_worker(config: StreamsConfig) -> Worker:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string()).to("out")
    return Worker(0, builder.build(), config, [])


def test_a_hung_transactional_call_fails_the_slot_and_drops_its_producer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = echo_worker(StreamsConfig(application_id="hang", state_dir=str(tmp_path),
                                       processing_guarantee="exactly_once_v2"))  # fmt: skip
    monkeypatch.setattr(client_calls, "TXN_CALL_DEADLINE_S", 0.5)
    never = threading.Event()
    started = time.monotonic()
    with pytest.raises(StreamsError, match="did not return within 0.5 s"):
        worker._calls.bounded(lambda: never.wait(30), "send offsets")
    assert time.monotonic() - started < 5
    # The abandoned producer is never called again: a dirty close just lets go of it.
    worker._producer = object()  # type: ignore[assignment]
    worker.close(clean=False)
    assert worker._producer is None
    never.set()


def test_a_call_that_returns_in_time_passes_its_result_and_errors_through(tmp_path: Path) -> None:
    worker = echo_worker(StreamsConfig(application_id="ok", state_dir=str(tmp_path)))
    assert worker._calls.bounded(lambda: 42, "commit") == 42
    with pytest.raises(ZeroDivisionError):
        worker._calls.bounded(lambda: 1 / 0, "commit")
    assert not worker._calls.hung
