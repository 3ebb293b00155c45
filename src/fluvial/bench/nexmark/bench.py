"""``fluvial bench nexmark``: each query on fluvial and its peers, on one pre-loaded input.

The input is generated once and written to three topics; every run reads them with its own
application id and writes its own output topic. Runs are measured as Figure 2's are
(:func:`fluvial.bench.harness.measure_throughput`): the system under test pinned to its CPU,
the broker and the harness to the others, the CPU time of the system's process tree per input
event, and events per second from its first write until its committed input offsets reach the
end (and, behind a repartition, until its last hop has committed).
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fluvial import StreamsBuilder
from fluvial.bench.harness import PINNING, base_result, kafka, measure_throughput
from fluvial.bench.nexmark import model
from fluvial.bench.nexmark.compare import prepare_side_inputs
from fluvial.bench.nexmark.generator import Written, write
from fluvial.bench.nexmark.queries import QUERIES
from fluvial.bench.nexmark.runner import Settings, kafka_streams_command
from fluvial.bench.nexmark.table import as_dicts, print_table, summary, table_rows
from fluvial.bench.results import Results, console
from fluvial.bench.systems import APPS, RunSpec, System
from fluvial.kafka.admin import TopicSpec, create_topics

#: Flink's published figures (Nexmark on Flink 1.13: events/s per core, generated source and
#: discard sink, so no Kafka I/O): Flink's own set-up, not a measurement of this run.
FLINK_PER_CORE = {
    "q0": 175_000, "q1": 170_000, "q2": 175_000, "q3": 150_000, "q4": 34_000, "q5": 22_000,
    "q7": 12_000, "q8": 146_000, "q9": 14_000, "q11": 40_000, "q18": 54_000, "q19": 44_000,
    "q20": 19_000,
}  # fmt: skip
PEERS = ("kafka-streams", "quix")
#: The queries written for Quix Streams (its DSL has no stream-stream or table joins).
QUIX_QUERIES = frozenset({"q0", "q1", "q2"})
DEFAULT_CACHE_BYTES = 10 * 1024 * 1024  # both systems' default record cache


@dataclass
class NexmarkSpec(RunSpec):
    """A run of one query: the input topics' prefix beside the usual settings."""

    query: str = ""
    prefix: str = ""


class NexmarkFluvial(System):
    def __init__(self, engine: str = "local") -> None:
        self.engine = engine
        self.name = f"fluvial-{engine}"

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        assert isinstance(spec, NexmarkSpec)
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APPS / "nexmark_app.py"),
               "--engine", self.engine, "--quiet"]  # fmt: skip
        if self.engine == "spark":
            cmd += ["--master", spec.spark_master]
        return cmd, {
            "FLUVIAL_BENCH_QUERY": spec.query,
            "FLUVIAL_BENCH_PREFIX": spec.prefix,
            "FLUVIAL_BENCH_OUTPUT": spec.output_topic,
            "FLUVIAL_BENCH_APP_ID": spec.app_id,
            "FLUVIAL_BENCH_BOOTSTRAP": spec.bootstrap,
            "FLUVIAL_BENCH_GUARANTEE": spec.guarantee,
            "FLUVIAL_BENCH_COMMIT_MS": str(spec.commit_ms),
            "FLUVIAL_BENCH_STATE_DIR": str(spec.work_dir / "state"),
            "FLUVIAL_BENCH_CACHE_BYTES": str(spec.cache_max_bytes),
            "FLUVIAL_BENCH_CATCH_UP": "1" if spec.catch_up_completeness else "0",
        }

    def config(self, spec: RunSpec) -> dict[str, object]:
        cfg: dict[str, object] = {
            "processing_guarantee": spec.guarantee,
            "commit_interval_ms": spec.commit_ms,
            "cache_max_bytes": spec.cache_max_bytes,
            "state": "RocksDB (default stores)",
        }
        if not spec.catch_up_completeness:
            cfg["catch_up_completeness"] = False
        if self.engine == "spark":
            cfg["master"] = spec.spark_master
        else:
            cfg["workers"] = 1
        return cfg

    def label(self, spec: RunSpec) -> str:
        # "+kstime" before "+cache": the table reads the cache setting off the name's end.
        name = self.name if spec.catch_up_completeness else f"{self.name}+kstime"
        return f"{name}+cache" if spec.cache_max_bytes else name

    def version(self) -> str:
        import fluvial

        return f"fluvial {fluvial.__version__}"


