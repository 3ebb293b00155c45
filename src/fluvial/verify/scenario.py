"""One scenario of the fault matrix: one fault kind, its own app id and topics, input flowing,
the faults, then the record-by-record check.

A scenario counts faults, not seconds. Input keeps flowing until every requested fault has been
injected and its recovery seen (the app committed input after it, a killed broker is back in
sync), then for a tail of further records. Only the scenario's overall timeout can stop it
early, and then the error names what did not happen.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.local import LocalKafka
from fluvial.verify.check import (
    LONG,
    VerifyReport,
    bucket_finals,
    read_committed,
    verify_outputs,
)
from fluvial.verify.faults import AppProcess

PARTITIONS = 3
# Spark runs: a heap that leaves room for three brokers on a small machine.
SPARK_DRIVER_MEMORY = "512m"
# A scenario's default timeout: the input's own duration, start-up and the final catch-up, and
# a generous allowance per fault (a Spark driver restart alone takes up to 70 s on 2 cores).
TIMEOUT_BASE_S = 300.0
TIMEOUT_PER_FAULT_S = 120.0
# Records produced after the last fault's recovery, as a share of --records (at least 100), so
# the app works on fresh input after every fault, the last one included.
TAIL_SHARE, TAIL_MIN = 0.1, 100
Check = tuple[str, Callable[[], bool]]


def default_timeout_s(duration_s: float, fault_count: int) -> float:
    return duration_s + TIMEOUT_BASE_S + TIMEOUT_PER_FAULT_S * fault_count


class ScenarioTimeout(Exception):
    """The scenario's timeout passed before something it waits for happened."""


