"""``fluvial bench queries``: interactive query load against a running Figure 2 application.

Runs over the same pre-loaded input, each a fresh ``fluvial run --serve`` process:

1. without queries: the processing throughput alone;
2. for each way of serving committed reads (``in-process``: in the application's own process;
   ``reader``: a reader process beside it, see :mod:`fluvial.iq.reader`), with point
   queries (one window of one category each) for as long as processing runs: back to back, or
   at a fixed offered ``rate``.

The load generator is built to cost little CPU, since it shares the machine: ``clients``
processes, each with a few keep-alive connections on which requests are pipelined (HTTP/1.1
sends several requests before reading the answers, which come back in order). At a fixed
rate the requests leave on a schedule that does not wait for slow answers, and a latency
counts from the scheduled send time (open loop). Back to back, each connection keeps
``depth`` requests outstanding.

It reports the queries answered per second, their p50/p99 latency, the processing throughput
lost to them, and the CPU that each party used while processing ran: the application process,
the reader process, the query clients and the broker, with the machine's load average. The
application, its reader and the clients may use every core, as a service and its callers
would on one host.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import os
import random
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from fluvial import children
from fluvial.bench.systems import child_env
from fluvial.kafka.admin import TopicSpec, create_topics

APP = Path(__file__).parent / "apps" / "served_app.py"
STORE = "pageview-counts"
CATEGORIES = [f"cat-{i:02d}" for i in range(24)]
WINDOW_MS = 5000
MODES = ("in-process", "reader")
#: Requests a connection keeps outstanding back to back (HTTP/1.1 pipelining).
DEFAULT_DEPTH = 8
DEFAULT_CONNECTIONS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _produce(
    bootstrap: str, topic: str, records: int, base_ms: int, settings: dict[str, str]
) -> list[tuple[str, int]]:
    producer = Producer({**settings, "bootstrap.servers": bootstrap, "linger.ms": 20,
                         "enable.idempotence": True})  # fmt: skip
    rng = random.Random(1)
    windows = set()
    for i in range(records):
        ts = base_ms + i * 2
        category = rng.choice(CATEGORIES)
        value = json.dumps({"period": 40_000, "category": category}).encode()
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 97}".encode(), value=value, timestamp=ts)
                break
            except BufferError:  # the local queue is full: let the broker catch up
                producer.poll(0.1)
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


# -- CPU accounting ---------------------------------------------------------------------------


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a live process (every thread), or 0 once it is gone."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _listener_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:``port`` (the broker), found through /proc."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:
            continue
    return None


# -- the load generator -----------------------------------------------------------------------


def _responses(buffer: bytearray) -> list[int]:
    """Take the complete HTTP responses off the front of ``buffer``; return their statuses."""
    statuses: list[int] = []
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return statuses
        head = bytes(buffer[:end]).lower()
        at = head.find(b"content-length:")
        if at < 0:
            raise ValueError(f"an answer without content-length: {head[:200]!r}")
        line_end = head.find(b"\r\n", at)
        length = int(head[at + 15 : line_end if line_end >= 0 else len(head)])
        if len(buffer) < end + 4 + length:
            return statuses
        statuses.append(int(head[9:12]))
        del buffer[: end + 4 + length]


class _Connection:
    """One keep-alive connection: requests go out pipelined, answers come back in order."""

    def __init__(self, port: int, selector: selectors.BaseSelector) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.selector = selector
        self.sent_at: deque[float] = deque()  # when each outstanding request was (due to be) sent
        self.incoming = bytearray()
        self.outgoing = bytearray()
        self.writing = False
        selector.register(self.sock, selectors.EVENT_READ, self)

    def send(self, payload: bytes, times: list[float]) -> None:
        self.sent_at.extend(times)
        self.outgoing += payload
        self.flush()

    def flush(self) -> None:
        """Write what the socket takes now; the rest when it is writable (never block: the
        server may be waiting for us to read)."""
        if self.outgoing:
            with contextlib.suppress(BlockingIOError):
                del self.outgoing[: self.sock.send(self.outgoing)]
        if self.writing != bool(self.outgoing):
            self.writing = bool(self.outgoing)
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.writing else 0)
            self.selector.modify(self.sock, events, self)

    def receive(self) -> list[tuple[int, float]]:
        """(status, when sent) of the answers that arrived."""
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return []
        if not data:
            raise ConnectionError("the server closed a query connection")
        self.incoming += data
        return [(status, self.sent_at.popleft()) for status in _responses(self.incoming)]


def _client(
    port: int,
    windows: list[tuple[str, int]],
    stop: Any,
    out: Any,
    rate: float,
    connections: int,
    depth: int,
    cpus: list[int],
) -> None:
    """Point queries on ``connections`` keep-alive connections, pipelined.

    At ``rate`` per second (this client's share) on a fixed schedule, or back to back with
    ``depth`` outstanding per connection. Reports latencies (from the scheduled send when at
    a rate), statuses, the CPU this process used and how long it ran.
    """
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    rng = random.Random(os.getpid())
    requests = [
        f"GET /stores/{STORE}/keys/{c}?time={s} HTTP/1.1\r\nHost: q\r\n\r\n".encode()
        for c, s in windows
    ]
    selector = selectors.DefaultSelector()
    pool = [_Connection(port, selector) for _ in range(connections)]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    interval = 1.0 / rate if rate > 0 else 0.0
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    sent = 0
    while not stop.is_set():
        now = time.perf_counter()
        if interval:
            due = int((now - started) / interval) + 1 - sent
            if due > 0:
                # Spread over the connections, each getting its share in one write.
                times = [started + (sent + i) * interval for i in range(due)]
                for index, connection in enumerate(pool):
                    share = times[index :: len(pool)]
                    if share:
                        connection.send(b"".join(rng.choice(requests) for _ in share), share)
                sent += due
            timeout = max(0.0, started + sent * interval - time.perf_counter())
        else:
            for connection in pool:
                missing = depth - len(connection.sent_at)
                if missing > 0:
                    connection.send(b"".join(rng.choice(requests) for _ in range(missing)),
                                    [now] * missing)  # fmt: skip
            timeout = 0.05
        for key, events in selector.select(min(timeout, 0.05)):
            connection = key.data
            if events & selectors.EVENT_WRITE:
                connection.flush()
            if events & selectors.EVENT_READ:
                answered = connection.receive()
                arrived = time.perf_counter()
                for status, began in answered:
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 200:
                        latencies.append(arrived - began)
    ran = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    out.put((latencies, statuses, cpu, ran))
    for connection in pool:
        connection.sock.close()


# -- one run ----------------------------------------------------------------------------------


def _run_once(
    bootstrap: str, topic: str, records: int, windows: list[tuple[str, int]], *,
    clients: int, engine: str, work: Path, rate: float = 0.0, mode: str = "reader",
    connections: int = DEFAULT_CONNECTIONS, depth: int = DEFAULT_DEPTH,
    client_config_file: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One ``fluvial run --serve`` over the pre-loaded input, with ``clients`` query clients."""
    app_id = f"bench-iq-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    env = {"FLUVIAL_BENCH_INPUT": topic, "FLUVIAL_BENCH_OUTPUT": f"{topic}-out",
           "FLUVIAL_BENCH_APP_ID": app_id, "FLUVIAL_BENCH_BOOTSTRAP": bootstrap,
           "FLUVIAL_BENCH_STATE_DIR": str(work / app_id)}  # fmt: skip
    if client_config_file is not None:  # fluvial run reads its client settings from there
        env["FLUVIAL_KAFKA_CLIENT_CONFIG"] = str(client_config_file.resolve())
    cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", engine,
           "--serve", f"127.0.0.1:{port}", "--quiet"]  # fmt: skip
    if engine == "spark":
        cmd += ["--master", "local[2]"]
    else:
        cmd.append("--reader-process" if mode == "reader" else "--no-reader-process")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    all_cpus = list(range(os.cpu_count() or 1))
    if cpus != all_cpus and shutil.which("taskset"):
        # The harness may run pinned beside the broker: the application, its reader and the
        # clients get every core, as on a host of their own.
        cmd = ["taskset", "-c", ",".join(map(str, all_cpus)), *cmd]
    log = open(work / f"{app_id}.log", "wb")  # noqa: SIM115 - closed below
    proc = children.popen(cmd, **child_env(env), stdout=log, stderr=subprocess.STDOUT)
    broker = _listener_pid(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))
    expected = 2 * records  # every view passes both sub-topologies (all are long views)
    workers: list[Any] = []
    try:
        progress: list[tuple[float, float]] = []
        deadline = time.monotonic() + 600
        context = multiprocessing.get_context("spawn")
        queue: Any = context.Queue()
        stop = context.Event()
        cpu: dict[str, float] = {}
        reader: int | None = None
        load_before = os.getloadavg()
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError((work / f"{app_id}.log").read_text()[-2000:])
            try:
                done = _scrape(port)
            except OSError:
                time.sleep(0.1)
                continue
            progress.append((time.monotonic(), done))
            if done > 0 and not cpu:
                child_pids = _children(proc.pid)
                reader = child_pids[0] if child_pids else None
                cpu = {"app": _cpu_seconds(proc.pid), "reader": _cpu_seconds(reader),
                       "broker": _cpu_seconds(broker)}  # fmt: skip
                if clients:
                    workers = [
                        context.Process(
                            target=_client,
                            daemon=True,
                            args=(
                                port,
                                windows,
                                stop,
                                queue,
                                rate / clients,
                                connections,
                                depth,
                                all_cpus,
                            ),
                        )  # fmt: skip
                        for _ in range(clients)
                    ]
                    for worker in workers:
                        worker.start()
            if done >= expected:
                break
            time.sleep(0.2)
        cpu = {"app": _cpu_seconds(proc.pid) - cpu["app"],
               "reader": _cpu_seconds(reader) - cpu["reader"],
               "broker": _cpu_seconds(broker) - cpu["broker"]}  # fmt: skip
        load_after = os.getloadavg()
        first = next(t for t, d in progress if d > 0)
        last = next(t for t, d in progress if d >= expected)
        seconds = last - first
        result: dict[str, Any] = {
            "mode": mode if clients else None,
            "clients": clients,
            "offered_rate": rate or None,
            "records": records,
            "processing_seconds": round(seconds, 2),
            "processing_rps": round(expected / 2 / max(seconds, 1e-9)),
            "load_average": [round(load_before[0], 2), round(load_after[0], 2)],
        }
        if workers:
            # Stop the clients now: they report what they answered while processing ran.
            stop.set()
            latencies: list[float] = []
            statuses: dict[int, int] = {}
            query_seconds = 0.0
            cpu["clients"] = 0.0
            for _ in workers:
                lat, st, client_cpu, ran = queue.get(timeout=60)
                latencies += lat
                query_seconds = max(query_seconds, ran)
                cpu["clients"] += client_cpu
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
        # CPU seconds per second of processing: 1.0 is one core busy all along.
        result["cpu_cores"] = {name: round(used / max(seconds, 1e-9), 2)
                               for name, used in cpu.items()}  # fmt: skip
        return result
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run_query_bench(
    bootstrap: str | None,
    *,
    records: int,
    clients: int,
    engine: str,
    rate: float = 0.0,
    modes: tuple[str, ...] = MODES,
    connections: int = DEFAULT_CONNECTIONS,
    depth: int = DEFAULT_DEPTH,
    rounds: int = 1,
    client_config: dict[str, str] | None = None,
    client_config_file: Path | None = None,
) -> dict[str, Any]:
    """Processing alone, then with queries for each mode, on the same input; ``rounds``
    times over, reporting each variant's medians (and every run). ``client_config`` (read
    from ``client_config_file``, or from the environment the application inherits) holds the
    Kafka client settings of ``bootstrap``."""
    settings = dict(client_config or {})
    from fluvial.bench.environment import describe
    from fluvial.bench.harness import PINNING, kafka

    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: use {' or '.join(MODES)}")
    if engine == "spark":
        modes = ("in-process",)  # each executor answers for its own slots
    with (
        tempfile.TemporaryDirectory(prefix="fluvial-bench-iq-") as work,
        kafka(bootstrap) as servers,
    ):
        topic = f"bench-iq-views-{uuid.uuid4().hex[:8]}"
        create_topics(servers, [TopicSpec(topic, 1), TopicSpec(f"{topic}-out", 1)],
                      admin_config=settings)  # fmt: skip
        base_ms = int(time.time() * 1000) - 3_600_000
        windows = _produce(servers, topic, records, base_ms - base_ms % 60_000, settings)
        runs: list[dict[str, Any]] = []
        for number in range(rounds):
            # Each round runs every variant once; the order turns, so that a machine getting
            # busier or quieter during the bench does not favour one variant.
            variants: list[str | None] = [None, *modes]
            shift = number % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                result = _run_once(servers, topic, records, windows,
                                   clients=clients if variant else 0, engine=engine,
                                   work=Path(work), rate=rate, mode=variant or "reader",
                                   connections=connections, depth=depth,
                                   client_config_file=client_config_file)  # fmt: skip
                result["round"] = number
                runs.append(result)
    alone = [r for r in runs if r["mode"] is None]
    baseline = statistics.median(r["processing_rps"] for r in alone)
    loaded: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        for result in mine:
            result["processing_throughput_lost"] = round(1 - result["processing_rps"] / baseline, 3)
        loaded[mode] = _median_of(mine)
    return {
        "environment": describe(),
        "broker_pinning": PINNING.describe(),
        "engine": engine,
        "rounds": rounds,
        "without_queries": _median_of(alone),
        "with_queries": loaded,
        "runs": runs,
    }


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every number's median over the runs of one variant (of one run: that run)."""
    summary: dict[str, Any] = dict(runs[0])
    summary.pop("round", None)
    for key, value in runs[0].items():
        if key == "round" or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            summary[key] = round(statistics.median(r[key] for r in runs), 3)
        elif key == "cpu_cores":
            summary[key] = {
                name: round(statistics.median(r[key].get(name, 0.0) for r in runs), 2)
                for name in value
            }
        elif key == "load_average":
            summary[key] = [round(min(min(r[key]) for r in runs), 2),
                            round(max(max(r[key]) for r in runs), 2)]  # fmt: skip
    if "statuses" in summary:
        totals: dict[str, int] = {}
        for run in runs:
            for code, count in run.get("statuses", {}).items():
                totals[code] = totals.get(code, 0) + count
        summary["statuses"] = totals
    return summary
