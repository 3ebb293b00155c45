"""``fluvial demo``: the paper's Figure 2 on Spark, exactly-once through crashes, checked.

It starts a private local Kafka, runs ``fluvial run`` on this very file (it is also the
APP.py: see :func:`build`) with the Spark engine under ``exactly_once_v2``, feeds it page
views with out-of-order timestamps, kills a Python worker and then the driver part-way, shows
revisions as late records arrive, and ends with a verdict: the committed output against a
count that a Spark batch job recomputes from the input.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, children, serdes

INPUT = "pageview-events"
OUTPUT = "pageview-windowed-counts"
WINDOW_MS, GRACE_MS = 5000, 2000
CATEGORIES = ("news", "sports", "tech", "travel")
LEASE_MS = 3000


def build(builder: StreamsBuilder) -> None:
    """Figure 2: windowed counts of long page views per category (this file is the APP.py)."""
    (
        builder.stream(INPUT, key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count()
        .to_stream()
        .to(
            OUTPUT,
            key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long(),
        )
    )


# Caching off, so that every late record shows as its own revision; the rest (bootstrap
# servers, application id, guarantee, state directory) comes from the demo's command line.
config = StreamsConfig(application_id="pageviews-demo", cache_max_bytes=0)


@dataclass
class View:
    user: str
    category: str
    period: int
    timestamp_ms: int


def generate_views(count: int, seed: int, start_ms: int) -> list[View]:
    """Mostly in order; 15% late within grace (they revise results), 3% beyond it (dropped)."""
    rng = random.Random(seed)
    clock, views = start_ms, []
    for _ in range(count):
        clock += rng.randint(0, 40)
        ts, roll = clock, rng.random()
        if roll < 0.15:
            ts = clock - rng.randint(1, GRACE_MS)
        elif roll < 0.18:
            ts = clock - rng.randint(3 * WINDOW_MS, 5 * WINDOW_MS)
        views.append(View(f"user-{rng.randint(0, 99)}", rng.choice(CATEGORIES),
                          rng.choice([10_000, 35_000, 45_000, 60_000]), ts))  # fmt: skip
    return views


_WINDOWED = serdes.time_windowed(serdes.string(), WINDOW_MS)


def decode(key: bytes | None, value: bytes | None) -> tuple[tuple[str, int], int]:
    """An output record: ((category, window start), count)."""
    windowed = _WINDOWED.deserialize(OUTPUT, key)
    count = serdes.long().deserialize(OUTPUT, value)
    assert windowed is not None and count is not None, "the output holds no tombstones"
    return (windowed.key, windowed.window.start_ms), count


def clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


class Pipeline:
    """``fluvial run`` of this file on Spark, as a child process (so it can be killed)."""

    def __init__(self, bootstrap: str, workdir: Path, app_id: str) -> None:
        self.bootstrap, self.workdir, self.app_id = bootstrap, workdir, app_id
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        cmd = [sys.executable, "-m", "fluvial.cli", "run", __file__, "--engine", "spark",
               "--master", "local[2]", "--guarantee", "exactly_once_v2",
               "--commit-interval-ms", "500", "--bootstrap-servers", self.bootstrap,
               "--application-id", self.app_id, "--state-dir", str(self.workdir / "state"),
               "--quiet"]  # fmt: skip
        env = {"FLUVIAL_SPARK_LEASE_MS": str(LEASE_MS)}
        log = open(self.workdir / f"pipeline-{self.runs}.log", "wb")  # noqa: SIM115 - child owns it
        self.proc = children.popen(
            cmd, keep=children.own_secrets(), extra_env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def slot_worker_pid(self) -> int | None:
        path = self.workdir / "state" / self.app_id / ".slots" / "slot-0.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(path.read_text())
            os.kill(pid, 0)
            return pid
        return None

    def leases(self) -> int:
        path = self.workdir / "state" / self.app_id / "leases.jsonl"
        with contextlib.suppress(OSError):
            return sum(1 for line in path.read_text().splitlines() if '"slots"' in line)
        return 0

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)  # commits the current lease and stops
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.kill9()
            return 1


class RevisionPrinter(threading.Thread):
    """Reads the committed output and shows revisions of windows that time already passed."""

    def __init__(self, bootstrap: str, console: Console) -> None:
        super().__init__(daemon=True, name="demo-revisions")
        self.console, self.stop_event = console, threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{uuid.uuid4().hex}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
        self.consumer.assign([TopicPartition(OUTPUT, 0, 0)])
        self.revisions = 0
        self.late_revisions = 0
        self.newest_start = -1
        self.last: dict[tuple[str, int], int] = {}
        self._shown = 0.0

    def run(self) -> None:
        while not self.stop_event.is_set():
            for msg in self.consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                window, count = decode(msg.key(), msg.value())
                category, start = window
                previous = self.last.get(window)
                self.last[window] = count
                self.revisions += 1
                if start < self.newest_start and previous is not None:
                    # A window older than the newest one changed: a late record revised it.
                    self.late_revisions += 1
                    if time.monotonic() - self._shown > 1.5:
                        self._shown = time.monotonic()
                        self.console.print(
                            f"    revision  [{clock(start)}, {clock(start + WINDOW_MS)})  "
                            f"{category:<7} {previous:>3} -> {count:<3}  "
                            f"[dim](late record; newest window starts {clock(self.newest_start)})",
                            highlight=False,
                        )
                self.newest_start = max(self.newest_start, start)
        self.consumer.close()


def run_demo(events: int = 4000, seconds: float = 40.0, console: Console | None = None) -> int:
    """Run the whole demo; return 0 if the verdict is exactly-once."""
    from fluvial.kafka import LocalKafka, free_port
    from fluvial.kafka.admin import TopicSpec, create_topics

    console = console or Console()
    started = time.monotonic()
    console.rule("[bold]fluvial demo: Figure 2 on Apache Spark, exactly-once, with crashes")
    with tempfile.TemporaryDirectory(prefix="fluvial-demo-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        console.print(f"[bold]1.[/] starting a private Apache Kafka on 127.0.0.1:{port} "
                      f"(data in {workdir / 'kafka'})")  # fmt: skip
        with LocalKafka(workdir / "kafka", port=port, heap="512m") as kafka:
            bootstrap = kafka.bootstrap_servers
            create_topics(bootstrap, [TopicSpec(INPUT, 1), TopicSpec(OUTPUT, 1)])
            pipeline = Pipeline(bootstrap, workdir, "pageviews-demo")
            try:
                views = _stream(console, bootstrap, pipeline, events, seconds)
                _drain(console, bootstrap, pipeline)
            finally:
                code = pipeline.stop()
                if code != 0:
                    console.print(f"[red]the pipeline exited with {code}; its log:[/]")
                    log = workdir / f"pipeline-{pipeline.runs}.log"
                    console.print(log.read_text(errors="replace")[-3000:], markup=False)
            _final_table(console, bootstrap)
            verdict_ok = _verdict(console, bootstrap, len(views), workdir / "verdict-spark.log")
        console.print(f"[dim]demo finished in {time.monotonic() - started:.0f} s; "
                      "Kafka stopped and its data removed[/]")  # fmt: skip
    return 0 if verdict_ok else 1


def _stream(console: Console, bootstrap: str, pipeline: Pipeline, events: int,
            seconds: float) -> list[View]:  # fmt: skip
    console.print("[bold]2.[/] starting the pipeline: [cyan]fluvial run --engine spark "
                  "--master local[2] --guarantee exactly_once_v2[/] (leases of "
                  f"{LEASE_MS / 1000:g} s, commits every 500 ms)")  # fmt: skip
    pipeline.start()
    start_ms = (int(time.time() * 1000) // WINDOW_MS) * WINDOW_MS
    views = generate_views(events, seed=2021, start_ms=start_ms)
    late = sum(1 for a, b in zip(views, views[1:], strict=False) if b.timestamp_ms < a.timestamp_ms)
    console.print(f"[bold]3.[/] producing {events:,} page views over ~{seconds:.0f} s, "
                  f"{late:,} of them out of order; live revisions:")  # fmt: skip
    printer = RevisionPrinter(bootstrap, console)
    printer.start()
    # log_level 3: librdkafka's retry warnings while the new broker warms up are noise here.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 3}
    )
    batches = 20
    size = -(-events // batches)
    for number, i in enumerate(range(0, events, size)):
        for view in views[i : i + size]:
            value = json.dumps({"period": view.period, "category": view.category}).encode()
            producer.produce(INPUT, key=view.user.encode(), value=value,
                             timestamp=view.timestamp_ms, partition=0)  # fmt: skip
        producer.flush(30)
        time.sleep(seconds / batches)
        if number == batches // 3:
            pid = _wait(pipeline.slot_worker_pid, 90)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                console.print(f"  [bold red]kill -9[/] of the Python worker running slot 0 "
                              f"(pid {pid}): Spark retries the slot task; the new attempt "
                              "fences the old one and restores from the changelog suffix")  # fmt: skip
        elif number == 2 * batches // 3:
            _wait(lambda: pipeline.leases() > 2 or None, 90)
            pipeline.kill9()
            console.print("  [bold red]kill -9[/] of the driver ([cyan]fluvial run[/]); "
                          "starting it again: it resumes from the committed offsets and state")  # fmt: skip
            pipeline.start()
    printer.stop_event.set()
    printer.join(5)
    console.print(f"  {printer.revisions:,} committed revisions so far, "
                  f"{printer.late_revisions:,} of them revising an older window")  # fmt: skip
    return views


def _wait(condition, timeout_s: float):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    return None


def _drain(console: Console, bootstrap: str, pipeline: Pipeline) -> None:
    """Wait until the pipeline committed all input and a lease went by with nothing to do."""
    console.print("[bold]4.[/] waiting for the pipeline to commit everything; then SIGTERM "
                  "(the current lease commits and the driver stops)")  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": pipeline.app_id})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(INPUT, 0), timeout=10)

        def caught_up() -> bool:
            [tp] = consumer.committed([TopicPartition(INPUT, 0)], timeout=10)
            return tp.offset >= high

        _wait(caught_up, 180)
    finally:
        consumer.close()
    # The aggregation reads the repartition topic one commit later: give it two more leases.
    leases = pipeline.leases()
    _wait(lambda: pipeline.leases() >= leases + 2 or None, 60)
    code = pipeline.stop()
    console.print(f"  the pipeline stopped (exit code {code}) after {pipeline.runs} driver run(s)")


def _spark_batch(bootstrap: str, log_path: Path):  # noqa: ANN202 - (truth, revisions)
    """Recount from the input, and read the committed output, with Spark batch jobs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from fluvial.spark import local_spark_session

    # The JVM inherits stderr when it starts: send its start-up chatter to a log file.
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            spark = local_spark_session("local[2]", app_name="fluvial demo verdict")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    try:

        def read(topic: str):  # noqa: ANN202
            return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("kafka.isolation.level", "read_committed").load())  # fmt: skip

        views = (
            read(INPUT)
            .select(
                "offset",
                F.unix_millis("timestamp").alias("ts"),
                F.from_json(F.col("value").cast("string"), "period INT, category STRING").alias(
                    "v"
                ),
            )
            .where(F.col("v.period") >= 30000)
        )
        # Stream time is the largest timestamp seen so far in offset order (one partition);
        # a record counts only while its window is open: end > stream time - grace.
        in_order = Window.orderBy("offset").rowsBetween(Window.unboundedPreceding, 0)
        truth = (
            views.withColumn("stream_time", F.max("ts").over(in_order))
            .withColumn("start", F.col("ts") - F.col("ts") % WINDOW_MS)
            .where(F.col("start") + WINDOW_MS > F.col("stream_time") - GRACE_MS)
            .groupBy(F.col("v.category").alias("category"), "start")
            .count()
            .collect()
        )
        revisions = (
            read(OUTPUT)
            .select(
                "offset",
                F.expr("CAST(substring(key, 1, length(key) - 8) AS STRING)").alias("category"),
                F.conv(F.hex(F.expr("substring(key, -8, 8)")), 16, 10).cast("long").alias("start"),
                F.conv(F.hex("value"), 16, 10).cast("long").alias("count"),
            )
            .orderBy("offset")
            .collect()
        )
    finally:
        spark.stop()
    return ({(r.category, r.start): r["count"] for r in truth},
            [((r.category, r.start), r["count"]) for r in revisions])  # fmt: skip


