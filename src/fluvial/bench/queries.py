"""``fluvial bench queries``: interactive query load against a running Figure 2 application.

Two runs of the same pre-loaded input, each a fresh ``fluvial run --serve`` process:

1. without queries: the processing throughput alone;
2. with ``clients`` processes asking point queries (one window of one category each, over
   keep-alive HTTP connections) for as long as processing runs: back to back, or at a fixed
   offered ``rate`` (queries per second over all clients, sent on a schedule that does not
   wait for slow answers), which measures what a given query load costs processing.

It reports the queries answered per second, their p50/p99 latency, and the processing
throughput lost to them. Both runs share the machine's cores with the query clients, as a
service and its callers would on one host.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from fluvial.kafka.admin import TopicSpec, create_topics

APP = Path(__file__).parent / "apps" / "served_app.py"
STORE = "pageview-counts"
CATEGORIES = [f"cat-{i:02d}" for i in range(24)]
WINDOW_MS = 5000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _produce(
    bootstrap: str, topic: str, records: int, base_ms: int, settings: dict[str, str]
) -> list[tuple[str, int]]:
    producer = Producer({**settings, "bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(1)
    windows = set()
    for i in range(records):
        ts = base_ms + i * 2
        category = rng.choice(CATEGORIES)
        value = json.dumps({"period": 40_000, "category": category}).encode()
        producer.produce(topic, key=f"user-{i % 97}".encode(), value=value, timestamp=ts)
        windows.add((category, ts - ts % WINDOW_MS))
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)
    return sorted(windows)


def _scrape(port: int) -> float:
    """Records processed so far (every task of the Figure 2 app)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("fluvial_worker_records_processed_total{")
    )


def _client(
    port: int, windows: list[tuple[str, int]], stop: Any, out: Any, rate: float = 0.0
) -> None:
    """One query client on one keep-alive connection: point queries back to back, or
    ``rate`` per second on a fixed schedule (latency counts from the scheduled send time)."""
    rng = random.Random(os.getpid())
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    interval = 1.0 / rate if rate > 0 else 0.0
    scheduled = time.perf_counter()
    while not stop.is_set():
        category, start = rng.choice(windows)
        if interval:
            scheduled += interval
            pause = scheduled - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            began = scheduled
        else:
            began = time.perf_counter()
        try:
            connection.request("GET", f"/stores/{STORE}/keys/{category}?time={start}")
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            time.sleep(0.01)
            continue
        statuses[response.status] = statuses.get(response.status, 0) + 1
        if response.status == 200:
            latencies.append(time.perf_counter() - began)
    out.put((latencies, statuses))


def _run_once(
    bootstrap: str, topic: str, records: int, windows: list[tuple[str, int]], *,
    clients: int, engine: str, work: Path, rate: float = 0.0,
    client_config_file: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One ``fluvial run --serve`` over the pre-loaded input, with ``clients`` query clients."""
    app_id = f"bench-iq-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    env = {**os.environ, "FLUVIAL_BENCH_INPUT": topic, "FLUVIAL_BENCH_OUTPUT": f"{topic}-out",
           "FLUVIAL_BENCH_APP_ID": app_id, "FLUVIAL_BENCH_BOOTSTRAP": bootstrap,
           "FLUVIAL_BENCH_STATE_DIR": str(work / app_id)}  # fmt: skip
    if client_config_file is not None:  # fluvial run reads its client settings from there
        env["FLUVIAL_KAFKA_CLIENT_CONFIG"] = str(client_config_file.resolve())
    cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", engine,
           "--serve", f"127.0.0.1:{port}", "--quiet"]  # fmt: skip
    if engine == "spark":
        cmd += ["--master", "local[2]"]
    log = open(work / f"{app_id}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    expected = 2 * records  # every view passes both sub-topologies (all are long views)
    try:
        progress: list[tuple[float, float]] = []
        deadline = time.monotonic() + 600
        context = multiprocessing.get_context("spawn")
        queue: Any = context.Queue()
        stop = context.Event()
        workers: list[Any] = []
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError((work / f"{app_id}.log").read_text()[-2000:])
            try:
                done = _scrape(port)
            except OSError:
                time.sleep(0.1)
                continue
            progress.append((time.monotonic(), done))
            if done > 0 and not workers and clients:
                workers = [
                    context.Process(
                        target=_client,
                        daemon=True,
                        args=(port, windows, stop, queue, rate / clients),
                    )
                    for _ in range(clients)
                ]
                for worker in workers:
                    worker.start()
                query_started = time.monotonic()
            if done >= expected:
                break
            time.sleep(0.2)
        first = next(t for t, d in progress if d > 0)
        last = next(t for t, d in progress if d >= expected)
        result: dict[str, Any] = {
            "clients": clients,
            "offered_rate": rate or None,
            "records": records,
            "processing_seconds": round(last - first, 2),
            "processing_rps": round(expected / 2 / max(last - first, 1e-9)),
        }
        if workers:
            # Stop the clients now: they report what they answered while processing ran.
            query_seconds = time.monotonic() - query_started
            stop.set()
            latencies: list[float] = []
            statuses: dict[int, int] = {}
            for _ in workers:
                lat, st = queue.get(timeout=60)
                latencies += lat
                for code, n in st.items():
                    statuses[code] = statuses.get(code, 0) + n
            for worker in workers:
                worker.join(10)
            latencies.sort()
            result.update(
                queries_answered=len(latencies),
                queries_per_s=round(len(latencies) / query_seconds),
                query_p50_ms=round(1000 * latencies[len(latencies) // 2], 2) if latencies else None,
                query_p99_ms=round(1000 * latencies[int(len(latencies) * 0.99)], 2)
                if latencies
                else None,
                statuses={str(k): v for k, v in sorted(statuses.items())},
            )
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run_query_bench(
    bootstrap: str | None, *, records: int, clients: int, engine: str, rate: float = 0.0,
    client_config: dict[str, str] | None = None, client_config_file: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Both runs on the same input; the lost throughput compares them. ``client_config`` (read
    from ``client_config_file``, or from the environment the application inherits) holds the
    Kafka client settings of ``bootstrap``."""
    settings = dict(client_config or {})
    from fluvial.bench.environment import describe
    from fluvial.bench.harness import kafka

    with (
        tempfile.TemporaryDirectory(prefix="fluvial-bench-iq-") as work,
        kafka(bootstrap) as servers,
    ):
        topic = f"bench-iq-views-{uuid.uuid4().hex[:8]}"
        create_topics(servers, [TopicSpec(topic, 1), TopicSpec(f"{topic}-out", 1)],
                      admin_config=settings)  # fmt: skip
        base_ms = int(time.time() * 1000) - 3_600_000
        windows = _produce(servers, topic, records, base_ms - base_ms % 60_000, settings)
        alone = _run_once(servers, topic, records, windows, clients=0, engine=engine,
                          work=Path(work), client_config_file=client_config_file)  # fmt: skip
        loaded = _run_once(servers, topic, records, windows, clients=clients, engine=engine,
                           work=Path(work), rate=rate,
                           client_config_file=client_config_file)  # fmt: skip
    lost = 1 - loaded["processing_rps"] / alone["processing_rps"]
    return {
        "environment": describe(),
        "engine": engine,
        "without_queries": alone,
        "with_queries": loaded,
        "processing_throughput_lost": round(lost, 3),
    }
