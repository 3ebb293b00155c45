"""Running the served Figure 2 app as a process and asking it questions over HTTP."""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.event_times import event_time_base_ms
from tests.runtime.harness import GRACE_MS, WINDOW_MS, PageView, wait_until

APP = Path(__file__).parent / "apps" / "figure2_served.py"
STORE = "pageview-counts"
MEMORY_STORE = "views-in-memory"
CATEGORIES = [f"cat-{i:02d}" for i in range(12)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def in_grace_views(seed: int, count: int, *, max_step_ms: int = 40) -> list[PageView]:
    """Page views, some out of order but never by more than the grace period.

    No record can be late however the repartitioned partitions interleave, so the final
    counts are exactly the per-window counts of the long views. Event times advance by up to
    ``max_step_ms`` a view and end about ten minutes before now.
    """
    rng = random.Random(seed)
    span_ms = count * max_step_ms // 2  # about where the clock ends
    clock = event_time_base_ms() - (span_ms - span_ms % 60_000 if max_step_ms > 40 else 0)
    views = []
    for _ in range(count):
        clock += rng.randint(0, max_step_ms)
        ts = clock - rng.randint(1, GRACE_MS - 1) if rng.random() < 0.15 else clock
        views.append(PageView(key=f"user-{rng.randint(0, 50)}", category=rng.choice(CATEGORIES),
                              period=rng.choice([10_000, 35_000, 45_000, 60_000]),
                              timestamp_ms=ts))  # fmt: skip
    return views


def counts_of(views: list[PageView]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for view in views:
        if view.period >= 30000:
            counts[(view.category, view.timestamp_ms - view.timestamp_ms % WINDOW_MS)] += 1
    return dict(counts)


def children_of(pid: int) -> list[int]:
    """Live child processes of ``pid`` (zombies left out), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, does not; its other threads
    may still be finishing for a moment)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def get(port: int, path: str, *, token: str | None = None, timeout: float = 10) -> Answer:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status, headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        raw, status, headers = error.read(), error.code, dict(error.headers)
    except http.client.HTTPException as cut:
        # The server went away in the middle of an answer (a kill -9): a connection failure.
        raise ConnectionError(f"the answer was cut off: {cut!r}") from cut
    text = raw.decode()
    try:
        body = json.loads(text)
    except ValueError:
        body = {"text": text}
    return Answer(status, body, headers)


def ask(port: int, path: str, timeout_s: float = 60) -> Answer:
    """A query that follows 503 + Retry-After (restores, slots moving) as a client should."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = get(port, path)
        if answer.status != 503 or time.monotonic() > deadline:
            return answer
        retry_after = answer.headers.get("Retry-After") or answer.headers.get("retry-after")
        assert retry_after is not None, f"503 without Retry-After: {answer.body}"
        time.sleep(min(float(retry_after), 0.5))


@dataclass
class ServedRunner:
    """``fluvial run tests/iq/apps/figure2_served.py --serve`` as a process."""

    bootstrap: str
    app_id: str
    input_topic: str
    output_topic: str
    state_dir: Path
    port: int = field(default_factory=free_port)
    engine: str = "local"
    master: str = "local[2]"
    workers: int = 2
    commit_ms: int = 200
    guarantee: str = "exactly_once_v2"
    #: Committed reads from a reader process (local engine): None leaves the default.
    reader: bool | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: ``--stop-timeout-s``: how long SIGTERM may take to end the lease on its commit.
    stop_timeout_s: float | None = None
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "FLUVIAL_TEST_INPUT": self.input_topic,
            "FLUVIAL_TEST_OUTPUT": self.output_topic,
            "FLUVIAL_TEST_APP_ID": self.app_id,
            "FLUVIAL_TEST_BOOTSTRAP": self.bootstrap,
            "FLUVIAL_TEST_GUARANTEE": self.guarantee,
            "FLUVIAL_TEST_COMMIT_MS": str(self.commit_ms),
            "FLUVIAL_TEST_STATE_DIR": str(self.state_dir),
            "FLUVIAL_SPARK_LEASE_MS": "4000",
            **self.extra_env,
        }
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", self.engine,
               "--workers", str(self.workers), "--serve", f"127.0.0.1:{self.port}",
               "--quiet"]  # fmt: skip
        if self.engine == "spark":
            cmd += ["--master", self.master]
        if self.stop_timeout_s is not None:
            cmd += ["--stop-timeout-s", str(self.stop_timeout_s)]
        if self.reader is not None:
            cmd.append("--reader-process" if self.reader else "--no-reader-process")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.state_dir / f"run-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_serving(self, timeout_s: float = 300) -> None:
        """Wait until every task answers queries (every slot registered, on Spark)."""

        def serving() -> bool:
            assert self.alive(), self.output()
            try:
                health = get(self.port, "/health", timeout=2)
            except OSError:
                return False
            body = health.body
            if self.engine == "spark":
                slots = body.get("slots") or {}
                return len(slots) == self.workers and all(slots.values())
            return bool(body.get("tasks")) and body.get("tasks_serving") == body.get("tasks")

        try:
            wait_until(serving, timeout_s, "every task to serve queries", interval_s=0.2)
        except AssertionError as error:
            try:
                health = get(self.port, "/health", timeout=2).body
            except OSError as down:
                health = {"unreachable": str(down)}
            raise AssertionError(
                f"{error}; health {health}; log:\n{self.output()[-3000:]}"
            ) from None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.terminate()
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def reader_pid(self) -> int | None:
        """The reader process serving the application's committed reads, if any."""
        assert self.proc is not None
        children = children_of(self.proc.pid)
        return children[0] if children else None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""


def standby_lags(port: int) -> dict[tuple[str, str], float]:
    """The driver's ``fluvial_standby_lag_records`` per (slot, task), and the per-slot gauge
    and applied counter, as Prometheus reads them."""
    text = get(port, "/metrics").body["text"]
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "fluvial_standby_lag_records":
                found[(sample.labels["slot"], sample.labels["task"])] = sample.value
            elif sample.name == "fluvial_worker_standby_lag":
                found[(sample.labels["slot"], "all")] = sample.value
            elif sample.name == "fluvial_worker_standby_applied_total":
                found[(sample.labels["slot"], "applied")] = sample.value
    return found


def standbys_caught_up(port: int, tasks_by_slot: dict[str, list[str]]) -> bool:
    """Whether every slot's standbys (``{"0": ["1_1", "1_3"], ...}``) have applied every
    record of their changelogs, as the driver's metrics last heard from the slots."""
    lags = standby_lags(port)
    every = all(lags.get((s, t)) == 0 for s, tasks in tasks_by_slot.items() for t in tasks)
    return every and all(
        lags.get((s, "all")) == 0 and lags.get((s, "applied"), 0) > 0 for s in tasks_by_slot
    )
