"""The exactly-once fault matrix.

A seeded input flows into a three-broker cluster while faults are injected for real: ``kill -9``
of the application, a ``SIGSTOP`` zombie replaced by a successor, and ``kill -9`` of the broker
that leads an input partition. A read_committed verifier then checks, record by record:

- the echo output equals the input, per key and in order;
- every aggregate revision is a prefix aggregate of its key's input, one per input record;
- the final aggregates equal the oracle.

Under at-least-once it checks that nothing is lost (duplicates are allowed).
"""

from __future__ import annotations

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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fluvial import serdes
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.local import LocalKafka, free_port, port_is_free

APP = Path(__file__).with_name("app.py")
FAULTS = ("kill-app", "zombie", "kill-broker")
PARTITIONS = 3
LONG = serdes.long()


@dataclass
class VerifyReport:
    seed: int
    guarantee: str
    engine: str
    commit_interval_ms: int
    records: int = 0
    echoed: int = 0
    duplicates: int = 0
    lost: int = 0
    bad_revisions: int = 0
    wrong_finals: int = 0
    faults: list[str] = field(default_factory=list)
    verdict: str = "FAIL"
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"records {self.records}, duplicates {self.duplicates}, lost {self.lost}, "
            f"bad revisions {self.bad_revisions}, wrong finals {self.wrong_finals}, "
            f"faults {len(self.faults)} -> {self.verdict}"
        )


