"""The Spark engine: a fluvial application's slots run as Spark tasks, one lease per Spark job.

The driver does what the local engine's driver does (internal topics, task plan, sticky slot
assignment, fencing stale slots) and then loops over *leases*: each lease is one Spark job
with one task per slot, and each task runs a slot's Worker for ``lease_seconds`` and ends on
a commit (see :mod:`fluvial.spark.slots`). Which slot a task runs, the driver decides as the
task starts: the one whose warm Worker the task's Python worker holds, if any
(:meth:`fluvial.spark.progress.LeaseProgress.place`). Between leases the driver re-reads the cluster's
cores, so slots follow executors that come or go, and a lease that failed is simply run again:
the new attempt fences the old one by the slot's transactional id and resumes from the last
commit.

The lease RDD is cached, one partition per slot: Spark prefers to run a task where its
partition's block is cached, so each slot returns to the executor that holds its local state.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluvial.compiled import announce
from fluvial.config import StreamsConfig
from fluvial.errors import ChangelogGapError, ConfigError, StreamsError
from fluvial.loader import load_app
from fluvial.metrics import WorkerMetrics, prometheus_text
from fluvial.processor.collector import TaskId
from fluvial.runtime.clients import check_client_settings
from fluvial.runtime.deployments import DeploymentPolicy
from fluvial.runtime.engine import (
    assign_slots,
    assign_standbys,
    check_commit_metadata,
    plan_tasks,
)
from fluvial.runtime.topics import ensure_internal_topics
from fluvial.spark.fencing import LeaseFencing, fatal_error
from fluvial.spark.progress import COUNTERS, LeaseProgress
from fluvial.spark.slots import AppSource, LeasePlan, LeaseResult, lease_partition
from fluvial.topology.topology import Topology

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import SparkSession

    from fluvial.iq.queries import KeyQueryMetadata, StoreView
    from fluvial.iq.spark_routing import RoutingQueryService
    from fluvial.spark.pack import Packed
    from fluvial.spark.views import DriverViews

log = logging.getLogger(__name__)

DEFAULT_LEASE_MS = 10_000
LEASE_MS_ENV = "FLUVIAL_SPARK_LEASE_MS"
SPARK_CONF_ENV = "FLUVIAL_SPARK_CONF"
# Attempts per slot task on local masters: local[N] alone means "never retry".
LOCAL_TASK_ATTEMPTS = 4
MAX_FAILED_LEASES = 5
#: JVM options of the engine's own Spark driver (see ``_start_spark``).
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


class SpeculationError(ConfigError):
    pass


def check_no_speculation(conf: dict[str, str]) -> None:
    """Refuse speculative execution: a speculative copy of a slot task is a zombie writer."""
    if str(conf.get("spark.speculation", "false")).strip().lower() == "true":
        raise SpeculationError(
            "spark.speculation=true would run a second copy of a slot task next to the first: "
            "two writers of one slot fence each other and waste the lease. Set "
            "spark.speculation=false for fluvial applications (slow slots are handled by "
            "fencing and retries instead)"
        )


def with_task_retries(master: str) -> str:
    """``local[N]`` never retries a failed task; ``local[N,F]`` does. Other masters retry."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if match is None:
        return master
    return f"local[{match.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


def spark_conf_from_env() -> dict[str, str]:
    """Extra Spark settings from ``FLUVIAL_SPARK_CONF="k=v,k2=v2"``."""
    raw = os.environ.get(SPARK_CONF_ENV, "")
    items = [part.strip() for part in raw.split(",") if part.strip()]
    return parse_spark_conf(items, where=SPARK_CONF_ENV)