class Scenario:
    """One fault kind: its own app id and topics, input flowing, faults, then the check."""

    def __init__(
        self, kind: str, *, cluster: LocalKafka | None, bootstrap: str, seed: int,
        guarantee: str, engine: str, records: int, keys: int, fault_count: int,
        commit_interval_ms: int, duration_s: float, timeout_s: float, spark_lease_ms: int,
        work: Path, progress: Callable[[str], None],
        client_config: dict[str, str] | None = None, client_config_file: Path | None = None,
    ) -> None:  # fmt: skip
        self.kind, self.cluster, self.bootstrap = kind, cluster, bootstrap
        self.records, self.keys, self.fault_count = records, keys, fault_count
        self.duration_s, self.timeout_s = duration_s, timeout_s
        self.work, self.progress = work, progress
        self.guarantee, self.engine = guarantee, engine
        # Security settings of every client (librdkafka's), as `fluvial run` takes them.
        self.security = dict(client_config or {})
        # Seeded per kind: a scenario replays the same input and schedule whatever runs with it.
        # Two generators, as the input and the faults run in two threads.
        self.input_rng = random.Random(f"{seed}:{kind}")
        self.rng = random.Random(f"{seed}:{kind}:faults")
        self.report = VerifyReport(kind, seed, guarantee, engine, commit_interval_ms,
                                   requested=fault_count)  # fmt: skip
        run_id = uuid.uuid4().hex[:8]
        self.app_id = f"verify-{kind}-{run_id}"
        self.topics = {
            name: f"verify-{kind}-{name}-{run_id}" for name in ("input", "echo", "agg", "buckets")
        }
        self.replication = 3 if cluster is not None else -1
        self.env = {
            "FLUVIAL_VERIFY_INPUT": self.topics["input"], "FLUVIAL_VERIFY_ECHO": self.topics["echo"],
            "FLUVIAL_VERIFY_AGG": self.topics["agg"], "FLUVIAL_VERIFY_APP_ID": self.app_id,
            "FLUVIAL_VERIFY_BUCKETS": self.topics["buckets"],
            "FLUVIAL_VERIFY_BOOTSTRAP": bootstrap, "FLUVIAL_VERIFY_GUARANTEE": guarantee,
            "FLUVIAL_VERIFY_COMMIT_MS": str(commit_interval_ms),
            "FLUVIAL_VERIFY_RF": str(self.replication),
        }  # fmt: skip
        if client_config_file is not None:
            # The apps read the same file (a path on their command line, never a secret).
            self.env["FLUVIAL_KAFKA_CLIENT_CONFIG"] = str(Path(client_config_file).resolve())
        if engine == "spark":
            extra = os.environ.get("FLUVIAL_SPARK_CONF", "")
            self.env["FLUVIAL_SPARK_LEASE_MS"] = str(spark_lease_ms)
            self.env["FLUVIAL_SPARK_CONF"] = ",".join(
                filter(None, [f"spark.driver.memory={SPARK_DRIVER_MEMORY}", extra])
            )
        self.apps: list[AppProcess] = []
        # The scenario's own watchers poll while brokers are down on purpose: no log noise.
        self._quiet: dict[str, str | int | float | bool] = {
            **self.security, "bootstrap.servers": bootstrap, "log_level": 0
        }  # fmt: skip
        self.deadline = 0.0
        # The input: what was produced, what the brokers acknowledged (per key, in order).
        self.produced = 0
        self.sent: dict[str, list[int]] = defaultdict(list)
        self.faults_done = threading.Event()  # every fault injected and recovered from
        self.tail_until = 0  # ... and then input until this many records
        self.stop_input = threading.Event()  # the scenario is giving up
        self.done_producing = threading.Event()
        self.producer_error: list[BaseException] = []

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> VerifyReport:
        began = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        feeder = threading.Thread(target=self._produce, daemon=True)
        try:
            self._run(feeder)
        except ScenarioTimeout as error:
            self.report.problems.append(str(error))
            self.report.verdict = "FAIL"
        except Exception as error:  # one broken scenario must not hide the others' rows
            self.report.problems.append(f"the scenario stopped: {error!r}")
            self.report.verdict = "FAIL"
        finally:
            self.stop_input.set()
            if feeder.is_alive():
                feeder.join(150)
            for app in self.apps:
                app.kill()
            self.report.wall_s = round(time.monotonic() - began, 1)
        self.progress(self.report.summary())
        return self.report

    def _run(self, feeder: threading.Thread) -> None:
        self.deadline = time.monotonic() + self.timeout_s
        create_topics(self.bootstrap, admin_config=self.security, specs=[
            TopicSpec(t, PARTITIONS, replication_factor=self.replication,
                      config={"min.insync.replicas": "2"} if self.replication == 3 else {})
            for t in self.topics.values()
        ])  # fmt: skip
        self.progress(f"starting the app ({self.engine} engine)")
        app = self._start_app("state-0")
        self._await(app, "at start-up", [("the app reported it was running", app.ready)])
        feeder.start()
        started = time.monotonic()
        # Every fault hits an app that is doing work, not one still starting up.
        self._await(app, "before the first fault", [("a first commit", self._committed_some)])
        try:
            for index in range(self.fault_count):
                # Spread over --duration-s; once behind that, a short random pause.
                share = (index + self.rng.uniform(0.3, 0.9)) / self.fault_count
                pause = max(started + self.duration_s * share - time.monotonic(),
                            self.rng.uniform(0.1, 1.5))  # fmt: skip
                stage = f"fault {index + 1}/{self.fault_count} ({self.kind})"
                self._pause(app, pause, f"before {stage}")
                self.progress(stage)
                struck = time.monotonic()
                app, recovery = self._inject(app, index)
                self.report.injected += 1
                self._await(app, f"after {stage}", recovery)
                self.report.recovery_s.append(round(time.monotonic() - struck, 1))
                self.progress(f"{stage}: recovered in {self.report.recovery_s[-1]:g} s")
        finally:
            tail = max(TAIL_MIN, int(self.records * TAIL_SHARE))
            self.tail_until = self.produced + tail
            self.faults_done.set()
        self.progress(f"{self.report.injected} faults injected and recovered from; "
                      f"the input runs on for at least {tail} records")  # fmt: skip
        self._await(app, "at the end of the input",
                    [("the last input record delivered", self.done_producing.is_set)])  # fmt: skip
        feeder.join(10)
        if self.producer_error:
            raise self.producer_error[0]
        self.progress(f"input complete ({self.produced} records); waiting for the app to catch up")
        self._await(app, "after the input", [("the app caught up with the input",
                                              self._caught_up)], 2.0)  # fmt: skip
        code = app.stop()
        if code not in (0, None):
            self.report.problems.append(f"the app exited with {code} when stopped; see {app.log}")
        self.report.task_retries = sum(
            a.task_retries() for a in {a.app_dir: a for a in self.apps}.values()
        )
        self.progress("verifying the committed output record by record")
        verify_outputs(self.bootstrap, self.topics["input"], self.topics["echo"],
                       self.topics["agg"], self.guarantee == "exactly_once_v2",
                       self.report, sent=self.sent, client_config=self.security,
                       bucket_topic=self.topics["buckets"])  # fmt: skip
        if self.report.problems or self.report.injected < self.fault_count:
            self.report.verdict = "FAIL"

    def _start_app(self, state: str) -> AppProcess:
        app = AppProcess(self.env, self.engine, self.work, self.work / state).start()
        self.apps.append(app)
        return app

    # -- waiting for conditions, within the scenario's timeout ---------------------------------

    def _await(
        self, app: AppProcess, stage: str, checks: list[Check], interval_s: float = 0.5
    ) -> None:
        """Until every check has held, in their order. The app must stay up and the input keep
        flowing meanwhile; past the scenario's deadline, the error names the checks not seen."""
        pending = list(checks)
        while True:
            self._raise_if_broken(app, stage)
            while pending and pending[0][1]():
                pending.pop(0)
            if not pending:
                return
            if time.monotonic() >= self.deadline:
                missing = "; ".join(what for what, _holds in pending)
                raise ScenarioTimeout(
                    f"{stage}: not seen within the scenario's {self.timeout_s:g} s timeout: "
                    f"{missing}. See {app.log}; on a slow machine, raise --timeout-s"
                )
            time.sleep(interval_s)

    def _pause(self, app: AppProcess, seconds: float, stage: str) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._raise_if_broken(app, stage)
            self.done_producing.wait(min(left, 0.5))
        self._raise_if_broken(app, stage)

    def _raise_if_broken(self, app: AppProcess, stage: str) -> None:
        if self.producer_error:
            raise self.producer_error[0]
        if self.done_producing.is_set() and not self.faults_done.is_set():
            raise RuntimeError(f"the input stopped {stage}")
        if not app.running():
            code = app.proc.returncode if app.proc is not None else None
            raise RuntimeError(f"the app exited with {code} {stage}; see {app.log}")

    def _committed(self) -> int:
        """Sum of the application's committed input offsets (grows with every commit)."""
        consumer = Consumer({**self._quiet, "group.id": self.app_id})
        try:
            tps = [TopicPartition(self.topics["input"], p) for p in range(PARTITIONS)]
            return sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=30))
        except Exception:
            return -1
        finally:
            consumer.close()

    def _committed_some(self) -> bool:
        return self._committed() > 0

    def _committed_since(self) -> Check:
        """A check: the app commits input beyond what was committed when the check is first
        asked, that is once the checks before it have held."""
        mark: list[int] = []

        def committed_more() -> bool:
            if not mark:
                now = self._committed()
                if now >= 0:
                    mark.append(now)
                return False
            return self._committed() > mark[0]

        return "the app committed input after that", committed_more

    def _replicas_in_sync(self) -> bool:
        """Every partition on the cluster (the scenario's topics, the app's internal ones, the
        offsets and transaction logs) has all its replicas in sync again."""
        try:
            metadata = AdminClient(self._quiet).list_topics(timeout=10)
        except Exception:
            return False
        return all(
            topic.error is None and len(p.isrs) == len(p.replicas)
            for topic in metadata.topics.values()
            for p in topic.partitions.values()
        )

    # -- the input ----------------------------------------------------------------------------

    def _input_complete(self, started: float) -> bool:
        """At least --records records over at least --duration-s, and the faults' tail."""
        return self.stop_input.is_set() or (
            self.faults_done.is_set()
            and self.produced >= max(self.records, self.tail_until)
            and time.monotonic() - started >= self.duration_s
        )

    def _produce(self) -> None:
        topic = self.topics["input"]

        def delivered(key: str, value: int, error: KafkaError | None, _msg: Message) -> None:
            if error is not None:
                self.producer_error.append(RuntimeError(f"an input record was not delivered: "
                                                        f"{error}"))  # fmt: skip
            else:
                # Callbacks come in each partition's order, and a key stays on its partition.
                self.sent[key].append(value)

        try:
            producer = Producer({**self.security, "bootstrap.servers": self.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "partitioner": "murmur2_random",
                                 "message.timeout.ms": 120000})  # fmt: skip
            # Paced at --records per --duration-s, for as long as the faults need.
            rate = self.records / self.duration_s
            started = time.monotonic()
            while not self._input_complete(started):
                key = f"k{self.input_rng.randrange(self.keys)}"
                value = self.input_rng.randint(-1000, 1000)
                # Event times are the wall clock: the brokers' time retention goes by them.
                stamp = int(time.time() * 1000)
                while True:
                    try:
                        producer.produce(topic, key=key.encode(), value=LONG.serialize(None, value),
                                         timestamp=stamp, on_delivery=partial(delivered, key, value))  # fmt: skip
                        break
                    except BufferError:  # the brokers are away for long: wait for room
                        producer.poll(0.5)
                self.produced += 1
                producer.poll(0)
                ahead = started + self.produced / rate - time.monotonic()
                if ahead > 0:
                    self.stop_input.wait(ahead)
            if producer.flush(120) != 0:
                raise RuntimeError("the input producer could not deliver every record")
        except BaseException as error:  # surfaced by the scenario
            self.producer_error.append(error)
        finally:
            self.done_producing.set()

    def _caught_up(self) -> bool:
        if self.guarantee != "exactly_once_v2":
            return self._consumed_everything()
        try:
            counts: dict[str, int] = defaultdict(int)
            for key, value, _p in read_committed(self.bootstrap, self.topics["agg"], self.security):
                if value is not None:
                    counts[key] = max(counts[key], json.loads(value)["count"])
            if sum(counts.values()) < self.produced:
                return False
            buckets = bucket_finals(self.bootstrap, self.topics["buckets"], self.security)
            return sum(final.get("count", 0) for final in buckets.values()) >= self.produced
        except Exception:
            return False

    def _consumed_everything(self) -> bool:
        """The app committed every input and repartition record it will ever see.

        At-least-once output may repeat, so aggregate counts can reach the input's size early;
        only committed offsets at the end of every source partition say the work is done.
        """
        try:
            admin = AdminClient(self._quiet)
            request = [ConsumerGroupTopicPartitions(self.app_id)]
            listed = admin.list_consumer_group_offsets(request)[self.app_id].result(30)
            committed = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions}
            sources = [self.topics["input"]] + [
                t for t in admin.list_topics(timeout=30).topics
                if t.startswith(self.app_id) and t.endswith("-repartition")
            ]  # fmt: skip
            reader = Consumer({**self._quiet, "group.id": self.app_id})
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

    def _inject(self, app: AppProcess, index: int) -> tuple[AppProcess, list[Check]]:
        """Inject one fault; return the app now running and the checks, in order, that say it
        recovered. The last check is always a commit of input after the others held, so the
        next fault hits an app that is doing work again."""
        if self.kind == "kill-app":
            app.kill()
            # Alternate state dirs: half the restarts find local state, half restore it all.
            new = self._start_app(f"state-{(index + 1) % 2}")
            return new, [("the restarted app reported it was running", new.ready),
                         self._committed_since()]  # fmt: skip
        if self.kind == "zombie":
            return self._zombie(app, index), [self._committed_since()]
        if self.kind == "kill-broker":
            assert self.cluster is not None
            leader = self._leader_to_kill(index)
            self.progress(f"killing broker {leader}")
            self.cluster.kill_broker(leader)
            time.sleep(self.rng.uniform(2.0, 5.0))
            self.cluster.start_broker(leader)
            in_sync = f"broker {leader} back in sync on every partition"
            return app, [(in_sync, self._replicas_in_sync), self._committed_since()]
        if self.kind == "kill-spark-worker":
            leases = app.completed_leases()
            self._kill_spark_worker(app)
            # One kill per completed lease: each kill costs its task one of Spark's attempts.
            completed = ("a Spark lease completed", lambda: app.completed_leases() > leases)
            return app, [completed, self._committed_since()]
        raise ValueError(f"unknown fault {self.kind!r}")

    def _leader_to_kill(self, index: int) -> int:
        """The leader of an input partition: every other time the one that also coordinates
        the app's group (its transactional offset commits go there), else a random one."""
        admin = AdminClient({**self.security, "bootstrap.servers": self.bootstrap})
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
        self._await(successor, "before the zombie's SIGCONT",
                    [("the successor reported it was running", successor.ready)])  # fmt: skip
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
        """``kill -9`` the PySpark Python worker of a slot whose task is running (a slot chosen
        at random, at a random moment of the task), so that Spark retries the task."""
        found: dict[int, int] = {}

        def slot_workers() -> bool:
            found.clear()
            found.update(app.slot_worker_pids())
            return bool(found)

        while True:
            self._await(app, "before the worker kill",
                        [("a PySpark worker running a slot's task", slot_workers)], 0.1)  # fmt: skip
            slot = self.rng.choice(sorted(found))
            time.sleep(self.rng.uniform(0.0, 0.5))
            # Still that task's worker? Past a lease's end the next lease's start is awaited.
            if app.slot_worker_pids().get(slot) == found[slot]:
                break
        os.kill(found[slot], signal.SIGKILL)
        self.progress(f"killed PySpark worker {found[slot]} of slot {slot}")
