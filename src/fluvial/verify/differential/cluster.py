"""``fluvial verify --differential N --partitions P``: generated cases on a real Kafka cluster.

Each case's input is written to topics of ``P`` partitions by a producer with Java's partitioner
(``partitioner=murmur2_random``), then processed by two applications on the same cluster: the
case's topology in Kafka Streams (``KafkaStreams`` in the reference project's JVM, built by its
``CaseBuilder``) and the same topology in fluvial's local engine (what ``fluvial run --engine
local`` runs; the Spark engine on request). Both run exactly-once with the record cache off and
write to output topics of their own, read back read_committed once both have consumed
everything.

What is compared, per output topic (cases are drawn so that neither depends on the order in
which records of different partitions meet; see ``generate_partitioned_case``):

- a table's output (a ``to_stream`` of a table): the final committed value per key (windowed
  keys carry their window), with its timestamp and partition; a tombstone counts as no value;
- a stream's output: the multiset of committed records per key (value, timestamp, partition).

Input records are timed next to the wall clock: a case's timestamps are offsets from the moment
it starts. Tables and global tables are written first and consumed by both applications before
any stream record is written. Streams arrive either as a backlog (all at once) or paced like
live traffic, while both applications run.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from fluvial import children
from fluvial.config import StreamsConfig
from fluvial.jvm import java_executable
from fluvial.kafka.admin import TopicSpec, admin_client, create_topics
from fluvial.runtime import Application
from fluvial.verify.differential.build import build_topology
from fluvial.verify.differential.run import Comparison, JvmLineProcess

# fluvial settings every partitioned case runs with, beside the run's own (application id,
# bootstrap servers, exactly-once, commit interval, caching off, state directory). Settings that
# choose between Kafka Streams' behaviour and a fluvial-only one go here, set to Kafka Streams':
# the differential compares fluvial in its Kafka Streams-compatible mode.
KAFKA_STREAMS_COMPATIBLE: dict[str, Any] = {
    # A downstream task's stream time follows the records it reads from a repartition topic, as
    # in Kafka Streams, instead of waiting for the slowest upstream writer.
    "catch_up_completeness": False,
}

# Differences with Kafka Streams still open (docs/semantics.md, "Differences still open"): a run
# with ``settled=True`` does not compare them. Remove one here once it is fixed. None is open:
# "windowed_output_partition" (a windowed key placed by its whole bytes) was fixed.
OPEN_DIFFERENCES: frozenset[str] = frozenset()

COMMIT_INTERVAL_MS = 100
# Runs of a case that failed to run (see ``ClusterSession.compare_cases``).
RERUNS = 2
# How long paced input takes to write, at most.
PACED_SPAN_S = 2.5
# Both applications must have consumed everything within this time of the last input record.
CASE_TIMEOUT_S = 120.0
# Timestamps start this far before the case starts: near the wall clock, never ahead of it.
TIME_BASE_LAG_MS = 60_000


# -- the Kafka Streams side: one JVM running many applications --------------------------------


class ClusterReference(JvmLineProcess):
    """The reference project's ``ClusterMain``: one JVM starting and stopping a ``KafkaStreams``
    per case on command. Its log (warnings and up) goes to a temporary file."""

    CLOSE_WAIT_S = 60.0  # it stops every KafkaStreams it still runs

    def __init__(self, *, heap_mb: int = 512) -> None:
        from fluvial.verify.differential.reference import build_reference_jar

        jar = build_reference_jar()
        self._log = tempfile.TemporaryFile(prefix="fluvial-differential-cluster-jvm-")  # noqa: SIM115
        cmd = [
            java_executable(), f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", str(jar), "dev.fluvial.reference.differential.ClusterMain",
        ]  # fmt: skip
        self._proc = children.popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        with self._lock:
            if proc.poll() is not None:
                raise RuntimeError(f"the Kafka Streams runner exited: {self._tail()}")
            proc.stdin.write(json.dumps(command) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Kafka Streams runner stopped: {self._tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def start(self, app_id: str, bootstrap: str, case: dict[str, Any]) -> str | None:
        """Start the case's application; its error if it could not be built or started."""
        answer = self._ask({"cmd": "start", "app_id": app_id, "bootstrap": bootstrap,
                            "case": case})  # fmt: skip
        return answer.get("error")

    def error(self, app_id: str) -> str | None:
        answer = self._ask({"cmd": "state", "app_id": app_id})
        if answer.get("error"):
            return str(answer["error"])
        if answer.get("state") in ("ERROR", "PENDING_ERROR", "NOT_RUNNING"):
            return f"the Kafka Streams application is {answer['state']}"
        return None

    def stop(self, app_id: str) -> str | None:
        return self._ask({"cmd": "stop", "app_id": app_id}).get("error")


