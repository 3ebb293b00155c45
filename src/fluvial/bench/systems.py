"""The systems under test and how each is started for one run.

Every system runs as its own process tree, so that the harness measures them all the same way
(CPU and memory from ``/proc``, progress from Kafka) and none shares an interpreter with the
harness's producer and monitor.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fluvial.bench import setup
from fluvial.children import own_secrets
from fluvial.jvm import java_executable

APPS = Path(__file__).parent / "apps"
PEERS = Path(__file__).parent / "peers"
EOS = "exactly_once_v2"


@dataclass
class RunSpec:
    """One run: which workload, with which settings, on which topics."""

    workload: str
    records: int
    partitions: int
    guarantee: str
    commit_ms: int
    bootstrap: str
    input_topic: str
    output_topic: str
    table_topic: str
    app_id: str
    work_dir: Path
    spark_master: str = "local[2]"
    # Where to write a py-spy profile (collapsed stacks) of the system's main process, if set.
    profile_to: Path | None = None
    # Kafka client security settings (librdkafka's) of the harness's clients and fluvial's;
    # the file they came from, if any, is what fluvial's processes are pointed at.
    client_config: dict[str, str] = field(default_factory=dict)
    client_config_file: Path | None = None
    # fluvial's record cache budget (0: off, as in the Kafka Streams peer).
    cache_max_bytes: int = 0
    # fluvial's stream time across repartition topics (False: Kafka Streams' rule).
    catch_up_completeness: bool = True

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EOS

    @property
    def progress_file(self) -> Path:
        return self.work_dir / "progress.jsonl"


class System:
    """A system under test. Subclasses say how to start it and how it is configured."""

    name = ""
    # Where the system keeps its committed input offsets: "group" (the consumer group named
    # ``group(spec)``) or "progress-file" (it reports them itself).
    offsets = "group"

    def unsupported(self, spec: RunSpec) -> str | None:
        """Why this system cannot run ``spec`` (None if it can)."""
        return None

    def group(self, spec: RunSpec) -> str:
        return spec.app_id

    def label(self, spec: RunSpec) -> str:
        """The system as results name it: its name, plus what sets this run apart."""
        return self.name

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def config(self, spec: RunSpec) -> dict[str, object]:
        """The configuration the report states for this run."""
        raise NotImplementedError

    def version(self) -> str:
        return ""


class FluvialSystem(System):
    """fluvial itself; with ``source``, the fluvial of another checkout (its ``src`` folder),
    so that a change is measured against its baseline on the same broker and input."""

    def __init__(self, engine: str = "local", source: Path | None = None) -> None:
        self.engine = engine
        self.source = source
        self.name = f"fluvial-{engine}" if source is None else "fluvial-baseline"

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APPS / "fluvial_app.py")]
        cmd += ["--engine", self.engine, "--quiet"]
        if self.engine == "spark":
            cmd += ["--master", spec.spark_master]
        env = {
            "FLUVIAL_BENCH_WORKLOAD": spec.workload,
            "FLUVIAL_BENCH_INPUT": spec.input_topic,
            "FLUVIAL_BENCH_OUTPUT": spec.output_topic,
            "FLUVIAL_BENCH_TABLE": spec.table_topic,
            "FLUVIAL_BENCH_APP_ID": spec.app_id,
            "FLUVIAL_BENCH_BOOTSTRAP": spec.bootstrap,
            "FLUVIAL_BENCH_GUARANTEE": spec.guarantee,
            "FLUVIAL_BENCH_COMMIT_MS": str(spec.commit_ms),
            "FLUVIAL_BENCH_STATE_DIR": str(spec.work_dir / "state"),
            "FLUVIAL_BENCH_CACHE_BYTES": str(spec.cache_max_bytes),
            "FLUVIAL_BENCH_CATCH_UP": "1" if spec.catch_up_completeness else "0",
        }
        if spec.client_config_file is not None:
            env["FLUVIAL_KAFKA_CLIENT_CONFIG"] = str(spec.client_config_file.resolve())
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source)
        return cmd, env

    def config(self, spec: RunSpec) -> dict[str, object]:
        cfg: dict[str, object] = {
            "processing_guarantee": spec.guarantee,
            "commit_interval_ms": spec.commit_ms,
            "cache_max_bytes": spec.cache_max_bytes,
            "catch_up_completeness": spec.catch_up_completeness,
            "state": "RocksDB (default stores)",
        }
        if self.engine == "spark":
            cfg["master"] = spec.spark_master
        else:
            cfg["workers"] = 1
        return cfg

    def label(self, spec: RunSpec) -> str:
        name = f"{self.name}+cache" if spec.cache_max_bytes else self.name
        return name if spec.catch_up_completeness else f"{name}+kstime"

    def version(self) -> str:
        import fluvial

        if self.source is not None:
            return f"fluvial from {self.source}"
        return f"fluvial {fluvial.__version__}"


class KafkaStreamsSystem(System):
    """Kafka Streams (Java) through the reference app of the differential tests.

    That app runs a named topology with fixed settings (exactly_once_v2, commit interval 100 ms,
    record cache off, one stream thread), so it can run only ``figure2`` at those settings.
    """

    name = "kafka-streams"

    def unsupported(self, spec: RunSpec) -> str | None:
        if spec.workload != "figure2":
            return "the reference app has no pipeline for this workload"
        if not spec.exactly_once or spec.commit_ms != 100:
            return "the reference app runs only exactly_once_v2 with a 100 ms commit interval"
        return None

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        jar = setup.reference_jar()
        cmd = [
            java_executable(), "-Xmx512m", "-XX:+UseSerialGC",
            # The harness decides when the input is done and stops the app with SIGTERM.
            "-Dreference.idle.ms=600000",
            "-jar", str(jar),
            "figure2", spec.bootstrap, spec.input_topic, spec.output_topic, spec.app_id,
        ]  # fmt: skip
        return cmd, {}

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 100,
            "statestore.cache.max.bytes": 0,
            "num.stream.threads": 1,
            "state": "RocksDB (default)",
            "jvm": "-Xmx512m -XX:+UseSerialGC",
        }

    def version(self) -> str:
        return "kafka-streams 4.3.1"


class QuixSystem(System):
    name = "quix"

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        python = setup.peer_python("quix")
        return [str(python), str(PEERS / "quix_app.py"), json.dumps(self._settings(spec))], {}

    def _settings(self, spec: RunSpec) -> dict[str, object]:
        return {
            "workload": spec.workload,
            "bootstrap": spec.bootstrap,
            "group": spec.app_id,
            "input": spec.input_topic,
            "table": spec.table_topic,
            "output": spec.output_topic,
            "exactly_once": spec.exactly_once,
            "commit_ms": spec.commit_ms,
            "state_dir": str(spec.work_dir / "state"),
            "partitions": spec.partitions,
        }

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "processing_guarantee": "exactly-once" if spec.exactly_once else "at-least-once",
            "commit_interval": spec.commit_ms / 1000,
            "state": "RocksDB (default), changelog topics on",
            "join": "join_asof (inner) for the join workload",
        }

    def version(self) -> str:
        return setup.peer_version("quix")


class FaustSystem(QuixSystem):
    name = "faust"

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        python = setup.peer_python("faust")
        cmd = [str(python), str(PEERS / "faust_app.py"), "worker", "-l", "warn"]
        return cmd, {"FAUST_BENCH_SETTINGS": json.dumps(self._settings(spec))}

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "processing_guarantee": "exactly_once" if spec.exactly_once else "at_least_once",
            "broker_commit_interval": spec.commit_ms / 1000,
            "store": "memory:// (tables with changelog topics)",
            "agents": "one per input topic, concurrency 1",
        }

    def version(self) -> str:
        return setup.peer_version("faust")


class CeilingSystem(System):
    """The hand-written loop (``peers/ceiling_app.py``): what Figure 2's work costs in Python.

    ``ceiling`` parses JSON with orjson, ``ceiling-json`` with the standard library.
    """

    def __init__(self, json_library: str = "orjson") -> None:
        self.json_library = json_library
        self.name = "ceiling" if json_library == "orjson" else "ceiling-json"

    def unsupported(self, spec: RunSpec) -> str | None:
        if spec.workload != "figure2":
            return "the hand-written ceiling exists for figure2 only"
        return None

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        settings = {
            "bootstrap": spec.bootstrap,
            "group": spec.app_id,
            "input": spec.input_topic,
            "output": spec.output_topic,
            "exactly_once": spec.exactly_once,
            "commit_ms": spec.commit_ms,
            "partitions": spec.partitions,
            "json": self.json_library,
        }
        return [sys.executable, str(PEERS / "ceiling_app.py"), json.dumps(settings)], {}

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "processing_guarantee": spec.guarantee,
            "commit_interval_ms": spec.commit_ms,
            "json": self.json_library,
            "state": "a dict (changelog records written, never read back)",
        }

    def version(self) -> str:
        if self.json_library == "orjson":
            import orjson

            return f"hand-written loop, orjson {orjson.__version__}"
        return "hand-written loop, stdlib json"


class SparkStructuredStreamingSystem(System):
    name = "spark-ss"
    offsets = "progress-file"

    def unsupported(self, spec: RunSpec) -> str | None:
        if spec.workload == "join":
            return "stream-static joins only; no streaming table from a topic in this peer"
        return None

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        settings = {
            "workload": spec.workload,
            "bootstrap": spec.bootstrap,
            "input": spec.input_topic,
            "output": spec.output_topic,
            "commit_ms": spec.commit_ms,
            "state_dir": str(spec.work_dir),
            "partitions": spec.partitions,
            "progress_file": str(spec.progress_file),
            "master": spec.spark_master,
        }
        return [sys.executable, str(PEERS / "spark_ss_app.py"), json.dumps(settings)], {}

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "guarantee": "at-least-once (Spark's Kafka sink has no exactly-once mode)",
            "trigger": f"processingTime {spec.commit_ms} ms",
            "output_mode": "update (windowed counts) / append (pass-through)",
            "watermark": "2 seconds",
            "master": spec.spark_master,
            "shuffle_partitions": spec.partitions,
        }

    def version(self) -> str:
        import pyspark

        return f"pyspark {pyspark.__version__} (spark-sql-kafka-0-10)"


class SparkStructuredStreamingEosSystem(SparkStructuredStreamingSystem):
    """The same Structured Streaming query, written through fluvial's exactly-once KafkaSink."""

    name = "spark-ss-eos"

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        argv, env = super().command(spec)
        settings = json.loads(argv[-1])
        settings["sink"] = "fluvial"
        return [*argv[:-1], json.dumps(settings)], env

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            **super().config(spec),
            "guarantee": "exactly-once (fluvial.spark.KafkaSink in foreachBatch)",
        }


