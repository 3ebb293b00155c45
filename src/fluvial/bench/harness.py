"""One benchmark run, start to finish: topics, input, the system's process, measurements.

Throughput mode pre-loads the input, starts the system and times it from its first write (its
first output, repartition or changelog record: the first consumed record has been processed by
then) until its committed input offsets reach the end of the input. Under both guarantees a
committed offset means the results of every record before it are durable (in the same
transaction, or acknowledged before the commit), so that is "the last result committed".

Latency mode starts the system first, then produces at a fixed rate with the current time as
each record's timestamp, and a read_committed consumer records when each result appears.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer

from fluvial import children
from fluvial.bench.measure import (
    LatencyReader,
    ProcessTree,
    Progress,
    count_committed,
    percentile,
)
from fluvial.bench.systems import RunSpec, System, child_env, spark_progress
from fluvial.bench.workloads import (
    CATEGORIES,
    PERIODS,
    WORKLOADS,
    generate_input,
    generate_table,
    view_value,
)
from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, admin_client, create_topics

BENCH_BROKER_HEAP = "1g"
STOP_TIMEOUT_S = 60.0
# Workloads with a repartition topic: their input is committed before their last hop is.
MULTI_HOP = {"figure2"}


class Pinning:
    """Which CPUs the system under test runs on, and which the broker and the harness use.

    On a machine of two or more CPUs with ``taskset``, the system under test gets CPU 0 and the
    private broker (every thread) and the harness's own producer and monitor get the others, so
    that the system's CPU time is its own work and not the broker's, and neither steals the
    other's core. Otherwise nothing is pinned and the report says so.
    """

    def __init__(self) -> None:
        self.taskset = shutil.which("taskset")
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.active = self.taskset is not None and len(cpus) >= 2
        self.app_cpus = str(cpus[0]) if self.active else ""
        self.other_cpus = ",".join(str(c) for c in cpus[1:]) if self.active else ""
        self.broker_pinned = False

    def pin_process(self, pid: int) -> None:
        """Move every thread of ``pid`` to the CPUs beside the system under test's."""
        if self.active:
            children.run(
                [self.taskset, "-a", "-p", "-c", self.other_cpus, str(pid)],
                check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started on the system under test's CPU (its children inherit it)."""
        return [self.taskset, "-c", self.app_cpus, *cmd] if self.active else cmd

    def describe(self) -> dict[str, Any]:
        if not self.active:
            return {"pinned": False, "reason": "needs taskset and at least 2 CPUs"}
        return {
            "pinned": True,
            "system_cpus": self.app_cpus,
            "broker_cpus": self.other_cpus if self.broker_pinned else "not pinned (external)",
            "harness_cpus": self.other_cpus,
        }


PINNING = Pinning()


@contextlib.contextmanager
def kafka(bootstrap_servers: str | None = None) -> Iterator[str]:
    """The given cluster, or a private local Kafka on a free port in a temporary directory."""
    # The harness's own threads (pre-loading producer, monitor) stay off the system's CPU.
    PINNING.pin_process(os.getpid())
    if bootstrap_servers:
        yield bootstrap_servers
        return
    with (
        tempfile.TemporaryDirectory(prefix="fluvial-bench-kafka-") as data_dir,
        LocalKafka(data_dir, port=free_port(), heap=BENCH_BROKER_HEAP) as cluster,
    ):
        pid = cluster.pid(1)
        if pid is not None:
            PINNING.pin_process(pid)
            PINNING.broker_pinned = PINNING.active
        yield cluster.bootstrap_servers


def new_spec(
    workload: str,
    *,
    system: str,
    records: int,
    partitions: int,
    guarantee: str,
    commit_ms: int,
    bootstrap: str,
    work_root: Path,
    spark_master: str = "local[2]",
    profile_dir: Path | None = None,
    client_config: dict[str, str] | None = None,
    client_config_file: Path | None = None,
    cache_max_bytes: int = 0,
    catch_up_completeness: bool = True,
) -> RunSpec:
    token = uuid.uuid4().hex[:8]
    base = f"bench-{workload}-{system}-{token}"
    work_dir = work_root / base
    work_dir.mkdir(parents=True, exist_ok=True)
    return RunSpec(
        workload=workload,
        records=records,
        partitions=partitions,
        guarantee=guarantee,
        commit_ms=commit_ms,
        bootstrap=bootstrap,
        input_topic=f"{base}-views",
        output_topic=f"{base}-out",
        table_topic=f"{base}-users" if WORKLOADS[workload].has_table else "",
        app_id=base,
        work_dir=work_dir,
        spark_master=spark_master,
        profile_to=(profile_dir / f"{base}.txt") if profile_dir else None,
        client_config=dict(client_config or {}),
        client_config_file=client_config_file,
        cache_max_bytes=cache_max_bytes,
        catch_up_completeness=catch_up_completeness,
    )


def _create_topics(spec: RunSpec) -> dict[str, int]:
    """Create the run's topics; returns the input topics and their partition counts."""
    inputs = {spec.input_topic: spec.partitions}
    if spec.table_topic:
        inputs[spec.table_topic] = spec.partitions
    create_topics(
        spec.bootstrap,
        [TopicSpec(t, n) for t, n in inputs.items()]
        + [TopicSpec(spec.output_topic, spec.partitions)],
        admin_config=spec.client_config,
    )
    return inputs


def _unsupported_security(system: System, spec: RunSpec) -> str | None:
    """The peers take their Kafka settings in forms of their own (some on a command line, where
    a password would show): on a secured cluster only fluvial runs."""
    from fluvial.kafka.security import is_secured

    if is_secured(spec.client_config) and not system.name.startswith("fluvial"):
        return "peers run on plain clusters only; client security settings are for fluvial"
    return None


def _producer(bootstrap: str, *, linger_ms: int, settings: dict[str, str]) -> Producer:
    return Producer(
        {
            **settings,
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            # Kafka's Java partitioner: every system sees keys where a Java producer puts them.
            "partitioner": "murmur2_random",
            "linger.ms": linger_ms,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def preload(spec: RunSpec) -> int:
    """Write the table rows (if any) and the stream input; returns how many records in all."""
    producer = _producer(spec.bootstrap, linger_ms=20, settings=spec.client_config)
    base_ms = int(time.time() * 1000) - 10 * spec.records - 60_000
    total = 0
    for row in generate_table(spec.workload, base_ms=base_ms):
        producer.produce(spec.table_topic, row.value, row.key, timestamp=row.timestamp_ms)
        total += 1
    producer.flush(60)
    for record in generate_input(spec.workload, spec.records, base_ms=base_ms):
        while True:
            try:
                producer.produce(
                    spec.input_topic, record.value, record.key, timestamp=record.timestamp_ms
                )
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
        total += 1
    if producer.flush(120) != 0:
        raise RuntimeError("pre-loading the input did not finish within 120 s")
    return total


class Launched:
    """The system's process tree, sampled from launch to stop."""

    def __init__(self, system: System, spec: RunSpec) -> None:
        cmd, env = system.command(spec)
        self.log_path = spec.work_dir / f"{system.name}.log"
        self.launched_at = time.time()
        with open(self.log_path, "wb") as log:
            # A session of its own, so that stopping it reaches every process it started
            # (Spark's JVM and Python workers) and nothing else.
            self.proc = children.popen(
                PINNING.wrap(cmd), **child_env(env), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=spec.work_dir,
            )  # fmt: skip
        self.tree = ProcessTree(self.proc.pid)
        self.tree.start()
        self.profiler = None
        if spec.profile_to is not None:
            # Attached from outside the tree: py-spy samples every thread of the process and
            # writes its stacks when the process exits. Its own CPU is not counted. --native
            # shows the compiled engine's functions, which are otherwise folded into their
            # interpreted caller, and librdkafka's and CPython's own C frames.
            beside = Path(sys.executable).parent / "py-spy"
            spy = str(beside) if beside.exists() else shutil.which("py-spy")
            if spy is None:
                raise RuntimeError("--profile needs py-spy: run 'uv sync --group bench'")
            spec.profile_to.parent.mkdir(parents=True, exist_ok=True)
            self.profiler = children.popen(
                [spy, "record", "--pid", str(self.proc.pid), "--native", "--format", "raw", "--rate", "200",
                 "--output", str(spec.profile_to)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM (every system here commits and stops on it), then SIGKILL after a while."""
        self.tree.sample()  # after the measured end, whatever the sampler's pace
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of its own session only
        code = self.proc.wait(10)
        self.tree.stop()
        if self.profiler is not None:
            self.profiler.wait(60)
        return code

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _delete_topics(spec: RunSpec, app_prefix: str) -> None:
    """Remove the run's topics and the system's internal ones: a matrix fills no disk."""
    delete_topics_of(spec.bootstrap, [app_prefix], spec.client_config)


def delete_topics_of(
    bootstrap: str, prefixes: list[str], client_config: dict[str, str] | None = None
) -> None:
    """Delete every topic whose name starts with one of ``prefixes`` (application ids)."""
    admin = admin_client(bootstrap, **(client_config or {}))
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(tuple(prefixes))]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result()


def base_result(system: System, spec: RunSpec, mode: str) -> dict[str, Any]:
    return {
        "system": system.label(spec),
        "workload": spec.workload,
        "mode": mode,
        "guarantee": spec.guarantee,
        "commit_interval_ms": spec.commit_ms,
        "records": spec.records,
        "partitions": spec.partitions,
        "version": system.version(),
        "config": system.config(spec),
        "pinning": PINNING.describe(),
        # The machine is often shared: the load beside each run says how far to trust it.
        "load_average": list(os.getloadavg()),
        "status": "ok",
    }


def run_throughput(system: System, spec: RunSpec, *, timeout_s: float = 900) -> dict[str, Any]:
    result = base_result(system, spec, "throughput")
    reason = system.unsupported(spec) or _unsupported_security(system, spec)
    if reason:
        return {**result, "status": "skipped", "reason": reason}
    inputs = _create_topics(spec)
    try:
        expected = preload(spec)
    except BaseException:
        _delete_topics(spec, spec.app_id)
        raise
    return measure_throughput(
        system, spec, result, inputs, expected, multi_hop=spec.workload in MULTI_HOP,
        timeout_s=timeout_s,
    )  # fmt: skip


def measure_throughput(
    system: System,
    spec: RunSpec,
    result: dict[str, Any],
    inputs: dict[str, int],
    expected: int,
    *,
    multi_hop: bool,
    timeout_s: float = 900,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Start the system on pre-loaded ``inputs`` (topic -> partitions, ``expected`` records in
    all) and time it until its committed input offsets reach their end; ``multi_hop``: it has
    repartition topics, whose last hop commits after the input does. ``say`` is told how far it
    is every few seconds. Deletes the run's topics (those named after its application id) and
    state when done. The result holds the epoch times the run began and ended
    (``started_at``, ``finished_at``)."""
    result["started_at"] = time.time()
    launched: Launched | None = None
    try:
        launched = Launched(system, spec)
        committed_total = None
        if system.offsets == "progress-file":
            committed_total = lambda: spark_progress(spec)[1]  # noqa: E731
        multi_hop = multi_hop and system.offsets == "group"
        progress = Progress(
            spec.bootstrap, system.group(spec), inputs, committed_total=committed_total,
            client_config=spec.client_config,
            output_topic=spec.output_topic,
            # Longer than a commit interval: a later hop commits at most one interval later.
            quiet_s=(spec.commit_ms / 1000 + 2.0) if multi_hop else 0.0,
        )  # fmt: skip
        try:
            report = None
            if say is not None:
                begun = time.monotonic()
                report = lambda n: say(  # noqa: E731
                    f"  {system.label(spec)}: {n:,} of {expected:,} input records committed "
                    f"({time.monotonic() - begun:.0f} s)"
                )
            done_at = progress.wait_done(
                expected, timeout_s=timeout_s, alive=launched.alive, report=report
            )
            first = progress.first_write_at
            if system.offsets == "progress-file":
                first = spark_progress(spec)[0]
        except (TimeoutError, RuntimeError, KafkaException) as error:
            launched.stop()
            result.update(status="failed", reason=str(error), log_tail=launched.log_tail())
            return result
        finally:
            progress.close()
        exit_code = launched.stop()
        first = first or launched.launched_at
        seconds = max(done_at - first, 1e-3)
        cpu = launched.tree.cpu_between(first, done_at)
        result.update(
            load_average_end=list(os.getloadavg()),
            throughput_rps=spec.records / seconds,
            seconds=seconds,
            startup_s=first - launched.launched_at,
            cpu_s=cpu,
            cpu_s_per_million=cpu / spec.records * 1e6,
            cpu_us_per_record=cpu / spec.records * 1e6,
            peak_rss_mb=launched.tree.peak_rss / 2**20,
            input_records=expected,
            input_committed=progress.last_committed,
            output_records=count_committed(
                spec.bootstrap, spec.output_topic, spec.partitions, client_config=spec.client_config
            ),
            exit_code=exit_code,
        )
        return result
    finally:
        if launched is not None and launched.alive():
            launched.stop()  # interrupted: leave no process of the run behind
        _delete_topics(spec, spec.app_id)
        shutil.rmtree(spec.work_dir / "state", ignore_errors=True)
        result["finished_at"] = time.time()  # its process stopped and its topics deleted


def run_latency(
    system: System, spec: RunSpec, *, rate: int, seconds: float, startup_timeout_s: float = 180
) -> dict[str, Any]:
    """Produce ``rate`` records/s for ``seconds`` once the system answers; record latencies."""
    result = base_result(system, spec, "latency")
    result.update(rate=rate, seconds=seconds)
    reason = system.unsupported(spec) or _unsupported_security(system, spec)
    if reason:
        return {**result, "status": "skipped", "reason": reason}
    _create_topics(spec)
    launched = None
    try:
        if spec.table_topic:
            producer = _producer(spec.bootstrap, linger_ms=5, settings=spec.client_config)
            for row in generate_table(spec.workload, base_ms=int(time.time() * 1000)):
                producer.produce(spec.table_topic, row.value, row.key, timestamp=row.timestamp_ms)
            producer.flush(60)
        reader = LatencyReader(
            spec.bootstrap, spec.output_topic, spec.partitions, client_config=spec.client_config
        )
        reader.start()
        launched = Launched(system, spec)
        feeder = _RateProducer(spec, rate)
        feeder.start()
        # Warm-up: the system has started once its first result is readable.
        deadline = time.monotonic() + startup_timeout_s
        while reader.seen == 0:
            if time.monotonic() > deadline or not launched.alive():
                raise RuntimeError("the system produced no result during its warm-up")
            time.sleep(0.1)
        measure_from_ms = time.time() * 1000 + 2000  # settle for 2 s after the first result
        time.sleep(2 + seconds)
        measure_to_ms = time.time() * 1000
        feeder.stop()
        time.sleep(max(1.0, 3 * spec.commit_ms / 1000))  # let the last results arrive
        reader.stop()
        cpu_from, cpu_to = measure_from_ms / 1000, measure_to_ms / 1000
        launched.stop()
        values = [
            lat for sent, lat in reader.latencies_ms if measure_from_ms <= sent < measure_to_ms
        ]
        sample = values if len(values) <= 5000 else random.Random(8).sample(values, 5000)
        cpu = launched.tree.cpu_between(cpu_from, cpu_to)
        produced = int(rate * (measure_to_ms - measure_from_ms) / 1000)
        result.update(
            latency_p50_ms=percentile(values, 50),
            latency_p90_ms=percentile(values, 90),
            latency_p99_ms=percentile(values, 99),
            latency_max_ms=max(values, default=0.0),
            results_measured=len(values),
            latency_sample_ms=sorted(round(v, 2) for v in sample),
            cpu_s_per_million=cpu / max(1, produced) * 1e6,
            peak_rss_mb=launched.tree.peak_rss / 2**20,
        )
        return result
    except RuntimeError as error:
        tail = launched.log_tail() if launched else ""
        if launched:
            launched.stop()
        return {**result, "status": "failed", "reason": str(error), "log_tail": tail}
    finally:
        _delete_topics(spec, spec.app_id)
        shutil.rmtree(spec.work_dir / "state", ignore_errors=True)


class _RateProducer(threading.Thread):
    """Produces page views at a fixed rate, each stamped with the time it was produced."""

    def __init__(self, spec: RunSpec, rate: int) -> None:
        super().__init__(name="bench-rate-producer", daemon=True)
        self.spec = spec
        self.rate = rate
        self.producer = _producer(spec.bootstrap, linger_ms=0, settings=spec.client_config)
        self._halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        rng = random.Random(8)
        keys = 10_000 if self.spec.workload == "join" else 1_000
        prefix = "k" if self.spec.workload == "windowed" else "user-"
        started = time.monotonic()
        while not self._halt.is_set():
            # Catch up to where the rate says we should be, in small steps of wall time.
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                now_ms = int(time.time() * 1000)
                value = view_value(rng.choice(CATEGORIES), rng.choice(PERIODS[1:]), now_ms)
                key = f"{prefix}{rng.randrange(keys)}".encode()
                self.producer.produce(self.spec.input_topic, value, key, timestamp=now_ms)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(30)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