# -- the fluvial side --------------------------------------------------------------------------


class FluvialSide:
    """The case's topology in fluvial: the local engine in this process, or the Spark engine."""

    def __init__(self, case: dict[str, Any], config: StreamsConfig, engine: str,
                 spark: Any = None) -> None:  # fmt: skip
        self.engine = engine
        self._app: Any
        if engine == "local":
            self._app = Application(build_topology(case), config, workers=1)
        elif engine == "spark":
            from fluvial.spark.engine import SparkApplication

            app_file = Path(config.state_dir) / "case_app.py"
            app_file.parent.mkdir(parents=True, exist_ok=True)
            app_file.write_text(_spark_app_source(case))
            self._app = SparkApplication(app_file, config, spark=spark, slots=1)
        else:
            raise ValueError(f"unknown engine {engine!r}: local or spark")

    def start(self) -> None:
        self._app.start()

    def error(self) -> str | None:
        errors = getattr(self._app, "errors", None)
        return repr(errors[0]) if errors else None

    def stop(self) -> str | None:
        try:
            self._app.close()
            self._app.raise_if_failed()
        except Exception as error:  # noqa: BLE001 - a failing case is a result
            return f"{type(error).__name__}: {error}"
        return None


def _spark_app_source(case: dict[str, Any]) -> str:
    """An application file building the case's topology, for the Spark engine's workers."""
    return (
        "import json\n"
        "from fluvial.verify.differential.build import build_topology\n"
        f"topology = build_topology(json.loads({json.dumps(case)!r}))\n"
    )


# -- topics, input and output ------------------------------------------------------------------


@dataclass
class CaseRun:
    """One case on the cluster: its topic names and both sides' applications."""

    case: dict[str, Any]
    prefix: str
    partitions: int
    reference_case: dict[str, Any] = field(init=False)
    fluvial_case: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.reference_case = self._renamed("ks")
        self.fluvial_case = self._renamed("fl")

    def input_topic(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def output_topic(self, name: str, side: str) -> str:
        return f"{self.prefix}-{name}-{side}"

    def app_id(self, side: str) -> str:
        return f"{self.prefix}-app-{side}"

    def _renamed(self, side: str) -> dict[str, Any]:
        renamed = copy.deepcopy(self.case)
        for node in renamed["nodes"]:
            if node["op"] == "to":
                node["topic"] = self.output_topic(node["topic"], side)
            elif "topic" in node:
                node["topic"] = self.input_topic(node["topic"])
        return renamed

    def inputs(self) -> dict[str, str]:
        """Input topic (case name) -> how it is read."""
        return {n["topic"]: n["op"] for n in self.case["nodes"] if n["op"] in SOURCES}

    def windowed_outputs(self) -> set[str]:
        """Output topics (case names) with windowed keys."""
        return {n["topic"] for n in self.case["nodes"] if n["op"] == "to" and n["k"] != "s"}

    def outputs(self) -> dict[str, str]:
        """Output topic (case name) -> what is compared: ``final`` (value and timestamp),
        ``final_value`` or ``multiset``.

        A foreign-key join's result takes the timestamp of the side whose update produced it
        last, which with several partitions depends on timing: only its value is compared. So
        does a table-table join fed paced input: when one side's row was filtered away, the
        final result carries the other side's timestamp or both sides' maximum, by which update
        the task saw last; two updates written within moments of each other to two topics reach
        it in either order, in Kafka Streams as in fluvial. Its final value does not depend on
        that order.
        """
        paced = self.case.get("input_mode") == "paced"
        nodes = {n["id"]: n for n in self.case["nodes"]}

        def upstream(node_id: str) -> set[str]:
            ops, stack, seen = set(), [node_id], set()
            while stack:
                current = stack.pop()
                if current not in seen:
                    seen.add(current)
                    ops.add(nodes[current]["op"])
                    stack.extend(nodes[current].get("in", []))
            return ops

        kinds = {}
        for n in self.case["nodes"]:
            if n["op"] != "to":
                continue
            if nodes[n["in"][0]]["op"] != "to_stream":
                kinds[n["topic"]] = "multiset"
            elif "fk_join" in upstream(n["id"]) or (paced and "tt_join" in upstream(n["id"])):
                kinds[n["topic"]] = "final_value"
            else:
                kinds[n["topic"]] = "final"
        return kinds

    def topic_specs(self) -> list[TopicSpec]:
        names = [self.input_topic(t) for t in self.inputs()]
        names += [self.output_topic(t, side) for t in self.outputs() for side in ("ks", "fl")]
        return [TopicSpec(name, self.partitions) for name in names]

    def watched_topics(self) -> list[str]:
        """Input topics read by the applications' consumer groups (global tables are not)."""
        return [self.input_topic(t) for t, op in self.inputs().items() if op != "global_table"]


SOURCES = ("stream", "table", "global_table")


def java_partitioned_producer(bootstrap: str) -> Producer:
    """A producer that places keys as Java's clients do (murmur2), so Kafka Streams and fluvial
    see the same co-partitioning a Java producer would give."""
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "partitioner": "murmur2_random", "linger.ms": 5})  # fmt: skip


