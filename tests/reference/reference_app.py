"""Building and running the Kafka Streams reference app (``reference/``), and running its fluvial
twin the same way, so a test can compare their output topics.

Both engines run until their input is fully committed and they have been idle for a moment: the
reference app decides that itself (see ``ReferenceApp.java``), and :func:`run_fluvial` applies
the same rule to fluvial's in-process :class:`~fluvial.runtime.Application`.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import StreamsConfig
from fluvial.jvm import java_executable
from fluvial.runtime import Application
from fluvial.topology import Topology
from tests import processes
from tests.runtime.harness import committed_offset

# How long an engine must process nothing, with its input committed, before it counts as done.
# Repartitioned records become visible one commit (100 ms) later, so 2 s leaves a wide margin.
IDLE_S = 2.0
# A first build downloads Kafka Streams and its dependencies from Maven Central.
BUILD_TIMEOUT_S = 1800


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
            java_executable(), "-Xmx384m", "-XX:+UseSerialGC", f"-Dreference.idle.ms={int(IDLE_S * 1000)}",
            "-jar", str(self.jar),
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


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reference-offsets"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return high
    finally:
        consumer.close()


def run_fluvial(
    topology: Topology, config: StreamsConfig, input_topic: str, timeout_s: float
) -> Application:
    """Run the topology until its input is committed and it has been idle for ``IDLE_S``.

    The same stopping rule as the reference app's, so both have processed everything the
    input leads to (repartition topics included) before their outputs are compared.
    """
    end = end_offset(config.bootstrap_servers, input_topic)
    app = Application(topology, config, workers=1)
    app.start()
    try:
        deadline = time.monotonic() + timeout_s
        last_processed, quiet_since = -1, time.monotonic()
        while time.monotonic() < deadline and not app.errors:
            time.sleep(0.2)
            processed = sum(m.records_processed for m in app.metrics())
            committed = committed_offset(config.bootstrap_servers, config.application_id,
                                         input_topic) >= end  # fmt: skip
            if processed != last_processed or not committed:
                last_processed, quiet_since = processed, time.monotonic()
            elif time.monotonic() - quiet_since >= IDLE_S:
                break
        else:
            if not app.errors:
                raise AssertionError(f"fluvial did not finish its input within {timeout_s:.0f} s")
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
