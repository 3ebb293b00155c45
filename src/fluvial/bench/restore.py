"""``fluvial bench restore``: fluvial and Kafka Streams restoring the same changelog.

A table of string keys and values, materialized in the RocksDB store ``kv``, is the application
of both systems (:func:`restore_topology` here, ``RestoreMain`` in the reference project). Each
system gets an application id of its own, and its changelog ``<application id>-kv-changelog``
is filled beforehand with the same records, byte for byte: N keys, each written once, placed by
Kafka's Java partitioner. That is the changelog either system writes for such a table: the key,
the plain value, and the row's timestamp as the record timestamp. Nothing is ever written to
the table's input.

Each system then starts on a fresh state directory, in a process of its own pinned to the
system's CPU (as in every fluvial bench), and restores its store before it processes anything.
The restore is timed from inside, through each system's public view of it: fluvial's worker
metrics (``stores_to_restore``, ``stores_restored``, ``restored``), Kafka Streams' restore
listener. Records per second and the process's CPU time per record cover the span from the
first sign of the restore to its end; ``from_start_s`` is the time from the start call to the
restored store. Once running, each application's store answers a key and its entries are
counted, so a restore that came back short is seen.

The restore runs under exactly-once: under at-least-once, fluvial restores a store only up to
the changelog offsets committed with its input offsets, and an application that never committed
has nothing to restore (its input is processed again instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from fluvial import Materialized, StreamsBuilder, children, serdes
from fluvial.bench.harness import PINNING, delete_topics_of, kafka
from fluvial.bench.results import Results, console
from fluvial.bench.systems import APPS, child_env
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.topology.topology import Topology

STORE = "kv"
GUARANTEE = "exactly_once_v2"
SYSTEMS = ("fluvial-local", "kafka-streams")
RESTORE_MAIN = "dev.fluvial.reference.bench.RestoreMain"


def restore_topology(input_topic: str) -> Topology:
    """The restored application: a table of ``input_topic`` in the store ``kv``."""
    builder = StreamsBuilder()
    builder.table(input_topic, materialized=Materialized.as_(STORE),
                  key_serde=serdes.string(), value_serde=serdes.string())  # fmt: skip
    return builder.build()


def changelog_topic(application_id: str) -> str:
    """The store's changelog as fluvial names it (Kafka Streams' name for it too)."""
    [sub] = restore_topology("input").subtopologies(application_id)
    return sub.changelog_topics()[STORE]


def key_of(index: int) -> str:
    return f"key-{index:09d}"


def value_of(index: int, size: int) -> str:
    """A value of ``size`` characters (at least its prefix) that names its key."""
    prefix = f"value-{index}-"
    return prefix + "x" * max(0, size - len(prefix))


def records(keys: int, value_bytes: int) -> Iterator[tuple[bytes, bytes]]:
    for i in range(keys):
        yield key_of(i).encode(), value_of(i, value_bytes).encode()


def fill_changelog(bootstrap: str, topic: str, keys: int, value_bytes: int, base_ms: int) -> float:
    """Write ``keys`` rows to ``topic`` as a table's changelog; returns the seconds it took."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True,
        # Kafka's Java partitioner: each key on the partition its task restores.
        "partitioner": "murmur2_random", "linger.ms": 20, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
    })  # fmt: skip
    started = time.monotonic()
    for i, (key, value) in enumerate(records(keys, value_bytes)):
        while True:
            try:
                producer.produce(topic, value, key, timestamp=base_ms + i // 100)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
    if producer.flush(300) != 0:
        raise RuntimeError(f"filling {topic} did not finish within 300 s")
    return time.monotonic() - started


def _fluvial_command(app_id: str, input_topic: str, bootstrap: str, key: str, work: Path,
                     guarantee: str) -> list[str]:  # fmt: skip
    settings = {"application_id": app_id, "input": input_topic, "bootstrap": bootstrap,
                "key": key, "state_dir": str(work / "state"), "guarantee": guarantee}  # fmt: skip
    return [sys.executable, str(APPS / "restore_app.py"), json.dumps(settings)]


def _kafka_streams_command(app_id: str, input_topic: str, bootstrap: str, key: str,
                           partitions: int, guarantee: str) -> list[str]:  # fmt: skip
    from fluvial.jvm import java_executable
    from fluvial.verify.differential.reference import build_reference_jar

    return [java_executable(), "-Xmx512m", "-XX:+UseSerialGC", "-cp", str(build_reference_jar()),
            RESTORE_MAIN, bootstrap, input_topic, app_id, guarantee, str(partitions), key]  # fmt: skip


def _run_child(cmd: list[str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run a restoring process on the system's CPU; its last stdout line is its JSON."""
    with open(log, "wb") as err:
        proc = children.run(PINNING.wrap(cmd), stdout=subprocess.PIPE, stderr=err,
                            timeout=timeout_s, **child_env({}))  # fmt: skip
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}:\n{tail}")
    return json.loads(lines[-1])


def _result(name: str, raw: dict[str, Any], keys: int, key: str, value: str) -> dict[str, Any]:
    seconds = max(raw["restore_ended_at"] - raw["restore_started_at"], 1e-3)
    restored = raw["restored"]
    return {
        "system": name,
        "status": "ok",
        "restored": restored,
        "entries": raw["entries"],
        "key": key,
        "value_found": raw["value"] == value,
        "seconds": seconds,
        "records_per_s": restored / seconds,
        "cpu_s": raw["restore_cpu_s"],
        "cpu_us_per_record": raw["restore_cpu_s"] / max(restored, 1) * 1e6,
        "from_start_s": raw["restore_ended_at"] - raw["started_at"],
        "complete": restored == keys and raw["entries"] == keys and raw["value"] == value,
        "load_average": list(os.getloadavg()),
    }


def run_restore_bench(
    *,
    keys: int,
    partitions: int,
    value_bytes: int,
    bootstrap: str | None,
    json_out: Path | None,
    systems: tuple[str, ...] = SYSTEMS,
    timeout_s: float = 1800,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fill one changelog per system with the same ``keys`` rows, then let each system restore
    it into a fresh state directory, one after the other; returns the results."""
    import tempfile

    say = say or (lambda line: console.print(line, highlight=False, markup=False))
    results = Results(json_out)
    results.data["settings"] = {"keys": keys, "partitions": partitions,
                                "value_bytes": value_bytes, "guarantee": GUARANTEE}  # fmt: skip
    token = uuid.uuid4().hex[:8]
    index = keys // 2
    key, value = key_of(index), value_of(index, value_bytes)
    base_ms = int(time.time() * 1000) - keys // 100 - 60_000
    with tempfile.TemporaryDirectory(prefix="fluvial-bench-restore-") as tmp, \
            kafka(bootstrap) as servers:  # fmt: skip
        apps = {name: f"bench-restore-{name}-{token}" for name in systems}
        for app_id in apps.values():
            changelog = changelog_topic(app_id)
            create_topics(servers, [
                TopicSpec(f"{app_id}-input", partitions),
                TopicSpec(changelog, partitions, config={"cleanup.policy": "compact"}),
            ])  # fmt: skip
            seconds = fill_changelog(servers, changelog, keys, value_bytes, base_ms)
            say(f"restore: wrote {keys:,} rows to {changelog} ({partitions} partitions) in "
                f"{seconds:.1f} s")  # fmt: skip
        try:
            for n, (name, app_id) in enumerate(apps.items(), 1):
                say(f"[{n}/{len(apps)}] {name} restores {keys:,} rows into a fresh state directory")
                work = Path(tmp) / name
                work.mkdir()
                input_topic = f"{app_id}-input"
                if name == "kafka-streams":
                    cmd = _kafka_streams_command(app_id, input_topic, servers, key, partitions,
                                                 GUARANTEE)  # fmt: skip
                else:
                    cmd = _fluvial_command(app_id, input_topic, servers, key, work, GUARANTEE)
                try:
                    raw = _run_child(cmd, work / "log.txt", timeout_s)
                    run = _result(name, raw, keys, key, value)
                except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as error:
                    run = {"system": name, "status": "failed", "reason": str(error)}
                results.data["runs"].append(run)
                results.save()
                say(_line(run, keys))
        finally:
            delete_topics_of(servers, list(apps.values()))
    runs = {r["system"]: r for r in results.data["runs"] if r["status"] == "ok"}
    if "fluvial-local" in runs and "kafka-streams" in runs:
        ours, theirs = runs["fluvial-local"], runs["kafka-streams"]
        results.data["ratios"] = {
            "records_per_s": ours["records_per_s"] / theirs["records_per_s"],
            "cpu_us_per_record": ours["cpu_us_per_record"] / theirs["cpu_us_per_record"],
        }
        say(f"fluvial / kafka-streams: records/s {results.data['ratios']['records_per_s']:.2f}, "
            f"CPU per record {results.data['ratios']['cpu_us_per_record']:.2f}")  # fmt: skip
    results.save()
    return results.data


def _line(run: dict[str, Any], keys: int) -> str:
    if run["status"] != "ok":
        return f"{run['system']:<14} failed: {run['reason']}"
    check = "complete" if run["complete"] else (
        f"INCOMPLETE: restored {run['restored']:,}, {run['entries']:,} entries, "
        f"key {'found' if run['value_found'] else 'missing'}"
    )  # fmt: skip
    return (f"{run['system']:<14} {run['records_per_s']:>10,.0f} records/s  "
            f"{run['seconds']:6.2f} s  cpu {run['cpu_us_per_record']:6.2f} µs/record  "
            f"({run['from_start_s']:.1f} s from start; {keys:,} keys {check})")  # fmt: skip