def write_records(producer: Producer, run: CaseRun, records: list[list[Any]], base_ms: int,
                  paced: bool) -> None:  # fmt: skip
    """Write ``records`` (timestamps offset from ``base_ms``); paced, spread over up to
    :data:`PACED_SPAN_S` following their timestamps' gaps, flushed as they go."""
    if not records:
        return
    span = max(1, max(r[3] for r in records) - min(r[3] for r in records))
    scale = min(1.0, PACED_SPAN_S * 1000 / span)
    started = time.monotonic()
    first = records[0][3]
    for topic, key, value, offset_ms in records:
        if paced:
            due = started + max(0, offset_ms - first) * scale / 1000
            wait = due - time.monotonic()
            if wait > 0.02:
                producer.flush(10)
                time.sleep(wait)
        producer.produce(
            run.input_topic(topic),
            key=None if key is None else key.encode(),
            value=None if value is None else value.encode(),
            timestamp=base_ms + offset_ms,
        )
        producer.poll(0)
    if producer.flush(30) != 0:
        raise RuntimeError(f"case {run.case['id']}: input records were not all delivered")


Row = tuple[int, bytes | None, bytes | None, int]  # partition, key, value, timestamp


def read_output(bootstrap: str, topic: str) -> list[Row]:
    """Every committed record of every partition, each partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})  # fmt: skip
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        rows: list[Row] = []
        for p in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            deadline = time.monotonic() + 60
            done = False
            while not done:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"could not read {topic} partition {p} to its end")
                for msg in consumer.consume(1000, 0.5):
                    error = msg.error()
                    if error is not None:
                        done = done or error.code() == KafkaError._PARTITION_EOF
                        continue
                    rows.append((p, msg.key(), msg.value(), msg.timestamp()[1]))
                    done = done or (msg.offset() or 0) >= high - 1
        return rows
    finally:
        consumer.close()


def consumed_offsets(
    bootstrap: str, app_id: str, topics: list[str], written: list[str]
) -> dict[Any, int] | None:
    """The group's committed offsets if no committed record lies at or past them in any
    partition it reads (the case's input topics and the application's repartition and
    foreign-key topics) and no transaction of the application is open; None otherwise.

    An open transaction hides what it wrote and what it consumed alike, so offsets that stand
    still while one is open say nothing: a foreign-key join's subscription, say, may be inside it,
    with the response and the join's result still to come. ``written`` are the application's
    output topics; its internal topics (``{app_id}-…``) are looked at too."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": app_id,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})  # fmt: skip
    uncommitted = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{app_id}-watch",
                            "isolation.level": "read_uncommitted",
                            "enable.auto.commit": False})  # fmt: skip
    try:
        listed = consumer.list_topics(timeout=10).topics
        internal = {name for name in listed if name.startswith(f"{app_id}-")}
        read = set(topics) | {n for n in internal if n.endswith(("-repartition", "-topic"))}
        for topic in sorted(internal | (set(written) & set(listed))):
            for p in listed[topic].partitions:
                tp = TopicPartition(topic, p)
                _low, last_stable = consumer.get_watermark_offsets(tp, timeout=10)
                _low, high = uncommitted.get_watermark_offsets(tp, timeout=10)
                if high > last_stable:
                    return None  # a transaction is open (or its marker not yet written)
        partitions = [TopicPartition(t, p) for t in sorted(read) for p in listed[t].partitions]
        offsets: dict[Any, int] = {}
        for tp in consumer.committed(partitions, timeout=10):
            low, last_stable = consumer.get_watermark_offsets(tp, timeout=10)
            start = tp.offset if tp.offset >= 0 else low
            offsets[(tp.topic, tp.partition)] = start
            if start < last_stable and _has_record_from(consumer, tp.topic, tp.partition, start):
                return None
        return offsets
    except KafkaException:  # the coordinator is loading or moving: look again
        return None
    finally:
        consumer.close()
        uncommitted.close()


