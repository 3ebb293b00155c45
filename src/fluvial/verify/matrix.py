"""The exactly-once fault matrix.

Faults are injected for real while a seeded input flows into a three-broker cluster:

- ``kill-app``: ``kill -9`` of the ``fluvial run`` process (under Spark, of the driver with its
  JVM and Python workers), then a restart;
- ``zombie``: ``SIGSTOP`` of the app, a successor fences it, then ``SIGCONT`` (local engine);
- ``kill-broker``: ``kill -9`` of the leader of an input partition, then a restart;
- ``kill-spark-worker``: ``kill -9`` of the PySpark Python worker running a slot, so Spark
  retries the task and the new attempt fences the killed one (Spark engine).

Each fault kind is a scenario of its own: a fresh application id and fresh topics on the same
cluster, checked on its own by :mod:`fluvial.verify.check`, so each row of the table counts
only its own faults, records, duplicates and losses.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.local import LocalKafka, free_port, port_is_free
from fluvial.verify.check import LONG, VerifyReport, read_committed, verify_outputs
from fluvial.verify.faults import AppProcess, wait_for

DEFAULT_FAULTS = {
    "local": ("kill-app", "zombie", "kill-broker"),
    "spark": ("kill-spark-worker", "kill-app"),
}
ENGINE_FAULTS = {
    "local": ("kill-app", "zombie", "kill-broker"),
    "spark": ("kill-spark-worker", "kill-app", "kill-broker"),
}
PARTITIONS = 3
# Spark runs: leases short enough that several fit between faults, a heap that leaves room
# for three brokers on a small machine.
SPARK_LEASE_MS = 4000
SPARK_DRIVER_MEMORY = "512m"
RECOVERY_TIMEOUT_S = 180.0
TABLE_HEADER = ("fault", "injected", "records checked", "duplicates", "lost", "verdict")


@dataclass
class MatrixReport:
    seed: int
    guarantee: str
    engine: str
    commit_interval_ms: int
    fault_count: int
    duration_s: float
    records: int
    started: str = ""
    wall_s: float = 0.0
    scenarios: list[VerifyReport] = field(default_factory=list)
    verdict: str = "FAIL"

    def table_rows(self) -> list[tuple[str, ...]]:
        """One row per fault kind, each with its own numbers, then the overall verdict."""
        rows = [
            (s.fault, str(s.injected), str(s.records), str(s.duplicates), str(s.lost), s.verdict)
            for s in self.scenarios
        ]
        total = (
            "all",
            str(sum(s.injected for s in self.scenarios)),
            str(sum(s.records for s in self.scenarios)),
            str(sum(s.duplicates for s in self.scenarios)),
            str(sum(s.lost for s in self.scenarios)),
            self.verdict,
        )
        return [*rows, total]

    def summary(self) -> str:
        return "; ".join(s.summary() for s in self.scenarios) + f" => {self.verdict}"


def report_json(report: MatrixReport) -> str:
    return json.dumps(asdict(report), indent=2)


def _committed_total(bootstrap: str, group: str, topic: str) -> int:
    """Sum of the application's committed input offsets (grows with every commit)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=30))
    except Exception:
        return -1
    finally:
        consumer.close()