class _App:
    """One ``fluvial run`` process of the verify app."""

    def __init__(self, env: dict[str, str], engine: str, log_dir: Path) -> None:
        self.env, self.engine, self.log_dir = env, engine, log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    def start(self, state_dir: Path) -> _App:
        env = {**os.environ, **self.env, "FLUVIAL_VERIFY_STATE_DIR": str(state_dir)}
        self.log = self.log_dir / f"app-{time.monotonic_ns()}.log"
        # Not --quiet: the log keeps a status line every few seconds, for post-mortems.
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", self.engine]
        if self.engine == "spark":
            cmd += ["--master", "local[2]"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def ready(self) -> bool:
        text = self.log.read_text(errors="replace") if self.log and self.log.exists() else ""
        return "Ctrl-C commits and stops" in text

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        _wait(lambda: self.ready() or self.proc.poll() is not None, 120)  # type: ignore[union-attr]
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def _wait(condition: Callable[[], object], timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return False


def _committed_total(bootstrap: str, env: dict[str, str], topic: str) -> int:
    """Sum of the application's committed input offsets (grows with every commit)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": env["FLUVIAL_VERIFY_APP_ID"]})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=30))
    except Exception:
        return -1
    finally:
        consumer.close()


def _prefix_aggregates(values: list[int]) -> list[dict[str, int]]:
    out, total, lo, hi = [], 0, None, None
    for count, value in enumerate(values, start=1):
        total += value
        lo = value if lo is None else min(lo, value)
        hi = value if hi is None else max(hi, value)
        out.append({"sum": total, "count": count, "min": lo, "max": hi})
    return out


def _read_all(bootstrap: str, topic: str) -> list[tuple[str, bytes | None, int]]:
    """(key, value, partition) of every committed record of ``topic``, per partition in order."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })  # fmt: skip
    metadata = consumer.list_topics(topic, timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
    pending = set(partitions)
    records: list[tuple[str, bytes | None, int]] = []
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(5000, 0.5):
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            records.append((msg.key().decode(), msg.value(), msg.partition()))
    consumer.close()
    return records


def verify_outputs(
    bootstrap: str, input_topic: str, echo_topic: str, agg_topic: str, exactly_once: bool,
    report: VerifyReport,
) -> None:  # fmt: skip
    """Compare the committed outputs with the input, record by record."""
    inputs: dict[str, list[int]] = defaultdict(list)
    for key, value, _p in _read_all(bootstrap, input_topic):
        inputs[key].append(LONG.deserialize(input_topic, value))
    echoes: dict[str, list[int]] = defaultdict(list)
    for key, value, _p in _read_all(bootstrap, echo_topic):
        echoes[key].append(LONG.deserialize(echo_topic, value))
    report.records = sum(len(v) for v in inputs.values())
    report.echoed = sum(len(v) for v in echoes.values())
    for key, expected in inputs.items():
        got = echoes.get(key, [])
        remaining = list(got)
        for value in expected:
            if value in remaining:
                remaining.remove(value)
            else:
                report.lost += 1
        report.duplicates += len(remaining)
        if exactly_once and got != expected and len(report.problems) < 10:
            report.problems.append(f"echo of {key} differs from its input")
    revisions: dict[str, list[dict[str, int]]] = defaultdict(list)
    for key, value, _p in _read_all(bootstrap, agg_topic):
        revisions[key].append(json.loads(value) if value is not None else {})
    for key, values in inputs.items():
        prefixes = _prefix_aggregates(values)
        got = revisions.get(key, [])
        final = got[-1] if got else {}
        if exactly_once:
            bad = sum(1 for a, b in zip(got, prefixes, strict=False) if a != b)
            bad += abs(len(got) - len(prefixes))
            report.bad_revisions += bad
            if final != prefixes[-1]:
                report.wrong_finals += 1
                if len(report.problems) < 10:
                    report.problems.append(f"{key}: final {final} != oracle {prefixes[-1]}")
        elif final.get("count", 0) < len(values):
            report.wrong_finals += 1  # at-least-once may repeat, never lose
    clean = report.lost == 0 and report.wrong_finals == 0
    if exactly_once:
        clean = clean and report.duplicates == 0 and report.bad_revisions == 0
    report.verdict = "PASS" if clean else "FAIL"


def run_matrix(
    *,
    seed: int = 1,
    guarantee: str = "exactly_once_v2",
    engine: str = "local",
    records: int = 6000,
    keys: int = 50,
    faults: tuple[str, ...] = FAULTS,
    fault_count: int = 6,
    commit_interval_ms: int = 500,
    duration_s: float = 30.0,
    bootstrap_servers: str | None = None,
    work_dir: Path | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> VerifyReport:
    """Run the fault matrix once; start a private three-broker cluster unless one is given."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown fault(s) {sorted(unknown)}: choose from {', '.join(FAULTS)}")
    rng = random.Random(seed)
    work = Path(work_dir or tempfile.mkdtemp(prefix="fluvial-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster: LocalKafka | None = None
    if bootstrap_servers is None:
        port = free_port()
        while not all(port_is_free(p) for p in (port + 1, port + 2)):
            port = free_port()
        cluster = LocalKafka(work / "kafka", port=port, brokers=3, heap="512m")
        progress("starting a three-broker Kafka")
        bootstrap_servers = cluster.start()
    elif "kill-broker" in faults:
        faults = tuple(f for f in faults if f != "kill-broker")  # not ours to kill
    report = VerifyReport(seed, guarantee, engine, commit_interval_ms)
    run_id = uuid.uuid4().hex[:8]
    topics = {name: f"verify-{name}-{run_id}" for name in ("input", "echo", "agg")}
    replication = 3 if cluster is not None else -1
    create_topics(bootstrap_servers, [
        TopicSpec(t, PARTITIONS, replication_factor=replication,
                  config={"min.insync.replicas": "2"} if replication == 3 else {})
        for t in topics.values()
    ])  # fmt: skip
    env = {
        "FLUVIAL_VERIFY_INPUT": topics["input"], "FLUVIAL_VERIFY_ECHO": topics["echo"],
        "FLUVIAL_VERIFY_AGG": topics["agg"], "FLUVIAL_VERIFY_APP_ID": f"verify-{run_id}",
        "FLUVIAL_VERIFY_BOOTSTRAP": bootstrap_servers, "FLUVIAL_VERIFY_GUARANTEE": guarantee,
        "FLUVIAL_VERIFY_COMMIT_MS": str(commit_interval_ms),
        "FLUVIAL_VERIFY_RF": str(replication),
    }  # fmt: skip
    app = _App(env, engine, work).start(work / "state-0")
    done_producing = threading.Event()
    producer_error: list[BaseException] = []

    def produce() -> None:
        try:
            producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all",
                                 "enable.idempotence": True, "partitioner": "murmur2_random",
                                 "message.timeout.ms": 120000})  # fmt: skip
            pace = duration_s / records  # input keeps flowing while faults are injected
            for _ in range(records):
                key = f"k{rng.randrange(keys)}"
                value = rng.randint(-1000, 1000)
                producer.produce(
                    topics["input"], key=key.encode(), value=LONG.serialize(None, value)
                )
                producer.poll(0)
                time.sleep(pace)
            if producer.flush(120) != 0:
                raise RuntimeError("the input producer could not deliver every record")
        except BaseException as error:  # surfaced in the report
            producer_error.append(error)
        finally:
            done_producing.set()

    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    generation = 1
    try:
        for index in range(fault_count):
            if done_producing.is_set():
                break
            time.sleep(rng.uniform(1.0, 3.0))
            fault = faults[index % len(faults)]
            report.faults.append(fault)
            progress(f"fault {index + 1}: {fault}")
            if fault == "kill-app":
                app.kill()
                app = _App(env, engine, work).start(work / f"state-{generation % 2}")
            elif fault == "zombie":
                zombie = app
                # A zombie is an instance that did hold the slot: stop it only once it has
                # committed (its transactional id is initialised), then mid-transaction.
                before = _committed_total(bootstrap_servers, env, topics["input"])

                def committed_since(z: _App = zombie, mark: int = before) -> bool:
                    total = _committed_total(bootstrap_servers, env, topics["input"])
                    return total > mark or z.proc is None or z.proc.poll() is not None

                _wait(committed_since, 120, interval_s=0.3)
                time.sleep(rng.uniform(0.05, 0.25))
                zombie.signal(signal.SIGSTOP)
                # The successor runs on "another machine" (state dir) and fences the zombie.
                app = _App(env, engine, work).start(work / f"state-z{generation}")
                _wait(app.ready, 120)
                time.sleep(rng.uniform(0.5, 2.0))
                zombie.signal(signal.SIGCONT)
                if zombie.proc is not None:
                    try:
                        zombie.proc.wait(60)  # fenced: it must stop on its own
                    except subprocess.TimeoutExpired:
                        report.problems.append("a fenced zombie kept running")
                        zombie.kill()
            elif fault == "kill-broker" and cluster is not None:
                admin = AdminClient({"bootstrap.servers": bootstrap_servers})
                meta = admin.list_topics(topics["input"], timeout=30)
                leader = meta.topics[topics["input"]].partitions[0].leader
                cluster.kill_broker(leader)
                time.sleep(rng.uniform(2.0, 5.0))
                cluster.start_broker(leader)
            generation += 1
        done_producing.wait(300)
        if producer_error:
            raise producer_error[0]
        progress("input complete; waiting for the application to catch up")
        expected = records

        def caught_up() -> bool:
            counts = defaultdict(int)
            for key, value, _p in _read_all(bootstrap_servers, topics["agg"]):
                if value is not None:
                    counts[key] = max(counts[key], json.loads(value)["count"])
            return sum(counts.values()) >= expected

        _wait(lambda: caught_up() or app.proc.poll() is not None, 300, interval_s=2.0)
        code = app.stop()
        if code not in (0, None):
            report.problems.append(f"the application exited with {code}")
        progress("verifying the committed output record by record")
        verify_outputs(bootstrap_servers, topics["input"], topics["echo"], topics["agg"],
                       guarantee == "exactly_once_v2", report)  # fmt: skip
    finally:
        app.kill()
        if cluster is not None:
            cluster.stop()
    return report


def report_json(report: VerifyReport) -> str:
    return json.dumps(asdict(report), indent=2)
