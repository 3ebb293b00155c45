"""The driver's epoch: under exactly-once, one driver runs an application at a time.

A cluster manager may start a second driver of an application while the first still lives
(partitioned from it, or stopped and later resumed). The newer driver takes over and the older
one stops by itself, through Kafka's own fencing:

1. Every driver holds a transactional producer under the application's driver transactional id
   (``<application_id>-driver``). Initializing it fences the previous driver's producer and
   aborts whatever transaction that one had open.
2. The driver then commits its *driver record* (its run id, host and pid, and how many slots
   the application may have used) in a transaction, as the offset metadata of the group
   ``<application_id>-driver``. Slot tasks read it to learn whether their driver is still the
   current one, and the next driver reads it to learn which slot ids to fence.
3. Only then does it fence every slot id the application may have used (the record's count,
   the largest any driver used). From this moment, the *takeover*, nothing an older driver's
   tasks still run can commit: their transactional ids belong to the new driver.
4. The driver commits its record again before every lease (Spark) and every few seconds (the
   local engine), with a larger slot count before it ever uses more slots. A fenced driver's
   commit fails, and it stops with :class:`DriverFencedError`.

Under at-least-once there are no transactions, and no epoch: two drivers both process, and
their output holds duplicates, as at-least-once allows.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from fluvial.acls import authorization_error, driver_group
from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.runtime.client_calls import TRANSIENT_ERRORS, is_fenced, transactional_id
from fluvial.runtime.clients import consumer_settings, producer_settings
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often the local engine's driver proves it is still the current one.
CHECK_INTERVAL_S = 5.0
TIMEOUT_S = 60.0
_RETRIES = 5
#: The driver record's transactions outlast a record commit's every retry (five of
#: :data:`TIMEOUT_S`). With the group coordinator's broker away a commit can retry that long,
#: and a transaction the broker timed out meanwhile would come back to the driver as fencing:
#: it would stop as if a newer driver had taken over. Within the brokers' default cap (15 min);
#: a newer driver aborts an open one at once when it takes over.
DRIVER_TRANSACTION_TIMEOUT_MS = 600_000


class DriverFencedError(StreamsError):
    """A newer driver of the same application took over; this one stops."""


def driver_transactional_id(application_id: str) -> str:
    """Under the prefix of the slots' ids (``<application_id>-``), so one ACL covers both."""
    return f"{application_id}-driver"


@dataclass(frozen=True)
class DriverRecord:
    """Who drives the application now, and how many slot ids it may have used."""

    run_id: str
    host: str
    pid: int
    started_ms: int
    slots: int
    generation: int

    def encode(self) -> str:
        return json.dumps(
            {"run": self.run_id, "host": self.host, "pid": self.pid, "started": self.started_ms,
             "slots": self.slots, "generation": self.generation},
            separators=(",", ":"),
        )  # fmt: skip

    @classmethod
    def decode(cls, metadata: str | None) -> DriverRecord | None:
        try:
            data = json.loads(metadata or "")
            return cls(str(data["run"]), str(data["host"]), int(data["pid"]),
                       int(data["started"]), int(data["slots"]), int(data["generation"]))  # fmt: skip
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_ms / 1000))
        return f"run {self.run_id} (pid {self.pid} on {self.host}, started {started})"


def anchor(topology: Topology) -> TopicPartition:
    """The partition the driver record is committed for: partition 0 of the first input topic.

    An offset commit needs an existing topic the principal may READ; the input is one. The
    committed offset is the record's generation, not a position: nothing consumes the group.
    """
    sources = sorted(topology.source_topics())
    if not sources:
        raise StreamsError("an application without input topics has nothing to drive")
    return TopicPartition(sources[0], 0)


def read_driver_record(topology: Topology, config: StreamsConfig) -> DriverRecord | None:
    """The current driver record; ``None`` before any driver claimed the application."""
    consumer = Consumer(_driver_consumer_settings(config))
    try:
        [found] = _retrying(lambda: consumer.committed([anchor(topology)], timeout=TIMEOUT_S),
                            "read the driver record")  # fmt: skip
        if found.error is not None:
            raise StreamsError(f"cannot read the driver record: {found.error}")
        return DriverRecord.decode(found.metadata) if found.offset >= 0 else None
    except KafkaException as error:
        raise _clear(topology, config, error, "read the driver record") from error
    finally:
        consumer.close()


def fence_slots(config: StreamsConfig, slots: Iterable[int]) -> None:
    """Initialize every slot's transactional id, fencing whoever held it, all at once."""
    ids = [transactional_id(config.application_id, slot) for slot in slots]
    if not ids:
        return

    def fence(txn_id: str) -> None:
        producer = Producer(producer_settings(config, txn_id))
        producer.init_transactions(TIMEOUT_S)
        producer.flush(5)

    with ThreadPoolExecutor(max_workers=min(8, len(ids)), thread_name_prefix="fence") as pool:
        for future in [pool.submit(fence, txn_id) for txn_id in ids]:
            future.result()


