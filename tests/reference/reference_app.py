"""Building and running the Kafka Streams reference app (``reference/``), and running its fluvial
twin the same way, so a test can compare their output topics.

Both engines run until they have consumed everything: in every partition of the input and of
their repartition topics, no committed record lies at or past the offset their consumer group
committed, twice in a row with the same offsets. The reference app decides that itself (see
``ReferenceApp.java``), and :func:`run_fluvial` applies the same rule to fluvial's in-process
:class:`~fluvial.runtime.Application`.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from fluvial import StreamsConfig
from fluvial.jvm import java_executable
from fluvial.runtime import Application
from fluvial.topology import Topology
from tests import processes


@dataclass
class ReferenceRun:
    """One run of the reference app as a subprocess, its output kept in ``log``."""

    jar: Path
    topology: str
    bootstrap: str
    input_topic: str
    output_topic: str
    application_id: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ReferenceRun:
        cmd = [
            java_executable(), "-Xmx384m", "-XX:+UseSerialGC", "-jar", str(self.jar),
            self.topology, self.bootstrap, self.input_topic, self.output_topic, self.application_id,
        ]  # fmt: skip
        with open(self.log, "wb") as log:
            self.proc = processes.spawn(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        what=f"the reference app ({self.topology})")  # fmt: skip
        return self

    def wait(self, timeout_s: float) -> None:
        """Wait for the app to finish its input and exit; fail with its log otherwise."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            processes.stop(self.proc)
            raise AssertionError(
                f"the reference app ({self.topology}) did not finish within {timeout_s:.0f} s:\n"
                f"{self.output()[-4000:]}"
            ) from None
        if code != 0:
            raise AssertionError(
                f"the reference app ({self.topology}) exited with {code}:\n{self.output()[-4000:]}"
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def consumed_everything(
    bootstrap: str, application_id: str, input_topic: str
) -> dict[tuple[str, int], int] | None:
    """The group's committed offsets if no committed record lies at or past them in any partition
    the application reads (its input and its repartition topics); None while one does."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": application_id,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})  # fmt: skip
    try:
        topics = consumer.list_topics(timeout=10).topics
        partitions = [
            TopicPartition(name, p)
            for name, topic in topics.items()
            if name == input_topic
            or (name.startswith(f"{application_id}-") and name.endswith("-repartition"))
            for p in topic.partitions
        ]
        offsets = {}
        for tp in consumer.committed(partitions, timeout=10):
            low, last_stable = consumer.get_watermark_offsets(tp, timeout=10)
            start = tp.offset if tp.offset >= 0 else low
            offsets[(tp.topic, tp.partition)] = start
            if start < last_stable and _has_record_from(consumer, tp.topic, tp.partition, start):
                return None
        return offsets
    except KafkaException:  # the group coordinator is loading or moving: look again
        return None
    finally:
        consumer.close()


def _has_record_from(consumer: Consumer, topic: str, partition: int, start: int) -> bool:
    """Whether a committed record lies at or past ``start``; between it and the last stable
    offset there may be only transaction markers, which the consumer skips."""
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.2):
            if msg.error() is None:
                return True
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return False
    return True  # could not read to the end: not done, look again


def run_fluvial(
    topology: Topology, config: StreamsConfig, input_topic: str, timeout_s: float
) -> Application:
    """Run the topology until it has consumed everything (see the module docstring).

    The same stopping rule as the reference app's, so both have processed everything the
    input leads to (repartition topics included) before their outputs are compared.
    """
    app = Application(topology, config, workers=1)
    app.start()
    try:
        deadline = time.monotonic() + timeout_s
        previous = None
        while not app.errors:
            if time.monotonic() >= deadline:
                raise AssertionError(f"fluvial did not finish its input within {timeout_s:.0f} s")
            time.sleep(0.2)
            consumed = consumed_everything(config.bootstrap_servers, config.application_id,
                                           input_topic)  # fmt: skip
            if consumed is not None and consumed == previous:
                break
            previous = consumed
    finally:
        app.close()
    app.raise_if_failed()
    return app


def produce(bootstrap: str, topic: str, records: list[tuple[str, str | None, int]]) -> None:
    """Write ``(key, value, timestamp_ms)`` records, in order, to partition 0; ``None`` values
    are tombstones."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value, timestamp_ms in records:
        producer.produce(
            topic,
            key=key.encode(),
            value=None if value is None else value.encode(),
            timestamp=timestamp_ms,
            partition=0,
        )
    assert producer.flush(30) == 0
