"""What a benchmark run observes from the outside, the same way for every system.

- :class:`ProcessTree` samples the CPU time and resident memory of the system's whole process
  tree (a JVM, Spark's Python workers, ...) from ``/proc``; the broker is not part of it.
- :class:`Progress` watches Kafka: when the system first writes anything (its first output,
  repartition or changelog record) and when its committed input offsets reach the input's end.
- :func:`measure_latency` reads the output with a read_committed consumer while input flows.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _read_stat(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, CPU seconds including reaped children, RSS bytes) of one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    rss_pages = int(fields[21])
    # cutime/cstime hold the CPU of children that exited and were waited for: they left the
    # tree, so counting them here never counts a live process twice.
    return ppid, (utime + stime + cutime + cstime) / _CLOCK_TICKS, rss_pages * _PAGE_SIZE


def tree_usage(root: int) -> tuple[float, int]:
    """CPU seconds and RSS bytes of ``root`` and all its live descendants."""
    stats = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
                children.setdefault(stat[0], []).append(int(entry))
    cpu, rss = 0.0, 0
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            cpu += stats[pid][1]
            rss += stats[pid][2]
        todo.extend(children.get(pid, ()))
    return cpu, rss


class ProcessTree(threading.Thread):
    """Samples a process tree every ``interval_s`` until stopped."""

    def __init__(self, root: int, interval_s: float = 0.2) -> None:
        super().__init__(name="bench-process-tree", daemon=True)
        self.root = root
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, int]] = []  # (epoch s, CPU s, RSS bytes)
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval_s)

    def sample(self) -> None:
        """Sample now. Called before the tree is stopped too, so a run shorter than the
        interval (or a sampler the machine's load held back) still has a sample after its
        end: without one its CPU would read as zero."""
        with self._lock:
            cpu, rss = tree_usage(self.root)
            if rss:
                self.samples.append((time.time(), cpu, rss))

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

    def cpu_at(self, when: float) -> float:
        """CPU seconds used by ``when``, from the nearest sample at or before it."""
        best = 0.0
        for t, cpu, _rss in self.samples:
            if t > when:
                break
            best = cpu
        return best

    def cpu_between(self, start: float, end: float) -> float:
        # The first sample after ``end`` bounds the work done by ``end`` from above; the
        # sampling interval is small next to any run, so the error is a fraction of a tick.
        after = next((cpu for t, cpu, _ in self.samples if t >= end), None)
        last = after if after is not None else (self.samples[-1][1] if self.samples else 0.0)
        return max(0.0, last - self.cpu_at(start))

    @property
    def peak_rss(self) -> int:
        return max((rss for _t, _cpu, rss in self.samples), default=0)


@dataclass
class Progress:
    """Watches a run's topics: first write by the system, committed input offsets, the end.

    ``committed_total`` returns how many input records the system has committed; the default
    reads the consumer group's committed offsets, and systems that keep their offsets elsewhere
    (Spark's checkpoints) supply their own.
    """

    bootstrap: str
    group: str
    inputs: dict[str, int]  # topic -> partitions
    ignore_topics: set[str] = field(default_factory=set)
    committed_total: Callable[[], int] | None = None
    # Multi-hop pipelines (a repartition topic) are done only when their later hops are too:
    # once nothing the group commits, nor the output, has changed for ``quiet_s``.
    output_topic: str = ""
    quiet_s: float = 0.0
    client_config: dict[str, str] = field(default_factory=dict)
    first_write_at: float | None = None
    done_at: float | None = None
    last_committed: int = 0
    last_change_at: float = 0.0

    def __post_init__(self) -> None:
        self._consumer = Consumer(
            {
                **self.client_config,
                "bootstrap.servers": self.bootstrap,
                # The system's own group: committed() only reads it, and a consumer that never
                # subscribes never joins the group or disturbs its assignment.
                "group.id": self.group,
                "enable.auto.commit": False,
                # End offsets must count records of open transactions too (a system's first
                # write is one); read_committed would report the last stable offset instead.
                "isolation.level": "read_uncommitted",
            }
        )
        self._tps = [TopicPartition(t, p) for t, n in self.inputs.items() for p in range(n)]
        self._baseline: dict[tuple[str, int], int] = {}
        self._topics_checked = 0.0
        self._watched: list[TopicPartition] = []
        self._refresh_topics(initial=True)
        self._admin = AdminClient({**self.client_config, "bootstrap.servers": self.bootstrap})
        self._signature: tuple[int, ...] = ()

    def _refresh_topics(self, *, initial: bool = False) -> None:
        metadata = self._consumer.list_topics(timeout=10)
        known = {(tp.topic, tp.partition) for tp in self._watched}
        for name, topic in metadata.topics.items():
            # Kafka's own topics and Faust's leader-election topic say nothing about processing.
            if name.startswith("__") or "__assignor" in name or name in self.inputs:
                continue
            if name in self.ignore_topics:
                continue
            for partition in topic.partitions:
                if (name, partition) in known:
                    continue
                if initial:
                    high = self._initial_end(TopicPartition(name, partition))
                    if high is None:
                        continue  # a topic on its way out (an earlier run's): nothing to watch
                    self._baseline[(name, partition)] = high
                self._watched.append(TopicPartition(name, partition))
        self._topics_checked = time.monotonic()

    def _initial_end(self, tp: TopicPartition) -> int | None:
        """The end offset of a topic that exists before the system starts, or None when the
        broker keeps refusing it (a leader moving, the topic being deleted)."""
        for attempt in range(5):
            try:
                _low, high = self._consumer.get_watermark_offsets(tp, timeout=10)
                return int(high)
            except KafkaException:
                time.sleep(0.2 * (attempt + 1))
        return None

    def input_ends(self) -> int:
        total = 0
        for tp in self._tps:
            _low, high = self._consumer.get_watermark_offsets(tp, timeout=10)
            total += high
        return total

    def poll(self) -> None:
        """One look; call it every few tens of milliseconds."""
        now = time.time()
        if self.first_write_at is None:
            if time.monotonic() - self._topics_checked > 0.5:
                self._refresh_topics()
            for tp in self._watched:
                try:
                    _low, high = self._consumer.get_watermark_offsets(tp, timeout=5)
                except Exception:  # a topic being created: look again next time
                    continue
                if high > self._baseline.get((tp.topic, tp.partition), 0):
                    self.first_write_at = now
                    break
        if self.committed_total is not None:
            self.last_committed = self.committed_total()
        else:
            committed = self._consumer.committed(self._tps, timeout=10)
            self.last_committed = sum(max(0, tp.offset) for tp in committed)
        if self.quiet_s:
            signature = self._group_signature()
            if signature != self._signature:
                self._signature = signature
                self.last_change_at = now

    def _group_signature(self) -> tuple[int, ...]:
        """Every offset the group has committed (all hops), and the output's end offsets."""
        request = [ConsumerGroupTopicPartitions(self.group)]
        future = self._admin.list_consumer_group_offsets(request)[self.group]
        try:
            tps = future.result().topic_partitions
        except KafkaException:
            tps = []  # the group has committed nothing yet
        offsets = [tp.offset for tp in sorted(tps, key=lambda t: (t.topic, t.partition))]
        if self.output_topic:
            for p in range(max(self.inputs.values())):
                _low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.output_topic, p), timeout=10
                )
                offsets.append(high)
        return tuple(offsets)

    def wait_done(
        self,
        expected: int,
        *,
        timeout_s: float,
        interval_s: float = 0.05,
        alive: Callable[[], bool] = lambda: True,
        report: Callable[[int], None] | None = None,
        report_every_s: float = 5.0,
    ) -> float:
        """Poll until ``expected`` input records are committed; return the epoch time of that.

        ``report`` is told the input records committed so far every ``report_every_s``."""
        deadline = time.monotonic() + timeout_s
        reported = time.monotonic()
        while time.monotonic() < deadline:
            if report is not None and time.monotonic() - reported >= report_every_s:
                report(self.last_committed)
                reported = time.monotonic()
            try:
                self.poll()
            except KafkaException:
                # A coordinator moving or loading (new groups, new transactional ids): look
                # again on the next round.
                time.sleep(interval_s)
                continue
            if self.last_committed >= expected:
                if not self.quiet_s:
                    self.done_at = time.time()
                    return self.done_at
                if time.time() - self.last_change_at >= self.quiet_s:
                    # The last change was the last hop's final commit.
                    self.done_at = self.last_change_at
                    return self.done_at
            if not alive():
                if self.last_committed >= expected and self.quiet_s:
                    # It stopped by itself once done (the Kafka Streams reference app does):
                    # nothing changes after an exit, so the last change was the last commit.
                    self.done_at = self.last_change_at
                    return self.done_at
                raise RuntimeError("the system under test exited before finishing its input")
            time.sleep(interval_s)
        raise TimeoutError(
            f"after {timeout_s:.0f} s only {self.last_committed:,} of {expected:,} input records "
            "were committed"
        )

    def close(self) -> None:
        self._consumer.close()