def _has_record_from(consumer: Consumer, topic: str, partition: int, start: int) -> bool:
    """Whether a committed record lies at or past ``start`` (transaction markers do not count)."""
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.2):
            error = msg.error()
            if error is None:
                return True
            if error.code() == KafkaError._PARTITION_EOF:
                return False
    return True


# -- comparing ---------------------------------------------------------------------------------


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def final_per_key(rows: list[Row]) -> dict[str | None, tuple[str | None, int]]:
    """Each key's last committed record (value, timestamp); tombstoned keys left out."""
    last: dict[str | None, tuple[str | None, int]] = {}
    for _partition, key, value, timestamp in rows:
        last[_hex(key)] = (_hex(value), timestamp)
    return {k: v for k, v in last.items() if v[0] is not None}


def multiset(rows: list[Row]) -> Counter[tuple[str | None, str | None, int]]:
    return Counter((_hex(key), _hex(value), ts) for _p, key, value, ts in rows)


def placements(rows: list[Row]) -> dict[str, set[int]]:
    """The partitions each non-null key was written to (a null key's partition is the
    producer's choice, not the application's)."""
    placed: dict[str, set[int]] = {}
    for partition, key, _value, _ts in rows:
        if key is not None:
            placed.setdefault(key.hex(), set()).add(partition)
    return placed


def compare_outputs(
    case_id: str,
    kinds: dict[str, str],
    theirs: dict[str, list[Row]],
    ours: dict[str, list[Row]],
    placed: set[str] | None = None,
) -> Comparison:
    """Kafka Streams' output topics (``theirs``) against fluvial's, by each topic's kind, then
    where each key was placed (in the topics of ``placed``; all by default)."""
    comparison = Comparison(case_id)
    for topic, kind in sorted(kinds.items()):
        want, got = theirs[topic], ours[topic]
        if kind in ("final", "final_value"):
            w, g = final_per_key(want), final_per_key(got)
            if kind == "final_value":
                w = {k: (v, 0) for k, (v, _ts) in w.items()}
                g = {k: (v, 0) for k, (v, _ts) in g.items()}
            comparison.records += max(len(w), len(g))
            wrong = sorted((k for k in set(w) | set(g) if w.get(k) != g.get(k)), key=str)
            if wrong:
                comparison.differences.append(
                    f"topic {topic}: final values differ for {len(wrong)} of "
                    f"{len(set(w) | set(g))} keys; first key {wrong[0]}: Kafka Streams "
                    f"(value, timestamp) {w.get(wrong[0])}, fluvial {g.get(wrong[0])}"
                )
        else:
            w_set, g_set = multiset(want), multiset(got)
            comparison.records += max(len(want), len(got))
            if w_set != g_set:
                missing, extra = w_set - g_set, g_set - w_set
                comparison.differences.append(
                    f"topic {topic}: Kafka Streams has {len(want)} records, fluvial {len(got)}; "
                    f"{sum(missing.values())} of Kafka Streams' are not in fluvial's (first: "
                    f"{next(iter(missing), None)}), {sum(extra.values())} of fluvial's not in "
                    f"Kafka Streams' (first: {next(iter(extra), None)}); (key, value, timestamp)"
                )
        if placed is not None and topic not in placed:
            continue
        w_placed, g_placed = placements(want), placements(got)
        misplaced = sorted(k for k in set(w_placed) & set(g_placed) if w_placed[k] != g_placed[k])
        if misplaced:
            comparison.differences.append(
                f"topic {topic}: {len(misplaced)} keys are in other partitions; first key "
                f"{misplaced[0]}: Kafka Streams {sorted(w_placed[misplaced[0]])}, fluvial "
                f"{sorted(g_placed[misplaced[0]])}"
            )
    return comparison


