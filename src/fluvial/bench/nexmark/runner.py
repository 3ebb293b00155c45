"""Running Nexmark queries on fluvial and on Kafka Streams over the same input topics, and
reading their committed output.

Both run until they have consumed everything: in every partition of their inputs and internal
topics (repartition topics, foreign-key join subscriptions) no committed record lies at or past
the offset their group committed, twice in a row with the same offsets. The Kafka Streams side
(``NexmarkMain``) decides that itself; :func:`run_fluvial` applies the same rule to fluvial's
in-process applications.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fluvial import StreamsBuilder, StreamsConfig, children
from fluvial.bench.nexmark.queries import QUERIES
from fluvial.jvm import java_executable
from fluvial.verify.differential.cluster import consumed_offsets

NEXMARK_MAIN = "dev.fluvial.reference.nexmark.NexmarkMain"


@dataclass(frozen=True)
class Settings:
    """How both systems run: guarantee, commit interval and record cache (0: off)."""

    guarantee: str = "exactly_once_v2"
    commit_interval_ms: int = 100
    cache_max_bytes: int = 0


def run_fluvial(
    queries: list[str],
    bootstrap: str,
    topics: dict[str, str],
    outputs: dict[str, str],
    application_ids: dict[str, str],
    state_dir: Path,
    settings: Settings,
    *,
    timeout_s: float = 900,
) -> None:
    """Run each query as its own application (one worker), all at once in this process, until
    each has consumed everything; raises if one fails or does not finish in time."""
    from fluvial.runtime import Application

    apps = {}
    inputs = {}
    try:
        for query in queries:
            builder = StreamsBuilder()
            QUERIES[query].build(builder, topics, outputs[query])
            config = StreamsConfig(
                application_id=application_ids[query],
                bootstrap_servers=bootstrap,
                processing_guarantee=settings.guarantee,
                commit_interval_ms=settings.commit_interval_ms,
                cache_max_bytes=settings.cache_max_bytes,
                state_dir=str(state_dir / query),
            )
            topology = builder.build()
            inputs[query] = topology.source_topics()
            apps[query] = Application(topology, config, workers=1)
            apps[query].start()
        _wait_consumed(bootstrap, apps, inputs, timeout_s)
    finally:
        for app in apps.values():
            app.close()
    for app in apps.values():
        app.raise_if_failed()


def _wait_consumed(
    bootstrap: str, apps: dict[str, Any], inputs: dict[str, list[str]], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    previous: dict[str, object] = {}
    pending = set(apps)
    while pending:
        for query in sorted(pending):
            app = apps[query]
            if app.errors:
                return  # raise_if_failed says what
            consumed = consumed_offsets(bootstrap, app.config.application_id, inputs[query], [])
            if consumed is not None and consumed == previous.get(query):
                pending.discard(query)
            previous[query] = consumed
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"fluvial's {', '.join(sorted(pending))} did not finish the input within "
                    f"{timeout_s:.0f} s"
                )
            time.sleep(0.2)


def kafka_streams_command(
    jar: Path,
    queries: list[str],
    bootstrap: str,
    prefix: str,
    output: str,
    application_id: str,
    settings: Settings,
    *,
    heap: str = "512m",
    exact: bool = False,
) -> list[str]:
    """``NexmarkMain``'s command line: several queries suffix ``output`` and the id with ``-qN``.

    ``exact``: windows that emit on close are checked on every record, so the end of the input
    closes the same windows as in fluvial (Kafka Streams' default checks once a second)."""
    flags = ["-Dnexmark.exact=true"] if exact else []
    return [
        java_executable(), f"-Xmx{heap}", "-XX:+UseSerialGC", *flags, "-cp", str(jar), NEXMARK_MAIN,
        ",".join(queries), bootstrap, prefix, output, application_id, settings.guarantee,
        str(settings.commit_interval_ms), str(settings.cache_max_bytes),
    ]  # fmt: skip


def run_kafka_streams(
    jar: Path,
    queries: list[str],
    bootstrap: str,
    prefix: str,
    output: str,
    application_id: str,
    settings: Settings,
    log: Path,
    *,
    timeout_s: float = 900,
) -> None:
    """Run the queries' Kafka Streams twins in one JVM until they have consumed everything."""
    cmd = kafka_streams_command(
        jar, queries, bootstrap, prefix, output, application_id, settings, exact=True
    )
    with open(log, "wb") as out:
        proc = children.popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise TimeoutError(
            f"Kafka Streams did not finish the input within {timeout_s:.0f} s:\n{_tail(log)}"
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    if code != 0:
        raise RuntimeError(f"Kafka Streams exited with {code}:\n{_tail(log)}")


def _tail(log: Path, chars: int = 4000) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-chars:]
    return ""


def read_committed(
    bootstrap: str, topic: str, timeout_s: float = 120
) -> list[tuple[bytes, bytes | None]]:
    """Every committed record of ``topic`` as (key, value), partition by partition in offset
    order (a key's records are on one partition, in the order they were written)."""
    return [(k, v) for _p, k, v in _records(bootstrap, topic, timeout_s)]


def _records(
    bootstrap: str, topic: str, timeout_s: float
) -> Iterator[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"nexmark-read-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})  # fmt: skip
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        open_partitions = set()
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            by_partition[p] = []
            if high > low:
                open_partitions.add(p)
        consumer.assign([TopicPartition(topic, p, 0) for p in open_partitions])
        deadline = time.monotonic() + timeout_s
        while open_partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within {timeout_s:.0f} s")
            for msg in consumer.consume(10_000, 0.5):
                error, partition = msg.error(), msg.partition() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_partitions.discard(partition)
                    continue
                by_partition[partition].append((msg.key() or b"", msg.value()))
        for p in sorted(by_partition):
            for key, value in by_partition[p]:
                yield p, key, value
    finally:
        consumer.close()
