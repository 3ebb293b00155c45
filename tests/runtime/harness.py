"""Driving ``fluvial run`` as a real process, feeding it input and checking its output.

The oracle recomputes Figure 2's windowed counts straight from the input, applying the same
grace rule, so every committed revision can be checked against it record by record.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import serdes
from tests import processes
from tests.event_times import event_time_base_ms

APP = Path(__file__).parent / "apps" / "figure2.py"
WINDOW_MS, GRACE_MS = 5000, 2000
WINDOW_KEY = serdes.time_windowed(serdes.string(), WINDOW_MS)
LONG = serdes.long()


@dataclass
class PageView:
    key: str
    category: str
    period: int
    timestamp_ms: int

    def value(self) -> bytes:
        return json.dumps({"period": self.period, "category": self.category}).encode()


def generate_views(seed: int, count: int, *, start_ms: int | None = None) -> list[PageView]:
    """Mostly increasing timestamps, some out of order within grace, a few far too late.

    Event times start at ``start_ms``, by default near the wall clock (see
    ``tests/event_times.py``): the broker deletes window changelogs by record timestamp.
    """
    rng = random.Random(seed)
    views = []
    clock = event_time_base_ms() if start_ms is None else start_ms
    for _ in range(count):
        clock += rng.randint(0, 120)
        ts = clock
        roll = rng.random()
        if roll < 0.15:
            ts = clock - rng.randint(1, GRACE_MS)  # out of order, usually inside grace
        elif roll < 0.18:
            ts = clock - rng.randint(3 * WINDOW_MS, 6 * WINDOW_MS)  # later than grace
        views.append(
            PageView(
                key=f"user-{rng.randint(0, 50)}",
                category=rng.choice(["news", "sports", "tech", "travel"]),
                period=rng.choice([10_000, 35_000, 45_000, 60_000]),
                timestamp_ms=max(0, ts),
            )
        )
    return views


def oracle_counts(views: list[PageView]) -> tuple[dict[tuple[str, int], int], int]:
    """Final count per (category, window start) and the number of late drops.

    Single input partition: stream time is the running maximum in offset order, and a record
    counts only while ``window_end > stream_time - grace``.
    """
    counts: dict[tuple[str, int], int] = defaultdict(int)
    stream_time = -1
    dropped = 0
    for view in views:
        if view.period < 30000:
            continue
        stream_time = max(stream_time, view.timestamp_ms)
        start = view.timestamp_ms - view.timestamp_ms % WINDOW_MS
        if start + WINDOW_MS > stream_time - GRACE_MS:
            counts[(view.category, start)] += 1
        else:
            dropped += 1
    return dict(counts), dropped


def produce(bootstrap: str, topic: str, views: list[PageView]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for view in views:
        producer.produce(topic, key=view.key.encode(), value=view.value(),
                         timestamp=view.timestamp_ms, partition=0)  # fmt: skip
    assert producer.flush(30) == 0


def read_topic(
    bootstrap: str, topic: str, *, committed_only: bool = True, partition: int = 0
) -> list:
    """Every record of one partition of a topic (the first by default), in offset order, up to
    its current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    consumer.assign([TopicPartition(topic, partition, low)])
    records = []
    deadline = time.monotonic() + 60
    done = high <= low
    while not done and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                done = msg.error().code() == -191  # _PARTITION_EOF
                continue
            records.append(msg)
            done = msg.offset() >= high - 1
    consumer.close()
    return records


def read_revisions(bootstrap: str, topic: str) -> list[tuple[tuple[str, int], int]]:
    out = []
    for msg in read_topic(bootstrap, topic):
        windowed = WINDOW_KEY.deserialize(topic, msg.key())
        out.append(((windowed.key, windowed.window.start_ms), LONG.deserialize(topic, msg.value())))
    return out


def check_revisions_exactly_once(
    revisions: list[tuple[tuple[str, int], int]], oracle: dict[tuple[str, int], int]
) -> None:
    """Caching off, exactly-once: each window's revisions are exactly 1, 2, ..., final."""
    per_window: dict[tuple[str, int], list[int]] = defaultdict(list)
    for window, count in revisions:
        per_window[window].append(count)
    assert set(per_window) == set(oracle), (
        f"windows differ: missing {sorted(set(oracle) - set(per_window))[:5]}, "
        f"extra {sorted(set(per_window) - set(oracle))[:5]}"
    )
    for window, counts in per_window.items():
        assert max(counts) <= oracle[window], f"{window}: a revision exceeds the true count"
        assert counts == list(range(1, oracle[window] + 1)), (
            f"{window}: revisions {counts} are not exactly 1..{oracle[window]} "
            "(a duplicate means a record counted twice, a gap a lost revision)"
        )


