"""A dirty close reports the failure that led to it, never one from the producer it discards."""

from __future__ import annotations

import pytest

from fluvial.config import StreamsConfig
from fluvial.runtime.client_calls import ClientCalls
from fluvial.runtime.worker import Worker


class _FencedProducer:
    """A fenced transactional producer: aborting raises, and so does flushing, as the client's
    SystemError when the fatal error lands while a delivery callback runs (seen in a driver
    takeover: the older driver stopped with that error instead of saying it was fenced)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        raise SystemError("abort_transaction returned a result with an exception set")

    def flush(self, timeout: float) -> int:
        self.calls.append("flush")
        raise SystemError("_delivered returned a result with an exception set")


def _worker(producer: _FencedProducer) -> Worker:
    worker = Worker.__new__(Worker)
    worker.task_states = {}
    worker.tasks = {}
    worker.standbys = None
    worker.global_tables = None
    worker._task_by_tp = {}
    worker._consumer = None
    worker._producer = producer  # type: ignore[assignment]
    worker._calls = ClientCalls(0, StreamsConfig(application_id="dirty"), worker.unauthorized)
    worker._collector = None
    worker._progress = None
    worker.eos = True
    return worker


def test_a_dirty_close_swallows_what_a_fenced_producer_raises() -> None:
    producer = _FencedProducer()
    worker = _worker(producer)
    worker.close(clean=False)
    assert producer.calls == ["abort", "flush"] and worker._producer is None


def test_a_clean_close_still_raises_what_its_flush_raises() -> None:
    producer = _FencedProducer()
    worker = _worker(producer)
    with pytest.raises(SystemError):
        worker.close(clean=True)