class DriverEpoch:
    """This driver's claim on an application: :meth:`claim` once, then :meth:`check` often."""

    def __init__(self, topology: Topology, config: StreamsConfig, run_id: str) -> None:
        self.topology = topology
        self.config = config
        self.run_id = run_id
        self.record: DriverRecord | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._fenced: DriverFencedError | None = None
        self._claimed = False

    def claim(self, slots: int) -> DriverRecord | None:
        """Take the application over; return the record of the driver before, if any."""
        txn_id = driver_transactional_id(self.config.application_id)
        self._producer = producer = Producer(
            {**producer_settings(self.config, txn_id),
             "transaction.timeout.ms": DRIVER_TRANSACTION_TIMEOUT_MS}
        )  # fmt: skip
        self._consumer = Consumer(_driver_consumer_settings(self.config))
        # Fence first: the previous driver can commit no record after this, so the one read
        # next is its last.
        self._call(lambda: producer.init_transactions(TIMEOUT_S), "claim the driver epoch")
        previous = read_driver_record(self.topology, self.config)
        self.record = DriverRecord(
            run_id=self.run_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_ms=int(time.time() * 1000),
            slots=max(slots, previous.slots if previous else 0),
            generation=(previous.generation if previous else 0) + 1,
        )
        # The record before the fences: a slot task of the older driver that starts after
        # them sees it and stops (see fluvial.spark.slots), instead of fencing back.
        self._commit(self.record)
        self.fence_slots()
        self._claimed = True
        if previous is not None and previous.run_id != self.run_id:
            log.info("driver epoch %d: took over from %s", self.record.generation,
                     previous.describe())  # fmt: skip
        return previous

    def check(self, slots: int | None = None) -> None:
        """Raise :class:`DriverFencedError` if a newer driver took over; else record ``slots``.

        A driver about to use more slots than ever before records the new count here first,
        so that any later driver fences those slots too.
        """
        assert self.record is not None, "claim() first"
        record = self.record
        if slots is not None and slots > record.slots:
            record = replace(record, slots=slots)
        self._commit(record)
        self.record = record

    def fence_slots(self) -> None:
        """Fence every slot id the application may have used (the record's count)."""
        assert self.record is not None, "claim() first"
        count = self.record.slots
        self._call(lambda: fence_slots(self.config, range(count)), "fence the slots")

    def close(self) -> None:
        # Nothing to flush: every record commit waited for its transaction.
        self._producer = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- Kafka ------------------------------------------------------------------------------

    def _commit(self, record: DriverRecord) -> None:
        assert self._producer is not None and self._consumer is not None
        producer, group = self._producer, self._consumer.consumer_group_metadata()
        at = anchor(self.topology)
        position = TopicPartition(at.topic, at.partition, record.generation,
                                  metadata=record.encode())  # fmt: skip
        what = "commit the driver record"
        self._call(producer.begin_transaction, what)
        try:
            # Each call may be retried on its own (librdkafka's transactional contract).
            self._call(lambda: producer.send_offsets_to_transaction([position], group, TIMEOUT_S),
                       what)  # fmt: skip
            self._call(lambda: producer.commit_transaction(TIMEOUT_S), what)
        except BaseException:
            if self._fenced is None:
                # Leave no transaction open, so the next check can begin one.
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(TIMEOUT_S)
            raise

    def _call(self, action: Callable[[], T], what: str) -> T:
        if self._fenced is not None:
            raise self._fenced  # for good: the producer is fenced
        try:
            return _retrying(action, what)
        except KafkaException as error:
            if is_fenced(error.args[0]):
                self._fenced = DriverFencedError(self._fenced_message())
                raise self._fenced from None
            raise _clear(self.topology, self.config, error, what, running=self._claimed) from error

    def _fenced_message(self) -> str:
        try:
            newer = read_driver_record(self.topology, self.config)
        except Exception:  # noqa: BLE001 - the message does without it
            newer = None
        return fenced_message(self.config.application_id, self.run_id, newer)


def fenced_message(application_id: str, run_id: str, newer: DriverRecord | None) -> str:
    """Why driver run ``run_id`` stops: a newer driver (``newer``, if known) took over."""
    by = f", {newer.describe()}," if newer is not None and newer.run_id != run_id else ""
    return (
        f"driver run {run_id} of application {application_id!r} was fenced: a newer driver of "
        f"the application{by} took it over. This driver stops and commits nothing more; the "
        "newer one goes on from the last commit. Run one driver per application (a cluster "
        "manager that restarts a driver may start the new one before the old one stops: the "
        "old one then stops by itself)."
    )


def _driver_consumer_settings(config: StreamsConfig) -> dict[str, object]:
    return {
        **consumer_settings(config, client_suffix="-driver"),
        "group.id": driver_group(config),
        # Offsets committed in a transaction still open are not read: only a committed record.
        "isolation.level": "read_committed",
    }


def _retrying(action: Callable[[], T], what: str) -> T:
    for attempt in range(_RETRIES):
        try:
            return action()
        except KafkaException as error:
            kafka_error = error.args[0]
            transient = kafka_error.retriable() or kafka_error.code() in TRANSIENT_ERRORS
            if not transient or is_fenced(kafka_error) or attempt == _RETRIES - 1:
                raise
            log.info("%s: %s; retrying", what, kafka_error.str())
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _clear(
    topology: Topology,
    config: StreamsConfig,
    error: KafkaException,
    what: str,
    *,
    running: bool = False,
) -> StreamsError:
    denied = authorization_error(topology, config, error, running=running)
    if denied is not None:
        return denied
    return StreamsError(f"could not {what}: {error.args[0].str()}")
