"""``fluvial bench startup``: seconds from ``fluvial run`` to its first committed output.

Each run makes an input and an output topic (2 partitions each), writes a few hundred
records with event times near now, starts ``fluvial run APP.py`` on a small counting
application (the Spark engine on ``local[2]`` by default) and polls the output with a
``read_committed`` consumer: the first record it sees is the first committed output. Then
the run is stopped with SIGTERM, as a user would.

The breakdown comes from what any user sees: the lines ``fluvial run`` prints (its start
line once the application is loaded; on Spark, the tasks line once the session is up) and,
on Spark, the lease log (``<state_dir>/<application_id>/leases.jsonl``): when the first lease
began, when each slot's task began, and how long the slot took to start its Worker (fence,
restore, seek). Every time is measured from the launch of the command. The CPU seconds of
``fluvial run``'s process tree (its JVM and Python workers, sampled from ``/proc``) are taken
at each phase's end too: on a busy machine they move much less than the seconds do.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import children
from fluvial.bench.measure import ProcessTree
from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, create_topics

PARTITIONS = 2
FIRST_OUTPUT_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0

APP_TEMPLATE = '''"""fluvial bench startup: counts records per key."""

from fluvial import StreamsBuilder, StreamsConfig, serdes


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream({input!r}, key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count()
        .to_stream()
        .to({output!r}, key_serde=serdes.string(), value_serde=serdes.long())
    )


config = StreamsConfig(
    application_id={app_id!r},
    processing_guarantee={guarantee!r},
    state_dir={state_dir!r},
)
'''

#: The phases of a Spark run, in order: (key, what it covers).
SPARK_PHASES = (
    ("loaded", "command and application loaded (the start line)"),
    ("session", "Spark session up (the tasks line)"),
    ("lease", "first lease submitted"),
    ("task", "first slot task running (Python worker started)"),
    ("slot", "its Worker started (fenced, restored, seeked)"),
    ("output", "first output committed and read"),
)
LOCAL_PHASES = (
    ("loaded", "command and application loaded (the start line)"),
    ("output", "first output committed and read"),
)


@contextlib.contextmanager
def kafka(bootstrap_servers: str | None) -> Iterator[str]:
    """The given cluster, or a private local Kafka on a free port (fresh: no topic yet)."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    with (
        tempfile.TemporaryDirectory(prefix="fluvial-bench-startup-kafka-") as data_dir,
        LocalKafka(data_dir, port=free_port()) as cluster,
    ):
        yield cluster.bootstrap_servers


def fluvial_command() -> list[str]:
    """``fluvial`` as a user runs it: the script beside this interpreter, if installed."""
    script = Path(sys.executable).with_name("fluvial")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fluvial.cli"]


