"""A driver-epoch check never holds the application for long: a slot that starts while an
earlier check hangs inside the Kafka client does not wait for it for ever (seen after a leader
kill: the restarted slot never ran again), a check gives up within its budget, and a stop does
not wait for the check under way (seen in ``fluvial verify``: a stop forced after 15 s)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import StreamsError
from fluvial.runtime import engine, epoch
from fluvial.runtime.engine import Application
from fluvial.runtime.epoch import DriverEpoch, DriverRecord
from tests.runtime.harness import read_topic, wait_until


class _HungCheck:
    """An epoch whose first check blocks, as a transactional call can after a broker kill."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.checks = 0

    def check(self, slots: int | None = None, *, budget_s: float | None = None) -> None:
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


class _CoordinatorGone:
    """A transactional producer whose group coordinator's broker is down: each offsets call
    waits out its timeout (shortened here) and fails as retriable, until ``back`` is set."""

    def __init__(self) -> None:
        self.back = threading.Event()
        self.calls: list[str] = []
        self.in_transaction = False

    def begin_transaction(self) -> None:
        assert not self.in_transaction, "a transaction is still open: abort it first"
        self.calls.append("begin")
        self.in_transaction = True

    def send_offsets_to_transaction(self, offsets, group, timeout: float) -> None:  # noqa: ANN001
        self.calls.append("send_offsets")
        if not self.back.is_set():
            threading.Event().wait(min(timeout, 0.5))  # the client waits out the timeout
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        self.in_transaction = False

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        if not self.back.is_set():
            threading.Event().wait(min(timeout, 0.5))  # the client waits out the timeout
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))
        self.in_transaction = False


class _Group:
    def consumer_group_metadata(self) -> object:
        return object()


def _claimed_epoch(producer: _CoordinatorGone) -> DriverEpoch:
    builder = StreamsBuilder()
    builder.stream("input", key_serde=serdes.string(), value_serde=serdes.string()).to("output")
    config = StreamsConfig(application_id="epoch-budget", bootstrap_servers="127.0.0.1:1",
                           processing_guarantee="exactly_once_v2")  # fmt: skip
    driver = DriverEpoch(builder.build(), config, "run-1")
    driver._producer = producer  # type: ignore[assignment]
    driver._consumer = _Group()  # type: ignore[assignment]
    driver.record = DriverRecord("run-1", "host", 1, 0, slots=1, generation=1)
    driver._claimed = True
    return driver


def test_a_check_gives_up_within_its_budget_and_the_next_one_aborts_first(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(epoch.time, "sleep", lambda _s: None)  # no pause between retries
    producer = _CoordinatorGone()
    driver = _claimed_epoch(producer)
    started = time.monotonic()
    with pytest.raises(StreamsError, match="commit the driver record"):
        driver.check(budget_s=1.0)
    # Unbounded, five attempts of a 60 s timeout each would have held it for five minutes.
    assert time.monotonic() - started < 4
    assert producer.calls.count("send_offsets") < 5 and producer.calls[-1] == "abort"
    assert producer.in_transaction, "the abort could not finish either"
    producer.back.set()
    producer.calls.clear()
    driver.check(budget_s=1.0)
    assert producer.calls == ["abort", "begin", "send_offsets", "commit"]


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
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    producer.produce(source, key=b"k", value=b"v")
    assert producer.flush(30) == 0
    # The slot runs (it committed a record): only the watcher checks the epoch from now on.
    wait_until(lambda: read_topic(bootstrap_servers, sink), 120, "the record to be committed")
    stuck = threading.Event()
    release = threading.Event()

    def hung_check(slots: int | None = None, *, budget_s: float | None = None) -> None:
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