def parse_spark_conf(items: list[str], *, where: str = "--spark-conf") -> dict[str, str]:
    """``KEY=VALUE`` settings (``fluvial run --spark-conf``, as ``spark-submit --conf``)."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"{where} entry {item!r} is not KEY=VALUE: write e.g. "
                "--spark-conf spark.executor.memory=2g"
            )
        conf[key.strip()] = value.strip()
    return conf


def lease_seconds_from_env() -> float:
    return int(os.environ.get(LEASE_MS_ENV, DEFAULT_LEASE_MS)) / 1000.0


class SparkApplication:
    """Runs an APP.py on Spark until stopped.

    ``spark`` is an existing SparkSession; without one the engine builds its own on
    ``master`` (and stops it on close). ``slots`` fixes the number of slots; by default it
    follows the cluster's cores, capped by the number of partitions to process.
    """

    def __init__(
        self,
        app_path: str | Path,
        config: StreamsConfig | None = None,
        *,
        spark: SparkSession | None = None,
        master: str = "local[*]",
        slots: int | None = None,
        lease_seconds: float | None = None,
        spark_conf: dict[str, str] | None = None,
        on_lease: Callable[[int, list[LeaseResult]], None] | None = None,
        python_env: Packed | None = None,
        deployment: DeploymentPolicy | None = None,
    ) -> None:
        self.app_path = Path(app_path)
        #: What the user said of this deployment's state (``--allow-state-loss``).
        self.deployment = deployment
        loaded = load_app(self.app_path)
        self.topology: Topology = loaded.topology
        self.config = config or loaded.config or StreamsConfig()
        extractor = self.config.default_timestamp_extractor
        if extractor is not None and (
            loaded.config is None or loaded.config.default_timestamp_extractor is None
        ):
            # Executors rebuild the app from APP.py; a function given only here cannot travel.
            raise ConfigError(
                f"default_timestamp_extractor must be set in {self.app_path.name}'s own "
                "config = StreamsConfig(...) on the Spark engine: executors take it from there"
            )
        self.master = master
        self.fixed_slots = slots
        self.lease_seconds = lease_seconds or lease_seconds_from_env()
        self.spark_conf = {**spark_conf_from_env(), **(spark_conf or {})}
        self.on_lease = on_lease
        #: A packed environment for executors without fluvial (``fluvial pack``), if any.
        self.python_env = python_env
        self._held_env: Any = None
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.task_ids: list[TaskId] = []
        self.run_id = uuid.uuid4().hex[:12]
        self._fencing = LeaseFencing(self.topology, self.config, self.run_id)
        self.leases = 0
        self.layout: dict[int, list[TaskId]] = {}
        #: Standby tasks per slot (``num_standby_replicas``), never on a task's active slot.
        self.standby_layout: dict[int, list[TaskId]] = {}
        self.generation = 0
        # Only the context is used: leases are RDD jobs. Without a session of the user's, the
        # engine starts a bare context (no Spark SQL set-up to pay for).
        self._context: SparkContext | None = spark.sparkContext if spark is not None else None
        self._owns_spark = spark is None
        self._rdd: RDD[int] | None = None
        self._source_broadcast: Any = None
        self._expected: dict[int, str] = {}
        self._slot_metrics: dict[int, WorkerMetrics] = {}
        # Each task's counters over every lease, slot and Worker that ran it: tasks move
        # between slots and executors, and what each ran of them adds up.
        self._task_totals: dict[str, dict[str, int]] = {}
        #: Where each slot answered interactive queries in its last lease.
        self.query_endpoints: dict[int, str] = {}
        self._failed_in_a_row = 0
        #: Live reports of the lease in flight (fluvial.spark.progress), and which lease that is.
        self._progress: LeaseProgress | None = None
        self._in_flight: int | None = None
        #: Records behind the ends of the input partitions, per slot, read from the broker
        #: before the first lease: the status line has a true lag before any slot reports.
        self._initial_lag: dict[tuple[str, int], int] = {}
        self._lag_known: set[int] = set()
        self._source_topics: dict[int, list[str]] = {}
        self._metrics_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._lease_log = Path(self.config.state_dir) / self.config.application_id / "leases.jsonl"
        self._router: RoutingQueryService | None = None
        self._views: DriverViews | None = None
        from fluvial.iq.server import TOKEN_ENV  # uvicorn: imported by drivers only

        # The slots' query endpoints require the driver's token: it travels with each lease.
        self._serve_token = os.environ.get(TOKEN_ENV) or None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def job_group(self) -> str:
        return f"fluvial-{self.config.application_id}"

    @property
    def sc(self) -> SparkContext:
        assert self._context is not None, "start() first"
        return self._context

    @property
    def ui_url(self) -> str | None:
        """The Spark UI's address, when it is on."""
        if self._context is None:
            return None
        return self.sc.uiWebUrl

    def start(self) -> None:
        """Check the settings and topics, then start Spark while the driver fences the slots
        of an earlier run and creates the internal topics; then run leases."""
        check_no_speculation(self.spark_conf)  # before paying for a JVM
        check_client_settings(self.config)
        announce()  # one line when the engine runs interpreted (once: `fluvial run` may have)
        # Spark's JVM takes seconds to start: it starts beside the driver's own checks and
        # preparations. A check that fails stops the run at once; the JVM is stopped behind
        # it (and exits with this process in any case).
        starting = _Background(self._start_spark) if self._context is None else None
        try:
            check_commit_metadata(self.topology, self.config)
            # Every user topic checked (sources, outputs, co-partitioning), the deployment
            # compared with the last one, internal topics made: a mistake stops the run here,
            # before any slot runs. Executors rebuild the topology with the same carried-over
            # internal topics (AppSource.internal_names).
            plan = ensure_internal_topics(self.topology, self.config, self.deployment)
            self.topology = plan.topology or self.topology
            self.task_ids = plan_tasks(self.topology, self.config, plan)
            self._source_topics = {
                sub.id: list(sub.source_topics)
                for sub in self.topology.subtopologies(self.config.application_id)
            }
            # Read while Spark starts: the lag is there before the first slot reports.
            threading.Thread(target=self._read_initial_lag, name="fluvial-initial-lag",
                             daemon=True).start()  # fmt: skip
            self._fencing.claim()
        except BaseException:
            if starting is not None:
                starting.discard(lambda sc: sc.stop())
            raise
        if starting is not None:
            self._context = starting.result()
        check_no_speculation(dict(self.sc.getConf().getAll()))
        host = self.sc.getConf().get("spark.driver.host") or "127.0.0.1"
        self._progress = LeaseProgress(host, self.stop_event)
        self._source_broadcast = self.sc.broadcast(
            AppSource.read(self.app_path, self.topology.internal_names())
        )
        self._relayout(initial=True)
        self._thread = threading.Thread(target=self._run, name="fluvial-leases", daemon=True)
        self._thread.start()

    def _start_spark(self) -> SparkContext:
        from fluvial.spark.session import local_spark_context

        # Python workers must import fluvial: run them with this interpreter (its
        # virtualenv), not whatever "python3" comes first on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        conf = {
            "spark.task.maxFailures": str(LOCAL_TASK_ATTEMPTS),
            # Spark's UI is on, on a port free at the time (0: the OS picks one), and its
            # link is printed when the application starts (``ui_url``).
            "spark.ui.enabled": "true",
            "spark.ui.port": "0",
        }
        if self.master.strip().startswith("local"):
            # Python workers fork from a daemon that has fluvial imported already: the first
            # lease does not wait for every worker to import it.
            conf["spark.python.daemon.module"] = "fluvial.spark.daemon"
        conf.update(self.spark_conf)
        # The engine's JVM schedules leases and carries their results (on a local master it
        # runs the executors too); the slots' records go between Python and Kafka directly.
        # Without the optimizing JIT it starts in about half the CPU time. A user's own
        # options come after these, and win.
        own = self.spark_conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{DRIVER_JAVA_OPTIONS} {own}".strip()
        if self.python_env is not None:
            # Executors unpack the archive into their working directory and run its
            # Python: Spark sends the driver's PYSPARK_PYTHON with every task.
            from fluvial.spark.pack import shipping_conf

            conf.update(shipping_conf(self.python_env, conf))
            self._held_env = self.python_env.hold()
            os.environ["PYSPARK_PYTHON"] = self.python_env.executor_python
        return local_spark_context(
            with_task_retries(self.master),
            app_name=f"fluvial {self.config.application_id}",
            extra_conf=conf,
        )

    def _read_initial_lag(self) -> None:
        """The lag of every input partition: its end minus the application's committed offset
        (its start when nothing was committed), as the broker has them now."""
        from confluent_kafka import Consumer, TopicPartition

        from fluvial.runtime.clients import consumer_settings

        tps = sorted({(topic, task.partition) for task in self.task_ids
                      for topic in self._source_topics.get(task.subtopology, [])})  # fmt: skip
        try:
            consumer = Consumer(consumer_settings(self.config, client_suffix="-lag"))
            try:
                committed = {
                    (tp.topic, tp.partition): tp.offset
                    for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
                }
                lag = {}
                for topic, partition in tps:
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                               timeout=10)  # fmt: skip
                    position = committed.get((topic, partition), -1)
                    lag[(topic, partition)] = max(0, high - (position if position >= 0 else low))
            finally:
                consumer.close()
        except Exception as error:  # the status line only: the slots measure their own
            log.info("cannot read the input lag before the first lease: %s", error)
            return
        with self._metrics_lock:
            self._initial_lag = lag

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.run_lease()
        except BaseException as error:  # reported by the runner; stops the application
            if isinstance(error, StreamsError):  # says what happened: no traceback needed
                log.error("the Spark engine stopped: %s", error)
            else:
                log.exception("the Spark engine stopped")
            self.errors.append(error)
            self.stop_event.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout_s: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return not self.running

    def close(self, timeout_s: float | None = None) -> None:
        """Let the current lease end on its commit, then stop (and stop Spark if ours)."""
        self.stop_event.set()
        self.wait(timeout_s)
        if self.running and self._context is not None:
            self.sc.cancelJobGroup(self.job_group)
            self.wait(30)
        if self._rdd is not None:
            if not self._owns_spark:  # a context of our own goes as a whole, below
                self._rdd.unpersist()
            self._rdd = None
        if self._owns_spark and self._context is not None:
            self._context.stop()
            self._context = None
        if self._held_env is not None:
            self._held_env.close()
            self._held_env = None
        if self._views is not None:
            self._views.close()
            self._views = None
        self._fencing.close()
        if self._progress is not None:
            self._progress.close()
            self._progress = None

    def cancel(self) -> None:
        """Stop at once: the current lease is killed; the next run resumes from the last commit."""
        self.stop_event.set()
        if self._context is not None:
            self.sc.cancelJobGroup(self.job_group)

    def raise_if_failed(self) -> None:
        if self.errors:
            error = self.errors[0]
            raise error if isinstance(error, StreamsError) else StreamsError(str(error))

    # -- leases -----------------------------------------------------------------------------

    def desired_slots(self) -> int:
        """About one slot per executor core, never more than there are partition numbers."""
        cores = self.fixed_slots or self._total_cores()
        partitions = len({t.partition for t in self.task_ids})
        return max(1, min(cores, partitions))

    def _total_cores(self) -> int:
        jsc = self.sc._jsc.sc()  # type: ignore[attr-defined]
        try:
            # Cluster backends count the cores of live executors; defaultParallelism would
            # never report fewer than 2.
            return max(1, int(jsc.schedulerBackend().totalCoreCount().get()))
        except Exception:
            return max(1, int(jsc.defaultParallelism()))

    def _relayout(self, *, initial: bool = False) -> None:
        slots = self.desired_slots()
        if not initial and slots == len(self.layout):
            return
        if not initial:
            log.warning("slots: %d -> %d (cluster cores changed)", len(self.layout), slots)
        self._fencing.layout(slots, initial=initial)
        self.layout = assign_slots(self.task_ids, slots)
        replicas = self.config.num_standby_replicas
        if replicas and replicas > slots - 1:
            log.warning("num_standby_replicas=%d, but %d slot(s) keep at most %d standby(s) of a "
                        "task: a standby never runs on its task's own slot",
                        replicas, slots, slots - 1)  # fmt: skip
        self.standby_layout = assign_standbys(self.layout, replicas)
        self.generation += 1
        self._expected = {}
        if self._rdd is not None:
            self._rdd.unpersist()
        # One cached partition per slot: its block stays on the executor that ran it first,
        # and Spark's locality preference brings the task back there every lease; there the
        # driver places it on a slot one of the executor's Python workers holds warm.
        self._rdd = self.sc.parallelize(range(slots), slots).cache()

    def run_lease(self, *, final: bool = False) -> list[LeaseResult]:
        """Run one lease of every slot as one Spark job; return what each slot reported."""
        assert self._rdd is not None
        self._relayout()
        self._fencing.before_lease(len(self.layout))  # a driver a newer one fenced stops here
        self.leases += 1
        plan = LeasePlan(
            run_id=self.run_id,
            generation=self.generation,
            lease=self.leases,
            lease_seconds=self.lease_seconds,
            config=self.config.with_overrides(default_timestamp_extractor=None),
            slots=self.layout,
            expected=dict(self._expected),
            final=final,
            standbys=self.standby_layout,
            serve_token=self._serve_token,
            progress_address=self._progress.address if self._progress else None,
            progress_token=self._progress.token if self._progress else None,
            timestamp_extractor_from_app=self.config.default_timestamp_extractor is not None,
        )
        self.sc.setJobGroup(
            self.job_group,
            f"fluvial {self.config.application_id}: lease {self.leases}, "
            f"{len(self.layout)} slot(s) x {self.lease_seconds:g} s",
            interruptOnCancel=True,
        )
        started = time.monotonic()
        self._in_flight = self.leases
        if self._progress is not None:
            self._progress.begin_lease(self.leases, sorted(self.layout))
        try:
            results: list[LeaseResult] = self._rdd.mapPartitionsWithIndex(
                partial(lease_partition, plan, self._source_broadcast)
            ).collect()
        except Exception as error:
            with self._metrics_lock:
                # What the lease's attempts did before it failed still counts (a counter never
                # goes down): the slots' last reports are all that is left of it.
                for slot in self.layout:
                    self._add_counters(slot, self._earlier_attempts(slot, None))
                self._in_flight = None
            if self.stop_event.is_set():
                return []
            self._lease_failed(error)
            return []
        self._failed_in_a_row = 0
        ran = sorted(result.slot for result in results)
        if ran != sorted(self.layout):
            # Only when a task could not ask the driver for its slot while another could.
            log.warning("lease %d ran slots %s, not each of %s once: the missing ones run in "
                        "the next lease", self.leases, ran, sorted(self.layout))  # fmt: skip
        fatal = fatal_error(results)
        if fatal is not None:  # a missing ACL, a newer driver: no lease can mend it
            self._append_log({"lease": self.leases, "failed": str(fatal)[:300]})
            raise fatal
        with self._metrics_lock:
            for result in results:
                self._expected[result.slot] = result.incarnation
                self._record(result)
                if result.query_endpoint:
                    self.query_endpoints[result.slot] = result.query_endpoint
            self._in_flight = None
        self._log_lease(results, time.monotonic() - started)
        if self.on_lease is not None:
            self.on_lease(self.leases, results)
        return results

    def _lease_failed(self, error: Exception) -> None:
        # Spark already retried each slot task; a lease that still failed is run again from
        # the last commit, with fresh Workers, after a pause.
        self._failed_in_a_row += 1
        self._expected = {}
        summary = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        log.warning("lease %d failed (%d in a row): %s", self.leases, self._failed_in_a_row,
                    summary[:300])  # fmt: skip
        self._append_log({"lease": self.leases, "failed": summary[:300]})
        gap = _changelog_gap(str(error))
        if gap is not None:
            # A changelog lost records a store needs: another lease would fail the same way.
            # Counted on the driver: the failed lease's own metrics never came back.
            first = min(self.layout, default=0)
            self._slot_metrics.setdefault(first, WorkerMetrics(first)).restore_gaps += 1
            raise ChangelogGapError(gap)
        if self._failed_in_a_row >= MAX_FAILED_LEASES:
            raise StreamsError(
                f"{MAX_FAILED_LEASES} leases in a row failed; the last error: {summary[:2000]}"
            )
        time.sleep(min(10.0, 1.0 * self._failed_in_a_row))

    def _earlier_attempts(self, slot: int, attempt: int | None) -> dict[str, float]:
        if self._progress is None:
            return {}
        return self._progress.earlier_attempts(slot, self.leases, attempt)

    def _add_counters(self, slot: int, counters: dict[str, float]) -> None:
        metrics = self._slot_metrics.setdefault(slot, WorkerMetrics(slot))
        for name, value in counters.items():
            setattr(metrics, name, type(getattr(metrics, name))(getattr(metrics, name) + value))

    def _record(self, result: LeaseResult) -> None:
        metrics = self._slot_metrics.setdefault(result.slot, WorkerMetrics(result.slot))
        # Attempts Spark ran again within the lease counted too, as they last reported.
        self._add_counters(result.slot, self._earlier_attempts(result.slot, result.attempt))
        for task, counts in result.task_metrics.items():
            totals = self._task_totals.setdefault(task, {})
            for name, count in counts.items():
                totals[name] = totals.get(name, 0) + count
        for name, value in result.metrics.items():
            if name in ("lag", "standby_lag", "stores_to_restore", "stores_restored"):
                setattr(metrics, name, int(value))
            elif name == "commit_latency_max_s":
                metrics.commit_latency_max_s = max(metrics.commit_latency_max_s, value)
            elif name == "commit_latency_total_s":
                metrics.commit_latency_total_s += value
            else:
                setattr(metrics, name, getattr(metrics, name) + int(value))
        metrics.standby_lags = result.standby_lags
        self._lag_known.add(result.slot)

    def _log_lease(self, results: list[LeaseResult], seconds: float) -> None:
        self._append_log(
            {
                "lease": self.leases,
                "generation": self.generation,
                "seconds": round(seconds, 3),
                "slots": [
                    {
                        "slot": r.slot,
                        "partition": r.partition,
                        "host": r.host,
                        "pid": r.pid,
                        "python": r.python,
                        "incarnation": r.incarnation,
                        "attempt": r.attempt,
                        "reused": r.reused,
                        "start_s": round(r.start_seconds, 3),
                        "began": round(r.began, 3),
                        "restored": int(r.metrics.get("restored", 0)),
                        "processed": int(r.metrics.get("records_processed", 0)),
                    }
                    for r in sorted(results, key=lambda r: r.slot)
                ],
            }
        )

    def _append_log(self, entry: dict[str, Any]) -> None:
        """One JSON line per lease in ``<state_dir>/<application_id>/leases.jsonl``."""
        self._lease_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lease_log, "a") as handle:
            handle.write(json.dumps({"run": self.run_id, "t": time.time(), **entry}) + "\n")

    # -- metrics ----------------------------------------------------------------------------

    @property
    def workers(self) -> list[int]:
        return sorted(self.layout)

    def metrics(self) -> list[WorkerMetrics]:
        """Every slot's metrics: the leases that ended, plus what the lease in flight has
        reported so far, plus the lag read from the broker until a slot measures its own."""
        with self._metrics_lock:
            lease = self._in_flight
            slots = sorted(set(self._slot_metrics) | set(self.layout))
            found = []
            for slot in slots:
                metrics = copy.deepcopy(self._slot_metrics.get(slot) or WorkerMetrics(slot))
                metrics.task_metrics = {
                    str(task): dict(self._task_totals[str(task)])
                    for task in self.layout.get(slot, [])
                    if str(task) in self._task_totals
                }
                live = self._progress.current(slot, lease) if self._progress and lease else None
                if live is not None:
                    _add_live(metrics, live)
                    if live.get("lag_known"):
                        self._lag_known.add(slot)
                if slot not in self._lag_known:
                    metrics.lag = sum(
                        self._initial_lag.get((topic, task.partition), 0)
                        for task in self.layout.get(slot, [])
                        for topic in self._source_topics.get(task.subtopology, [])
                    )
                found.append(metrics)
            return found

    def prometheus_metrics(self) -> str:
        return prometheus_text(self.config.application_id, self.metrics())

    # -- interactive queries (routed to the slots: fluvial.iq.spark_routing) -------------------

    @property
    def router(self) -> RoutingQueryService:
        """The driver's query router, which ``--serve`` and :meth:`store` both use."""
        if self._router is None:
            from fluvial.iq.spark_routing import RoutingQueryService

            self._router = RoutingQueryService(
                self.topology, self.config.application_id,
                task_ids=lambda: self.task_ids, layout=lambda: self.layout,
                reported=lambda: self.query_endpoints, standbys=lambda: self.standby_layout,
                slots_dir=Path(self.config.state_dir) / self.config.application_id / ".slots",
                exactly_once=self.config.exactly_once,
                running=lambda: not self.stop_event.is_set(),
            )  # fmt: skip
        return self._router

    def store(self, name: str, *, isolation: str | None = None) -> StoreView:
        """A read-only view of a running store, as the local engine's ``Application.store``:
        each read is routed to the executor that holds the key's task."""
        return self._driver_views().store(name, isolation=isolation)

    def query_metadata_for_key(self, store: str, key: object) -> KeyQueryMetadata:
        """Which partition, task and slot own ``key`` of ``store``, and where its standbys are."""
        return self._driver_views().metadata_for_key(store, key)

    def _driver_views(self) -> DriverViews:
        if self._views is None:
            from fluvial.spark.views import DriverViews

            self._views = DriverViews(self.router, lambda: self.task_ids)
        return self._views