# -- running a batch of cases ------------------------------------------------------------------


@dataclass
class ClusterSession:
    """What every case of a run shares: the cluster, the Kafka Streams JVM, the settings."""

    bootstrap: str
    reference: ClusterReference
    partitions: int = 3
    engine: str = "local"
    #: Cases running at once (each a Kafka Streams and a fluvial application).
    concurrency: int = 10
    #: Leave out the :data:`OPEN_DIFFERENCES` (docs/semantics.md, "Differences still open").
    settled: bool = False
    spark: Any = None
    state_root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fluvial-dp-")))
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _counter: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def new_run(self, case: dict[str, Any]) -> CaseRun:
        with self._lock:
            self._counter += 1
            n = self._counter
        return CaseRun(case, f"dp-{self.token}-{n}", self.partitions)

    def fluvial_config(self, run: CaseRun) -> StreamsConfig:
        return StreamsConfig(
            application_id=run.app_id("fl"),
            bootstrap_servers=self.bootstrap,
            processing_guarantee="exactly_once_v2",
            commit_interval_ms=COMMIT_INTERVAL_MS,
            cache_max_bytes=0,
            state_dir=str(self.state_root / run.prefix),
            **KAFKA_STREAMS_COMPATIBLE,
        )

    def compare_cases(self, cases: list[dict[str, Any]]) -> list[Comparison]:
        """Every case on the cluster, :attr:`concurrency` at a time; results in case order.

        A case where one side failed and the other did not (a cluster too slow to give new
        topics their leaders, say) or that did not finish in time runs again, alone, up to
        :data:`RERUNS` times: a difference in the topology's behaviour shows again, a slow
        moment of the cluster does not.
        """
        comparisons: list[Comparison] = []
        for start in range(0, len(cases), self.concurrency):
            comparisons += self._compare_at_once(cases[start : start + self.concurrency])
        for _attempt in range(RERUNS):
            # One case at a time: the cluster is spared the load a whole batch puts on it.
            for i in [i for i, c in enumerate(comparisons) if _failed_to_run(c)]:
                comparisons[i] = self._compare_at_once([cases[i]])[0]
        return comparisons

    def _compare_at_once(self, cases: list[dict[str, Any]]) -> list[Comparison]:
        runs = [self.new_run(case) for case in cases]
        create_topics(self.bootstrap, [s for run in runs for s in run.topic_specs()])
        try:
            with ThreadPoolExecutor(len(runs)) as pool:
                return list(pool.map(self._run_case, runs))
        finally:
            self._delete_topics(runs)

    def _run_case(self, run: CaseRun) -> Comparison:
        try:
            return self._run_case_or_raise(run)
        except Exception as error:  # noqa: BLE001 - reported as the case's difference
            comparison = Comparison(run.case["id"])
            comparison.differences.append(f"the run failed: {type(error).__name__}: {error}")
            return comparison

    def _run_case_or_raise(self, run: CaseRun) -> Comparison:  # noqa: C901, PLR0912
        case = run.case
        inputs = run.inputs()
        tables = [r for r in case["inputs"] if inputs[r[0]] != "stream"]
        streams = [r for r in case["inputs"] if inputs[r[0]] == "stream"]
        paced = case.get("input_mode") == "paced"
        base_ms = int(time.time() * 1000) - TIME_BASE_LAG_MS
        producer = java_partitioned_producer(self.bootstrap)
        # Tables first, consumed by both sides before any stream record; a case of tables
        # only may have them paced, after both sides started.
        early, late = tables, streams
        if not streams and paced:
            early, late = [], tables
        elif not tables and not paced:
            early, late = streams, []
        write_records(producer, run, early, base_ms, paced=False)

        ks_app = run.app_id("ks")
        fluvial = FluvialSide(run.fluvial_case, self.fluvial_config(run), self.engine, self.spark)
        ks_error = self.reference.start(ks_app, self.bootstrap, run.reference_case)
        fl_error = None
        started = False
        try:
            if ks_error is None:
                try:
                    fluvial.start()
                    started = True
                except Exception as error:  # noqa: BLE001 - compared like the other side's
                    fl_error = f"{type(error).__name__}: {error}"
            if ks_error is not None or fl_error is not None:
                return _errors(case["id"], ks_error, fl_error)
            watched = run.watched_topics()
            if early and late:
                ks_error, fl_error = self._wait_consumed(run, fluvial, watched)
            if ks_error is None and fl_error is None and late:
                write_records(producer, run, late, base_ms, paced=paced)
                ks_error, fl_error = self._wait_consumed(run, fluvial, watched)
            elif ks_error is None and fl_error is None:
                ks_error, fl_error = self._wait_consumed(run, fluvial, watched)
        finally:
            ks_stop_error = self.reference.stop(ks_app)
            fl_stop_error = fluvial.stop() if started else None
            shutil.rmtree(self.state_root / run.prefix, ignore_errors=True)
        ks_error = ks_error or ks_stop_error
        fl_error = fl_error or fl_stop_error
        if ks_error is not None or fl_error is not None:
            return _errors(case["id"], ks_error, fl_error)
        kinds = run.outputs()
        theirs = {t: read_output(self.bootstrap, run.output_topic(t, "ks")) for t in kinds}
        ours = {t: read_output(self.bootstrap, run.output_topic(t, "fl")) for t in kinds}
        placed = None
        if self.settled and "windowed_output_partition" in OPEN_DIFFERENCES:
            placed = set(kinds) - run.windowed_outputs()
        return compare_outputs(case["id"], kinds, theirs, ours, placed)

    def _wait_consumed(self, run: CaseRun, fluvial: FluvialSide,
                       watched: list[str]) -> tuple[str | None, str | None]:  # fmt: skip
        """Wait until both sides have consumed everything: the same committed offsets, none
        with a record past it, twice in a row. Returns each side's error, if one failed."""
        deadline = time.monotonic() + CASE_TIMEOUT_S
        previous: dict[str, Any] = {}
        done: set[str] = set()
        while True:
            ks_error, fl_error = self.reference.error(run.app_id("ks")), fluvial.error()
            if ks_error is not None or fl_error is not None:
                return ks_error, fl_error
            for side in ("ks", "fl"):
                if side in done:
                    continue
                written = [run.output_topic(t, side) for t in run.outputs()]
                offsets = consumed_offsets(self.bootstrap, run.app_id(side), watched, written)
                if offsets is not None and offsets == previous.get(side):
                    done.add(side)
                previous[side] = offsets
            if len(done) == 2:
                return None, None
            if time.monotonic() > deadline:
                late = " and ".join(
                    {"ks": "Kafka Streams", "fl": "fluvial"}[s]
                    for s in ("ks", "fl")
                    if s not in done
                )
                raise TimeoutError(
                    f"{late} did not consume case {run.case['id']}'s input within "
                    f"{CASE_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.3)

    def _delete_topics(self, runs: list[CaseRun]) -> None:
        admin = admin_client(self.bootstrap)
        prefixes = tuple(f"{run.prefix}-" for run in runs)
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefixes)]
        if names:
            for future in admin.delete_topics(names, operation_timeout=30).values():
                with contextlib.suppress(KafkaException):  # already gone
                    future.result()


def _failed_to_run(comparison: Comparison) -> bool:
    return any(d.startswith(("error:", "the run failed:")) for d in comparison.differences)


def _errors(case_id: str, ks_error: str | None, fl_error: str | None) -> Comparison:
    comparison = Comparison(case_id)
    if (ks_error is None) != (fl_error is None):
        comparison.differences.append(f"error: Kafka Streams {ks_error!r}, fluvial {fl_error!r}")
    return comparison


def cluster_oracle(session: ClusterSession) -> Callable[[list[dict[str, Any]]], list[bool]]:
    """For the shrinker: which of the given variants still differ."""
    return lambda variants: [not c.same for c in session.compare_cases(variants)]