class NexmarkKafkaStreams(System):
    """The query's Kafka Streams twin (``NexmarkMain``): one thread, RocksDB, the run's
    guarantee, commit interval and record cache."""

    name = "kafka-streams"

    def __init__(self, jar: Path) -> None:
        self.jar = jar

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        assert isinstance(spec, NexmarkSpec)
        settings = Settings(spec.guarantee, spec.commit_ms, spec.cache_max_bytes)
        return kafka_streams_command(self.jar, [spec.query], spec.bootstrap, spec.prefix,
                                     spec.output_topic, spec.app_id, settings), {}  # fmt: skip

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "processing.guarantee": spec.guarantee,
            "commit.interval.ms": spec.commit_ms,
            "statestore.cache.max.bytes": spec.cache_max_bytes,
            "num.stream.threads": 1,
            "state": "RocksDB (default)",
            "jvm": "-Xmx512m -XX:+UseSerialGC",
        }

    def label(self, spec: RunSpec) -> str:
        return f"{self.name}+cache" if spec.cache_max_bytes else self.name

    def version(self) -> str:
        return "kafka-streams 4.3.1"


class NexmarkQuix(System):
    """The stateless queries on Quix Streams (``peers/quix_nexmark_app.py``)."""

    name = "quix"

    def unsupported(self, spec: RunSpec) -> str | None:
        assert isinstance(spec, NexmarkSpec)
        if spec.query not in QUIX_QUERIES:
            return f"written for Quix Streams: {', '.join(sorted(QUIX_QUERIES))} only"
        if spec.cache_max_bytes:
            return "Quix Streams has no record cache: run with the cache off only"
        return None

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str]]:
        import json

        from fluvial.bench import setup
        from fluvial.bench.systems import PEERS as PEER_APPS

        assert isinstance(spec, NexmarkSpec)
        settings = {
            "query": spec.query, "prefix": spec.prefix, "bootstrap": spec.bootstrap,
            "group": spec.app_id, "output": spec.output_topic, "exactly_once": spec.exactly_once,
            "commit_ms": spec.commit_ms, "state_dir": str(spec.work_dir / "state"),
        }  # fmt: skip
        python = setup.peer_python("quix")
        return [str(python), str(PEER_APPS / "quix_nexmark_app.py"), json.dumps(settings)], {}

    def config(self, spec: RunSpec) -> dict[str, object]:
        return {
            "processing_guarantee": "exactly-once" if spec.exactly_once else "at-least-once",
            "commit_interval": spec.commit_ms / 1000,
        }

    def version(self) -> str:
        from fluvial.bench import setup

        return setup.peer_version("quix")


def _print(line: str) -> None:
    console.print(line, highlight=False, markup=False)


def _reads(query: str, prefix: str) -> tuple[list[str], bool]:
    """The input topics the query reads, and whether it re-keys (a later hop commits later)."""
    builder = StreamsBuilder()
    QUERIES[query].build(builder, model.topics(prefix), "out")
    topology = builder.build()
    rekeys = any(sub.repartition_topics_written() for sub in topology.subtopologies("bench"))
    return topology.source_topics(), rekeys