def _final_table(console: Console, bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(OUTPUT, 0, 0)])
    final: dict[tuple[str, int], int] = {}
    done = False
    while not done:
        msgs = consumer.consume(1000, 2.0)
        done = not msgs
        for msg in msgs:
            if msg.error() is not None:
                done = True  # the end of the partition
                continue
            window, count = decode(msg.key(), msg.value())
            final[window] = count
    consumer.close()
    starts = sorted({start for _, start in final})
    console.print("[bold]5.[/] final windowed counts (the last 8 windows; long page views)")
    table = Table()
    table.add_column("window (UTC)")
    for category in CATEGORIES:
        table.add_column(category, justify="right")
    for start in starts[-8:]:
        table.add_row(f"[{clock(start)}, {clock(start + WINDOW_MS)})",
                      *(str(final.get((c, start), "")) for c in CATEGORIES))  # fmt: skip
    console.print(table)


def _verdict(console: Console, bootstrap: str, produced: int, log_path: Path) -> bool:
    console.print("[bold]6.[/] recounting the input with a Spark batch job "
                  '([cyan]spark.read.format("kafka")[/]) and comparing every committed revision')  # fmt: skip
    truth, revisions = _spark_batch(bootstrap, log_path)
    per_window: dict[tuple[str, int], list[int]] = defaultdict(list)
    for window, count in revisions:
        per_window[window].append(count)
    duplicates = lost = 0
    for window in set(truth) | set(per_window):
        counts, true = per_window.get(window, []), truth.get(window, 0)
        final = counts[-1] if counts else 0
        # A repeated or excessive count is a record counted twice; a short final one, a loss.
        duplicates += len(counts) - len(set(counts)) + max(0, max(counts, default=0) - true)
        lost += max(0, true - final)
    windows = len(truth)
    style = "bold green" if duplicates == lost == 0 else "bold red"
    console.print(f"  {produced:,} page views in, {sum(truth.values()):,} counted in "
                  f"{windows} windows, {len(revisions):,} committed revisions")  # fmt: skip
    console.print(f"[{style}]exactly-once: {windows} windows, {duplicates} duplicates, {lost} lost")
    return duplicates == lost == 0