def spark_progress(spec: RunSpec) -> tuple[float | None, int]:
    """(epoch start of Spark's first micro-batch, input records consumed so far)."""
    first, consumed = None, 0
    try:
        lines = spec.progress_file.read_text().splitlines()
    except OSError:
        return None, 0
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line being written
        if first is None:
            first = datetime.fromisoformat(entry["started"].replace("Z", "+00:00")).timestamp()
        consumed = max(consumed, int(entry["consumed"]))
    return first, consumed


#: The ``src`` folder of the checkout ``fluvial-baseline`` runs (``--baseline-src``).
BASELINE_SOURCE: Path | None = None


def make_system(name: str) -> System:
    if name == "fluvial-local":
        return FluvialSystem("local")
    if name == "fluvial-baseline":
        if BASELINE_SOURCE is None:
            raise ValueError("fluvial-baseline needs --baseline-src: a checkout's src folder")
        return FluvialSystem("local", BASELINE_SOURCE)
    if name == "fluvial-spark":
        return FluvialSystem("spark")
    if name == "kafka-streams":
        return KafkaStreamsSystem()
    if name == "quix":
        return QuixSystem()
    if name == "faust":
        return FaustSystem()
    if name == "ceiling":
        return CeilingSystem("orjson")
    if name == "ceiling-json":
        return CeilingSystem("json")
    if name == "spark-ss":
        return SparkStructuredStreamingSystem()
    if name == "spark-ss-eos":
        return SparkStructuredStreamingEosSystem()
    raise ValueError(f"unknown system {name!r}: use one of {', '.join(ALL_SYSTEMS)}")


ALL_SYSTEMS = (
    "fluvial-local", "fluvial-baseline", "fluvial-spark", "kafka-streams", "quix", "faust", "spark-ss", "spark-ss-eos",
    "ceiling", "ceiling-json",
)  # fmt: skip
PEER_NAMES = (
    "kafka-streams", "quix", "faust", "spark-ss", "spark-ss-eos", "ceiling", "ceiling-json"
)  # fmt: skip


def child_env(extra: dict[str, str]) -> dict[str, Any]:
    """The environment arguments of :func:`fluvial.children.popen` for a system under test:
    fluvial's secrets kept (it connects as fluvial does), ``extra`` over them, and no
    ``VIRTUAL_ENV`` (the peers' interpreters have virtual environments of their own)."""
    return {"keep": own_secrets(), "extra_env": extra, "drop_env": ("VIRTUAL_ENV",)}
