"""Helpers for the Structured Streaming sink tests: read whole topics, find Python workers."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition


def read_all(bootstrap: str, topic: str, *, committed_only: bool = True) -> list:
    """Every record of every partition of ``topic`` up to its current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        records = []
        pending = set(ends)
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        pending.discard(msg.partition())
                    continue
                records.append(msg)
                if msg.offset() >= ends[msg.partition()] - 1:
                    pending.discard(msg.partition())
        assert not pending, f"could not read {topic} to its end"
        return records
    finally:
        consumer.close()


def values(bootstrap: str, topic: str, *, committed_only: bool = True) -> list[str]:
    return [m.value().decode() for m in read_all(bootstrap, topic, committed_only=committed_only)]


def python_workers() -> set[int]:
    """PIDs of PySpark Python worker processes (forked children of a ``pyspark.daemon``)."""
    daemons, children = set(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if b"pyspark.daemon" not in cmdline:
            continue
        pid, ppid = int(entry.name), int(stat.rsplit(")", 1)[1].split()[1])
        children[pid] = ppid
    daemons = {pid for pid, ppid in children.items() if ppid not in children}
    return {pid for pid, ppid in children.items() if ppid in daemons}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
