"""A driver-epoch check never holds the application for long: a slot that starts while an
earlier check hangs inside the Kafka client does not wait for it for ever (seen after a leader
kill: the restarted slot never ran again), and a stop does not wait for the check under way
(seen in ``fluvial verify``: a stop forced after 15 s)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.runtime import engine, epoch
from fluvial.runtime.engine import Application
from tests.runtime.harness import read_topic, wait_until


class _HungCheck:
    """An epoch whose first check blocks, as a transactional call can after a broker kill."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.checks = 0

    def check(self, slots: int | None = None) -> None:
        self.checks += 1
        if self.checks == 1:
            self.release.wait(60)


def test_an_epoch_check_gives_up_waiting_for_a_hung_one(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(engine, "EPOCH_CHECK_WAIT_S", 0.5)
    app = Application.__new__(Application)
    app.epoch = _HungCheck()  # type: ignore[assignment]
    app._epoch_lock = threading.Lock()
    app.stop_event = threading.Event()
    watcher = threading.Thread(target=app._check_epoch, daemon=True)
    watcher.start()
    while app.epoch.checks == 0:  # type: ignore[union-attr]
        time.sleep(0.01)
    started = time.monotonic()
    assert app._check_epoch() is None  # the slot's confirmation goes on unconfirmed
    assert time.monotonic() - started < 5
    app.epoch.release.set()  # type: ignore[union-attr]
    watcher.join(5)
    assert app._check_epoch() is None and app.epoch.checks == 2  # type: ignore[union-attr]


@pytest.mark.kafka
def test_a_stop_does_not_wait_for_an_epoch_check_under_way(
    bootstrap_servers: str,
    topic_factory,
    unique_name,
    tmp_path,  # noqa: ANN001
) -> None:
    """The application on the real broker, its epoch watcher stuck in a check: ``close``
    commits the slots and returns without waiting for that check."""
    builder = StreamsBuilder()
    source, sink = topic_factory("input"), topic_factory("output")
    builder.stream(source, key_serde=serdes.string(), value_serde=serdes.string()).to(sink)
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", state_dir=str(tmp_path))  # fmt: skip
    app = Application(builder.build(), config)
    app.start()
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    producer.produce(source, key=b"k", value=b"v")
    assert producer.flush(30) == 0
    # The slot runs (it committed a record): only the watcher checks the epoch from now on.
    wait_until(lambda: read_topic(bootstrap_servers, sink), 120, "the record to be committed")
    stuck = threading.Event()
    release = threading.Event()

    def hung_check(slots: int | None = None) -> None:
        stuck.set()
        release.wait(120)

    try:
        app.epoch.check = hung_check  # type: ignore[union-attr, method-assign]
        assert stuck.wait(60), "the epoch watcher never checked"
        started = time.monotonic()
        app.close(timeout_s=60)
        assert time.monotonic() - started < 10, "the stop waited for the epoch check"
        assert not app.running
        app.raise_if_failed()
    finally:
        release.set()
        app.close()


def test_the_driver_transaction_outlasts_every_retry_of_a_record_commit() -> None:
    """Had the broker timed the driver's transaction out while a commit still retried (the
    coordinator's broker away), the driver would have taken that for a takeover and stopped:
    seen in ``fluvial verify --seed 12 --faults kill-broker --fault-count 5``."""
    retries_ms = epoch._RETRIES * epoch.TIMEOUT_S * 1000
    assert retries_ms + 60_000 < epoch.DRIVER_TRANSACTION_TIMEOUT_MS
    assert epoch.DRIVER_TRANSACTION_TIMEOUT_MS <= 900_000, "the brokers' default cap"