@dataclass
class Runner:
    """One ``fluvial run`` process for the Figure 2 app."""

    bootstrap: str
    app_id: str
    input_topic: str
    output_topic: str
    state_dir: Path
    guarantee: str = "exactly_once_v2"
    commit_ms: int = 500
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    workers: int | None = None  # --workers: the number of slots
    args: list[str] = field(default_factory=list)  # more options of fluvial run

    def start(self, *, prometheus_port: int | None = None) -> None:
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", "local"]
        self._launch(cmd, {}, prometheus_port)

    def _launch(self, cmd: list[str], env: dict[str, str], prometheus_port: int | None) -> None:
        """Start ``cmd`` as a fresh process, its output in a new log; stopped with the test."""
        env = {
            **os.environ,
            "FLUVIAL_TEST_INPUT": self.input_topic,
            "FLUVIAL_TEST_OUTPUT": self.output_topic,
            "FLUVIAL_TEST_APP_ID": self.app_id,
            "FLUVIAL_TEST_BOOTSTRAP": self.bootstrap,
            "FLUVIAL_TEST_GUARANTEE": self.guarantee,
            "FLUVIAL_TEST_COMMIT_MS": str(self.commit_ms),
            "FLUVIAL_TEST_STATE_DIR": str(self.state_dir),
            **env,
            **self.extra_env,
        }
        if prometheus_port:
            cmd = [*cmd, "--prometheus-port", str(prometheus_port)]
        if self.workers:
            cmd = [*cmd, "--workers", str(self.workers)]
        cmd = [*cmd, *self.args]
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.state_dir / f"run-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as log:
            self.proc = processes.spawn(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        what=f"fluvial run ({self.app_id})")  # fmt: skip

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def wait_ready(self, timeout_s: float = 120) -> None:
        """Wait until the application runs its tasks (its signal handlers are in place)."""
        wait_until(
            lambda: "Ctrl-C commits and stops" in self.output() or self.proc.poll() is not None,
            timeout_s,
            "the application to start",
            interval_s=0.1,
        )

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.wait_ready()
        self.signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""


def open_transaction_records(bootstrap: str, topic: str, partition: int = 0) -> int:
    """How far the log end is past the last stable offset: > 0 while a transaction that wrote to
    the partition is open (its records are in the log, not committed and not aborted)."""
    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "open-transactions",
                             "isolation.level": isolation})  # fmt: skip
        try:
            ends.append(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1])
        finally:
            consumer.close()
    log_end, last_stable = ends
    return log_end - last_stable


def committed_offset(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def flush(producer: Producer, timeout_s: float = 300) -> None:
    """Wait until the producer delivered everything: however long a loaded broker takes."""
    wait_until(lambda: producer.flush(5) == 0, timeout_s, "the producer to deliver", 0)


def scrape(port: int) -> dict[str, float]:
    """The application's Prometheus metrics, each summed over its labels; empty while it is
    not serving."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            metric = name.split("{")[0]
            values[metric] = values.get(metric, 0.0) + float(value)
    return values


def wait_until(condition, timeout_s: float, what: str, interval_s: float = 0.5):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


# -- the Spark engine -------------------------------------------------------------------------


@dataclass
class SparkRunner(Runner):
    """One ``fluvial run --engine spark`` process for the Figure 2 app (or another APP.py)."""

    master: str = "local[2]"
    lease_ms: int = 2000
    app: Path = APP
    engine: str = "spark"

    def start(self, *, prometheus_port: int | None = None) -> None:
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(self.app), "--engine", self.engine]
        if self.engine == "spark":
            cmd += ["--master", self.master]
        self._launch(cmd, {"FLUVIAL_SPARK_LEASE_MS": str(self.lease_ms)}, prometheus_port)

    def leases(self) -> list[dict]:
        """The driver's lease log: one entry per lease (slots, attempts, pids, restores)."""
        path = self.state_dir / self.app_id / "leases.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def slot_pid(self, slot: int = 0) -> int | None:
        """The Python worker process that runs (or last ran) a slot, on this machine."""
        path = self.state_dir / self.app_id / ".slots" / f"slot-{slot}.pid"
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            return None