def count_committed(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60,
    client_config: dict[str, str] | None = None,
) -> int:  # fmt: skip
    """How many records of ``topic`` a read_committed consumer sees, up to its current end."""
    consumer = Consumer(
        {
            **(client_config or {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-count-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.max.bytes": 52428800,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        count, open_partitions = 0, set(ends)
        deadline = time.monotonic() + timeout_s
        while open_partitions and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        open_partitions.discard(msg.partition())
                    continue
                count += 1
                if msg.offset() >= ends[msg.partition()] - 1:
                    open_partitions.discard(msg.partition())
        return count
    finally:
        consumer.close()


class LatencyReader(threading.Thread):
    """Reads the output with read_committed and records each result's end-to-end latency.

    The latency of a result is the wall-clock time it became readable minus the time its input
    was produced: the ``sent`` field a pass-through carries in its value, else the record
    timestamp, which Kafka Streams' semantics (and every peer here) carry from input to result.
    """

    def __init__(
        self, bootstrap: str, topic: str, partitions: int,
        client_config: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name="bench-latency", daemon=True)
        self.consumer = Consumer(
            {
                **(client_config or {}),
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-latency-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 5,
                "fetch.min.bytes": 1,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.latencies_ms: list[tuple[float, float]] = []  # (sent epoch ms, latency ms)
        self.seen = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for msg in self.consumer.consume(1000, 0.05):
                if msg.error() is not None:
                    continue
                now_ms = time.time() * 1000
                self.seen += 1
                sent = None
                try:
                    value = json.loads(msg.value())
                    if isinstance(value, dict) and "sent" in value:
                        sent = float(value["sent"])
                except (ValueError, TypeError, UnicodeDecodeError):
                    pass
                if sent is None:
                    sent = float(msg.timestamp()[1])
                self.latencies_ms.append((sent, now_ms - sent))

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self.consumer.close()


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]