def run_once(
    bootstrap: str,
    work_dir: Path,
    *,
    engine: str,
    master: str,
    records: int,
    guarantee: str,
    extra_args: list[str],
    say: Callable[[str], None],
    source: Path | None = None,
) -> dict[str, Any]:
    """One launch: the seconds to the first committed output, and its phases. ``source``: run
    the fluvial of this checkout's src folder instead of this one."""
    token = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"startup-in-{token}", f"startup-out-{token}"
    app_id = f"startup-{token}"
    state_dir = work_dir / f"state-{token}"
    app_file = work_dir / f"startup_app_{token}.py"
    app_file.write_text(
        APP_TEMPLATE.format(
            input=input_topic,
            output=output_topic,
            app_id=app_id,
            guarantee=guarantee,
            state_dir=str(state_dir),
        )  # fmt: skip
    )
    create_topics(
        bootstrap, [TopicSpec(input_topic, PARTITIONS), TopicSpec(output_topic, PARTITIONS)]
    )
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "enable.idempotence": True})  # fmt: skip
    now_ms = int(time.time() * 1000)
    for i in range(records):
        producer.produce(input_topic, key=f"k{i % 10}", value="v", timestamp=now_ms + i)
    if producer.flush(30) != 0:
        raise RuntimeError(f"writing {records} input records took more than 30 s")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"startup-reader-{token}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(output_topic, p, 0) for p in range(PARTITIONS)])
    command = fluvial_command() if source is None else [sys.executable, "-m", "fluvial.cli"]
    cmd = [*command, "run", str(app_file), "--engine", engine,
           "--bootstrap-servers", bootstrap, "--quiet", *extra_args]  # fmt: skip
    if engine == "spark":
        cmd += ["--master", master]
    lines: list[tuple[float, str]] = []
    launched_wall = time.time()
    launched = time.monotonic()
    env = {"PYTHONPATH": str(source)} if source is not None else {}
    proc = children.popen(cmd, keep=children.own_secrets(), extra_env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    # CPU seconds of fluvial run's process tree (its JVM, Python workers) by each phase's end:
    # less sensitive to a busy machine than the seconds.
    tree = ProcessTree(proc.pid, interval_s=0.1)
    tree.start()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic() - launched, line.rstrip()))

    reader = threading.Thread(target=pump, name="startup-stderr", daemon=True)
    reader.start()
    first: float | None = None
    stop_s: float | None = None
    try:
        deadline = launched + FIRST_OUTPUT_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                first = time.monotonic() - launched
                break
        tree.sample()
        tree.stop()
        stopping = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stop_s = time.monotonic() - stopping
        reader.join(5)
    finally:
        tree.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        consumer.close()
    if first is None:
        tail = "\n".join(text for _, text in lines[-20:])
        raise RuntimeError(
            f"no committed output within {FIRST_OUTPUT_TIMEOUT_S:.0f} s "
            f"(exit code {proc.returncode}); the end of fluvial run's output:\n{tail}"
        )
    phases = _phases(lines, state_dir / app_id / "leases.jsonl", launched_wall)
    phases["output"] = first
    run = {"first_output_s": round(first, 3), "stop_s": round(stop_s or 0.0, 3),
           "phases": {k: round(v, 3) for k, v in phases.items()},
           "cpu_s": {k: round(tree.cpu_at(launched_wall + v), 2) for k, v in phases.items()},
           "load_average": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    shutil.rmtree(state_dir, ignore_errors=True)
    app_file.unlink(missing_ok=True)
    say(format_run(run, engine))
    return run


def _phases(
    lines: list[tuple[float, str]], lease_log: Path, launched_wall: float
) -> dict[str, float]:
    """When each phase ended, in seconds from the launch."""
    found: dict[str, float] = {}
    for at, text in lines:
        if "loaded" not in found and text.startswith("fluvial: running "):
            found["loaded"] = at
        elif "session" not in found and " slot(s) (Spark " in text:
            found["session"] = at
    # A lease log without a field (an older fluvial's) leaves its phases out.
    with contextlib.suppress(OSError, ValueError, StopIteration, KeyError):
        with open(lease_log) as handle:
            lease = next(e for e in map(json.loads, handle) if "slots" in e and e["slots"])
        found["lease"] = lease["t"] - lease["seconds"] - launched_wall
        # The slot whose Worker ran first (the first output is one of its commits).
        slot = min(lease["slots"], key=lambda s: s["began"] + s["start_s"])
        found["task"] = slot["began"] - launched_wall
        found["slot"] = found["task"] + slot["start_s"]
    return found


def format_run(run: dict[str, Any], engine: str) -> str:
    phases = run["phases"]
    parts, before = [], 0.0
    for key, _ in SPARK_PHASES if engine == "spark" else LOCAL_PHASES:
        if key in phases:
            parts.append(f"{key} {phases[key]:.2f} (+{phases[key] - before:.2f})")
            before = phases[key]
    load = run["load_average"][0]
    cpu = _spans(run.get("cpu_s", {}), engine)
    said = "".join(f", {key} {cpu[key]:.2f}" for key in ("session", "task") if key in cpu)
    total = f"CPU s: total {run['cpu_s']['output']:.2f}{said}  |  " if cpu else ""
    return (f"first committed output {run['first_output_s']:.2f} s  |  " + "  ".join(parts)
            + f"  |  {total}stop {run['stop_s']:.2f} s, load {load:.2f}")  # fmt: skip


def _spans(ends: dict[str, float], engine: str) -> dict[str, float]:
    """Each phase's own share of ``ends`` (a quantity measured at each phase's end)."""
    spans, before = {}, 0.0
    for key, _ in SPARK_PHASES if engine == "spark" else LOCAL_PHASES:
        if key in ends:
            spans[key] = ends[key] - before
            before = ends[key]
    return spans


def _median_range(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def summarize(runs: list[dict[str, Any]], engine: str) -> dict[str, Any]:
    """Median, lowest and highest of the first output, of each phase's own duration, and of
    the CPU seconds each phase used (``cpu_s``; ``total`` is by the first output)."""
    firsts = [r["first_output_s"] for r in runs]
    summary: dict[str, Any] = {
        "runs": len(runs),
        "first_output_s": {
            "median": round(statistics.median(firsts), 3),
            "min": min(firsts),
            "max": max(firsts),
        },  # fmt: skip
        "phases": {},
        "cpu_s": {},
    }
    for field, values in (("phases", "phases"), ("cpu_s", "cpu_s")):
        spans = [_spans(run.get(values, {}), engine) for run in runs]
        for key, _ in SPARK_PHASES if engine == "spark" else LOCAL_PHASES:
            found = [span[key] for span in spans if key in span]
            if found:
                summary[field][key] = _median_range(found)
    totals = [run["cpu_s"]["output"] for run in runs if "output" in run.get("cpu_s", {})]
    if totals:
        summary["cpu_s"]["total"] = _median_range(totals)
    return summary


def run_startup_bench(
    *,
    runs: int,
    engine: str,
    master: str,
    records: int,
    guarantee: str,
    bootstrap: str | None,
    extra_args: list[str],
    say: Callable[[str], None],
    baseline: Path | None = None,
) -> dict[str, Any]:
    """``runs`` launches of this fluvial, each followed by one of ``baseline`` (another
    checkout's src folder) if given: the two alternate, so both see the same machine."""
    systems: dict[str, Path | None] = {"fluvial": None}
    if baseline is not None:
        systems["fluvial-baseline"] = baseline
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    with (
        kafka(bootstrap) as servers,
        tempfile.TemporaryDirectory(prefix="fluvial-bench-startup-") as work,
    ):
        for i in range(runs):
            for name, source in systems.items():
                say(f"run {i + 1}/{runs}, {name}:")
                run = run_once(servers, Path(work), engine=engine, master=master,
                               records=records, guarantee=guarantee, extra_args=extra_args,
                               say=say, source=source)  # fmt: skip
                results[name].append(run)
    return {
        "engine": engine,
        "master": master if engine == "spark" else None,
        "records": records,
        "guarantee": guarantee,
        "systems": {
            name: {"results": found, "summary": summarize(found, engine)}
            for name, found in results.items()
        },
    }