def run_matrix(
    *,
    seed: int = 1,
    guarantee: str = "exactly_once_v2",
    engine: str = "local",
    records: int = 6000,
    keys: int = 50,
    faults: tuple[str, ...] | None = None,
    fault_count: int = 3,
    commit_interval_ms: int = 500,
    duration_s: float = 30.0,
    spark_lease_ms: int = SPARK_LEASE_MS,
    bootstrap_servers: str | None = None,
    cluster: LocalKafka | None = None,
    work_dir: Path | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> MatrixReport:
    """Run one scenario per fault kind, ``fault_count`` faults each, ``records`` input records
    flowing for ``duration_s``.

    The scenarios share one three-broker cluster: ``cluster`` (a started :class:`LocalKafka`
    whose brokers may be killed), else a private one started here, or with
    ``bootstrap_servers`` someone else's cluster (then without ``kill-broker``).
    """
    if engine not in ENGINE_FAULTS:
        raise ValueError(f"unknown engine {engine!r}: use local or spark")
    faults = tuple(faults) if faults else DEFAULT_FAULTS[engine]
    unsupported = [f for f in faults if f not in ENGINE_FAULTS[engine]]
    if unsupported:
        raise ValueError(
            f"fault(s) {unsupported} do not apply to --engine {engine}: choose from "
            f"{', '.join(ENGINE_FAULTS[engine])}"
        )
    if fault_count < 0 or records < 1 or duration_s <= 0:
        raise ValueError("fault_count must be >= 0, records >= 1 and duration_s > 0")
    work = Path(work_dir or tempfile.mkdtemp(prefix="fluvial-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    matrix = MatrixReport(seed, guarantee, engine, commit_interval_ms, fault_count, duration_s,
                          records, started=datetime.now(UTC).isoformat(timespec="seconds"))  # fmt: skip
    began = time.monotonic()
    own_cluster = cluster is None and bootstrap_servers is None
    if cluster is not None:
        bootstrap_servers = cluster.bootstrap_servers
    elif bootstrap_servers is None:
        port = free_port()
        while not all(port_is_free(p) for p in (port + 1, port + 2)):
            port = free_port()
        cluster = LocalKafka(work / "kafka", port=port, brokers=3, heap="512m")
        progress("starting a three-broker Kafka")
        bootstrap_servers = cluster.start()
    elif "kill-broker" in faults:
        faults = tuple(f for f in faults if f != "kill-broker")  # not ours to kill
    try:
        for kind in faults:
            scenario = _Scenario(
                kind, cluster=cluster, bootstrap=bootstrap_servers, seed=seed,
                guarantee=guarantee, engine=engine, records=records, keys=keys,
                fault_count=fault_count, commit_interval_ms=commit_interval_ms,
                duration_s=duration_s, spark_lease_ms=spark_lease_ms, work=work / kind,
                progress=lambda msg, k=kind: progress(f"[{k}] {msg}"),
            )  # fmt: skip
            matrix.scenarios.append(scenario.run())
    finally:
        if own_cluster and cluster is not None:
            cluster.stop()
    clean = bool(matrix.scenarios) and all(s.verdict == "PASS" for s in matrix.scenarios)
    matrix.verdict = "PASS" if clean else "FAIL"
    matrix.wall_s = round(time.monotonic() - began, 1)
    return matrix


class _Scenario:
    """One fault kind: its own app id and topics, input flowing, faults, then the check."""

    def __init__(
        self, kind: str, *, cluster: LocalKafka | None, bootstrap: str, seed: int,
        guarantee: str, engine: str, records: int, keys: int, fault_count: int,
        commit_interval_ms: int, duration_s: float, spark_lease_ms: int, work: Path,
        progress: Callable[[str], None],
    ) -> None:  # fmt: skip
        self.kind, self.cluster, self.bootstrap = kind, cluster, bootstrap
        self.records, self.keys, self.fault_count = records, keys, fault_count
        self.duration_s, self.work, self.progress = duration_s, work, progress
        self.guarantee, self.engine = guarantee, engine
        # Seeded per kind: a scenario replays the same input and schedule whatever runs with it.
        self.rng = random.Random(f"{seed}:{kind}")
        self.report = VerifyReport(kind, seed, guarantee, engine, commit_interval_ms,
                                   requested=fault_count)  # fmt: skip
        run_id = uuid.uuid4().hex[:8]
        self.app_id = f"verify-{kind}-{run_id}"
        self.topics = {name: f"verify-{kind}-{name}-{run_id}" for name in ("input", "echo", "agg")}
        self.replication = 3 if cluster is not None else -1
        self.env = {
            "FLUVIAL_VERIFY_INPUT": self.topics["input"], "FLUVIAL_VERIFY_ECHO": self.topics["echo"],
            "FLUVIAL_VERIFY_AGG": self.topics["agg"], "FLUVIAL_VERIFY_APP_ID": self.app_id,
            "FLUVIAL_VERIFY_BOOTSTRAP": bootstrap, "FLUVIAL_VERIFY_GUARANTEE": guarantee,
            "FLUVIAL_VERIFY_COMMIT_MS": str(commit_interval_ms),
            "FLUVIAL_VERIFY_RF": str(self.replication),
        }  # fmt: skip
        if engine == "spark":
            extra = os.environ.get("FLUVIAL_SPARK_CONF", "")
            self.env["FLUVIAL_SPARK_LEASE_MS"] = str(spark_lease_ms)
            self.env["FLUVIAL_SPARK_CONF"] = ",".join(
                filter(None, [f"spark.driver.memory={SPARK_DRIVER_MEMORY}", extra])
            )
        self.apps: list[AppProcess] = []
        self.done_producing = threading.Event()
        self.producer_error: list[BaseException] = []

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> VerifyReport:
        began = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self._run()
        except Exception as error:  # one broken scenario must not hide the others' rows
            self.report.problems.append(f"the scenario stopped: {error!r}")
            self.report.verdict = "FAIL"
        finally:
            for app in self.apps:
                app.kill()
            self.report.wall_s = round(time.monotonic() - began, 1)
        self.progress(self.report.summary())
        return self.report

    def _start_app(self, state: str) -> AppProcess:
        app = AppProcess(self.env, self.engine, self.work, self.work / state).start()
        self.apps.append(app)
        return app

    def _committed(self) -> int:
        return _committed_total(self.bootstrap, self.app_id, self.topics["input"])

    def _run(self) -> None:
        create_topics(self.bootstrap, [
            TopicSpec(t, PARTITIONS, replication_factor=self.replication,
                      config={"min.insync.replicas": "2"} if self.replication == 3 else {})
            for t in self.topics.values()
        ])  # fmt: skip
        self.progress(f"starting the app ({self.engine} engine)")
        app = self._start_app("state-0")
        if not wait_for(lambda: app.ready() or not app.running(), RECOVERY_TIMEOUT_S):
            raise TimeoutError(f"the app did not start in {RECOVERY_TIMEOUT_S:g} s; see {app.log}")
        feeder = threading.Thread(target=self._produce, daemon=True)
        feeder.start()
        started = time.monotonic()
        mark = 0
        recovered: Callable[[], bool] = lambda: True  # noqa: E731
        for index in range(self.fault_count):
            self._wait_recovered(app, mark, recovered)
            # Spread over the input's duration; when behind schedule, a short random pause.
            due = (
                started + self.duration_s * (index + self.rng.uniform(0.3, 0.9)) / self.fault_count
            )
            pause = max(due - time.monotonic(), self.rng.uniform(0.1, 1.5))
            self.done_producing.wait(pause)
            if self.done_producing.is_set():
                self.report.problems.append(
                    f"only {index} of {self.fault_count} {self.kind} faults fit in "
                    f"{self.duration_s:g} s of input; raise --duration-s"
                )
                break
            if not app.running():
                self.report.problems.append(f"the app exited with {app.proc.returncode}"  # type: ignore[union-attr]
                                            f" before fault {index + 1}; see {app.log}")  # fmt: skip
                break
            mark = self._committed()
            self.progress(f"fault {index + 1}/{self.fault_count}: {self.kind}")
            app, recovered = self._inject(app, index)
            self.report.injected += 1
        self.done_producing.wait()
        feeder.join(10)
        if self.producer_error:
            raise self.producer_error[0]
        self.progress("input complete; waiting for the app to catch up")
        caught_up = wait_for(lambda: self._caught_up() or not app.running(), 300, 2.0)
        if not caught_up:
            self.report.problems.append(f"the app did not catch up within 300 s; see {app.log}")
        code = app.stop()
        if code not in (0, None):
            self.report.problems.append(f"the app exited with {code}; see {app.log}")
        self.report.task_retries = sum(
            a.task_retries() for a in {a.app_dir: a for a in self.apps}.values()
        )
        self.progress("verifying the committed output record by record")
        verify_outputs(self.bootstrap, self.topics["input"], self.topics["echo"],
                       self.topics["agg"], self.guarantee == "exactly_once_v2",
                       self.report)  # fmt: skip
        if self.report.injected < self.fault_count:
            self.report.verdict = "FAIL"  # it did not test what it was asked to

    def _wait_recovered(self, app: AppProcess, mark: int, recovered: Callable[[], bool]) -> None:
        """Until the app committed since the last fault and the fault's own recovery is seen:
        every fault then hits an app that is doing work, not one still starting up."""

        def done() -> bool:
            if self.done_producing.is_set() or not app.running():
                return True
            return recovered() and self._committed() > mark

        wait_for(done, RECOVERY_TIMEOUT_S, 0.3)

    def _produce(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "partitioner": "murmur2_random",
                                 "message.timeout.ms": 120000})  # fmt: skip
            started = time.monotonic()
            for n in range(self.records):
                key = f"k{self.rng.randrange(self.keys)}"
                value = self.rng.randint(-1000, 1000)
                producer.produce(
                    self.topics["input"], key=key.encode(), value=LONG.serialize(None, value)
                )
                producer.poll(0)
                # Paced by the clock, so input keeps flowing for duration_s whatever the faults.
                ahead = started + self.duration_s * (n + 1) / self.records - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            if producer.flush(120) != 0:
                raise RuntimeError("the input producer could not deliver every record")
        except BaseException as error:  # surfaced in the report
            self.producer_error.append(error)
        finally:
            self.done_producing.set()

    def _caught_up(self) -> bool:
        if self.guarantee != "exactly_once_v2":
            return self._consumed_everything()
        try:
            counts: dict[str, int] = defaultdict(int)
            for key, value, _p in read_committed(self.bootstrap, self.topics["agg"]):
                if value is not None:
                    counts[key] = max(counts[key], json.loads(value)["count"])
            return sum(counts.values()) >= self.records
        except Exception:
            return False

    def _consumed_everything(self) -> bool:
        """The app committed every input and repartition record it will ever see.

        At-least-once output may repeat, so aggregate counts can reach the input's size early;
        only committed offsets at the end of every source partition say the work is done.
        """
        try:
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            request = [ConsumerGroupTopicPartitions(self.app_id)]
            listed = admin.list_consumer_group_offsets(request)[self.app_id].result(30)
            committed = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions}
            sources = [self.topics["input"]] + [
                t for t in admin.list_topics(timeout=30).topics
                if t.startswith(self.app_id) and t.endswith("-repartition")
            ]  # fmt: skip
            reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.app_id})
            try:
                for topic in sources:
                    meta = reader.list_topics(topic, timeout=30).topics[topic]
                    for p in meta.partitions:
                        _low, high = reader.get_watermark_offsets(TopicPartition(topic, p), 10)
                        if committed.get((topic, p), 0) < high:
                            return False
            finally:
                reader.close()
            return True
        except Exception:
            return False

    # -- faults -------------------------------------------------------------------------------

    def _inject(self, app: AppProcess, index: int) -> tuple[AppProcess, Callable[[], bool]]:
        """Inject one fault; return the app now running and when it has recovered."""
        if self.kind == "kill-app":
            app.kill()
            # Alternate state dirs: half the restarts find local state, half restore it all.
            new = self._start_app(f"state-{(index + 1) % 2}")
            return new, lambda: new.ready() or not new.running()
        if self.kind == "zombie":
            return self._zombie(app, index), lambda: True
        if self.kind == "kill-broker":
            assert self.cluster is not None
            leader = self._leader_to_kill(index)
            self.progress(f"killing broker {leader}")
            self.cluster.kill_broker(leader)
            time.sleep(self.rng.uniform(2.0, 5.0))
            self.cluster.start_broker(leader)
            return app, lambda: True
        if self.kind == "kill-spark-worker":
            completed = app.completed_leases()
            self._kill_spark_worker(app)
            # One kill per completed lease: each kill costs its task one of Spark's attempts.
            return app, lambda: app.completed_leases() > completed or not app.running()
        raise ValueError(f"unknown fault {self.kind!r}")

    def _leader_to_kill(self, index: int) -> int:
        """The leader of an input partition: every other time the one that also coordinates
        the app's group (its transactional offset commits go there), else a random one."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        meta = admin.list_topics(self.topics["input"], timeout=30)
        leaders = [
            meta.topics[self.topics["input"]].partitions[p].leader for p in range(PARTITIONS)
        ]
        if index % 2 == 0:
            try:
                group = admin.describe_consumer_groups([self.app_id])[self.app_id].result(30)
                if group.coordinator.id in leaders:
                    return group.coordinator.id
            except Exception:  # no coordinator known yet: any leader will do
                pass
        return self.rng.choice(leaders)

    def _zombie(self, zombie: AppProcess, index: int) -> AppProcess:
        time.sleep(self.rng.uniform(0.05, 0.25))
        zombie.signal_group(signal.SIGSTOP)
        # The successor runs on "another machine" (state dir) and fences the zombie.
        successor = self._start_app(f"state-z{index}")
        wait_for(lambda: successor.ready() or not successor.running(), RECOVERY_TIMEOUT_S)
        time.sleep(self.rng.uniform(0.5, 2.0))
        zombie.signal_group(signal.SIGCONT)
        if zombie.proc is not None:
            try:
                zombie.proc.wait(60)  # fenced: it must stop on its own
            except subprocess.TimeoutExpired:
                self.report.problems.append("a fenced zombie kept running")
                zombie.kill()
        return successor

    def _kill_spark_worker(self, app: AppProcess) -> None:
        """``kill -9`` the PySpark Python worker running a slot (chosen at random)."""
        found: dict[int, int] = {}

        def slot_workers() -> bool:
            found.clear()
            found.update(app.slot_worker_pids())
            return bool(found) or not app.running()

        if not wait_for(slot_workers, 60, 0.1) or not found:
            raise RuntimeError(f"no live PySpark worker runs a slot; see {app.log}")
        slot = self.rng.choice(sorted(found))
        os.kill(found[slot], signal.SIGKILL)
        self.progress(f"killed PySpark worker {found[slot]} of slot {slot}")