def run_nexmark_bench(
    queries: list[str],
    systems: list[str],
    guarantees: list[str],
    caches: list[int],
    *,
    events: int,
    partitions: int,
    commit_ms: int,
    bootstrap: str | None,
    json_out: Path | None,
    seed: int = 0,
    rate: int = model.DEFAULT_RATE,
    master: str = "local[2]",
    timeout_s: float = 1800,
    profile_dir: Path | None = None,
    say: Callable[[str], None] | None = None,
    catch_up_completeness: bool = True,
) -> dict[str, Any]:
    """Every query x guarantee x cache setting x system on one generated input, one run at a
    time: each run alone on the broker (its topics are deleted before the next one starts), in
    query order. Prints each run's progress as it goes and the table of ratios at the end."""
    if say is None:
        say = _print
    results = Results(json_out)
    made: dict[str, System] = {}
    if "kafka-streams" in systems:
        from fluvial.verify.differential.reference import build_reference_jar

        made["kafka-streams"] = NexmarkKafkaStreams(build_reference_jar())
    if "quix" in systems:
        made["quix"] = NexmarkQuix()
    for name in systems:
        if name.startswith("fluvial-"):
            made[name] = NexmarkFluvial(name.removeprefix("fluvial-"))
    with tempfile.TemporaryDirectory(prefix="fluvial-bench-") as work, kafka(bootstrap) as servers:
        prefix = f"nexmark-{uuid.uuid4().hex[:8]}"
        written: Written = write(servers, prefix, events, partitions=partitions, seed=seed,
                                 rate=rate)  # fmt: skip
        console.print(
            f"bench: Kafka at {servers}; {events:,} events in {prefix}-* ({partitions} "
            f"partitions), written at {written.events_per_s:,.0f} events/s",
            highlight=False,
        )
        results.data["input"] = written.as_dict()
        prepare_side_inputs(queries, servers, written.topics)
        results.data["flink_per_core"] = {
            "events_per_s": FLINK_PER_CORE,
            "note": "Flink's published Nexmark figures (Flink 1.13, generated source, discard "
            "sink: Flink's own set-up without Kafka I/O), not measured here",
        }
        total = len(queries) * len(guarantees) * len(caches) * len(systems)
        done = 0
        for query in queries:
            inputs, rekeys = _reads(query, prefix)
            expected = sum(written.counts[kind] for kind, t in written.topics.items()
                           if t in inputs)  # fmt: skip
            for guarantee in guarantees:
                for cache in caches:
                    for name in systems:
                        system = made[name]
                        base = f"bench-{query}-{name}-{uuid.uuid4().hex[:8]}"
                        work_dir = Path(work) / base
                        work_dir.mkdir(parents=True)
                        spec = NexmarkSpec(
                            workload=f"nexmark-{query}", records=expected, partitions=partitions,
                            guarantee=guarantee, commit_ms=commit_ms, bootstrap=servers,
                            input_topic=",".join(inputs), output_topic=f"{base}-out",
                            table_topic="", app_id=base, work_dir=work_dir, spark_master=master,
                            cache_max_bytes=cache, query=query, prefix=prefix,
                            catch_up_completeness=catch_up_completeness,
                            profile_to=(profile_dir / f"{base}.txt")
                            if profile_dir and name.startswith("fluvial")
                            else None,
                        )  # fmt: skip
                        done += 1
                        say(f"[{done}/{total}] {query} {guarantee} cache "
                            f"{'on' if cache else 'off'}: {system.label(spec)}, {expected:,} "
                            "events")  # fmt: skip
                        result = base_result(system, spec, "throughput")
                        result["query"] = query
                        result["flink_per_core_events_per_s"] = FLINK_PER_CORE.get(query)
                        reason = system.unsupported(spec)
                        if reason:
                            results.add({**result, "status": "skipped", "reason": reason})
                            continue
                        create_topics(servers, [TopicSpec(spec.output_topic, partitions)])
                        run = measure_throughput(
                            system, spec, result, dict.fromkeys(inputs, partitions), expected,
                            multi_hop=rekeys, timeout_s=timeout_s, say=say,
                        )  # fmt: skip
                        results.add(run)
    results.data["pinning"] = PINNING.describe()
    rows = table_rows(results.data["runs"])
    results.data["table"] = as_dicts(rows)
    results.data["summary"] = summary(rows)
    print_table(rows)
    if json_out is not None:
        results.save()
    return results.data