class _Background:
    """A call running in a thread of its own, for its result later."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._outcome: list[Any] = []
        self._failure: list[BaseException] = []

        def run() -> None:
            try:
                self._outcome.append(call())
            except BaseException as error:
                self._failure.append(error)

        self._thread = threading.Thread(target=run, name="fluvial-spark-start", daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join()
        if self._failure:
            raise self._failure[0]
        return self._outcome[0]

    def discard(self, release: Callable[[Any], None]) -> None:
        """Not needed after all: release the result once it is there, without waiting."""

        def wait() -> None:
            self._thread.join()
            if self._outcome:
                release(self._outcome[0])

        threading.Thread(target=wait, name="fluvial-spark-discard", daemon=True).start()


def _add_live(metrics: WorkerMetrics, live: dict[str, float]) -> None:
    """Add what a slot reported of the lease in flight to the metrics of the leases before."""
    for name in COUNTERS:
        setattr(
            metrics, name, type(getattr(metrics, name))(getattr(metrics, name) + live.get(name, 0))
        )
    if live.get("lag_known"):
        metrics.lag = int(live.get("lag", 0))
    metrics.commit_latency_max_s = max(metrics.commit_latency_max_s,
                                       live.get("commit_latency_max_s", 0.0))  # fmt: skip
    metrics.stores_to_restore = int(live.get("stores_to_restore", metrics.stores_to_restore))
    metrics.stores_restored = int(live.get("stores_restored", metrics.stores_restored))


def _changelog_gap(text: str) -> str | None:
    """The message of a :class:`ChangelogGapError` raised inside a slot task, if there was one."""
    marker = f"{ChangelogGapError.__name__}: "
    at = text.find(marker)
    if at < 0:
        return None
    return text[at + len(marker) :].splitlines()[0]
