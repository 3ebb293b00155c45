"""The reader process: committed interactive queries served beside the application, not in it.

Served from the application's own process, every query costs Python CPU under the GIL that
processing needs too. On the local engine ``fluvial run APP.py --serve`` therefore starts a
reader process that owns the ``--serve`` address and answers ``committed`` queries from the
task stores' files:

- **What it reads.** Under a store's transactional layer, its RocksDB database holds exactly
  the committed state (:mod:`fluvial.state.transactional`). The reader opens each one as a
  RocksDB *secondary* instance, which reads the application's files and sees each of its
  write batches whole or not at all. Before a query it catches up with the application's
  newest writes if the task took in a commit since the last catch-up (the board counts them),
  at most once per :data:`CATCH_UP_INTERVAL_S`: an answer is at most that much behind the
  newest commit, and a catch-up (~0.1-0.5 ms of CPU) is paid per commit, not per query. A
  window or session segment created or dropped since the opening makes the reader open the
  store anew.
- **When it may read.** During a restore a store holds an older or partly rebuilt state. The
  application says where each task stands on a shared board (:mod:`fluvial.iq.board`),
  always *before* a restore touches the files. The reader reads a task only while the board
  says it runs, checks after each catch-up that it still runs in the same generation, and
  answers 503 with ``Retry-After`` otherwise. A committed answer is therefore never taken back,
  and never comes from a past state.
- **What it passes on.** ``latest`` queries read the record cache and the uncommitted buffer,
  which live in the application process: the reader forwards them to a private endpoint of the
  application (127.0.0.1, the same token), and fetches the workers' metrics from there for
  ``/metrics``. Routes, errors, the token and the metrics are those of the in-process service.
- **Its lifetime.** The application binds the ``--serve`` address and hands the listening
  socket over, so bad addresses fail before anything starts and no query is refused while the
  reader starts. The reader exits when the application closes its end of a pipe, and the
  kernel kills it if the application dies (``kill -9`` included), so it is never left behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from fluvial import children
from fluvial.errors import StreamsError
from fluvial.iq.board import RESTORING, RUNNING, BoardView
from fluvial.iq.queries import (
    COMMITTED,
    LATEST,
    LocalQueries,
    QueryError,
    StoreUnavailableError,
    UnknownStoreError,
)
from fluvial.iq.server import TOKEN_ENV, HttpServer, make_app
from fluvial.iq.service import LocalQueryService
from fluvial.metrics import WorkerMetrics, WorkerMetricsCollector
from fluvial.processor.collector import TaskId
from fluvial.processor.stores import create_store_stack
from fluvial.topology.nodes import ROCKSDB, StoreSpec
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

#: A query reads a store caught up with the application's writes at most this long ago.
CATCH_UP_INTERVAL_S = 0.005
#: Where the application process lists its workers' metrics for the reader.
WORKER_METRICS_PATH = "/internal/worker-metrics"
FORWARD_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 120.0


# -- the task stores, read from their files ---------------------------------------------------


class SecondaryTask:
    """One task's persistent stores, opened read-only as RocksDB secondary instances.

    It stands in for a running task in :func:`fluvial.iq.queries.read_task`: its store
    stacks have the same layers (built by the same builder), and only ``bottom``, the RocksDB
    store under the transactional layer, is open.
    """

    #: Handed out only while the board says the task runs (:meth:`SecondaryTasks.find`).
    queryable = True

    def __init__(
        self,
        task_id: TaskId,
        specs: list[StoreSpec],
        task_dir: Path,
        secondary_dir: Path,
        generation: int,
        commits: int,
    ) -> None:
        self.task_id = task_id
        self.generation = generation
        #: The board's commit count before the last catch-up: the files hold at least those.
        self.commits = commits
        # Queries run one at a time on the server's event loop; read_task takes it anyway.
        self.query_lock = threading.Lock()
        self.store_stacks = {spec.name: create_store_stack(spec, ROCKSDB, None) for spec in specs}
        self._open: list[Any] = []
        try:
            for name, stack in self.store_stacks.items():
                if stack.transactional is not None:  # persistent: committed state on disk
                    stack.bottom.open_secondary(task_dir, secondary_dir / name)  # type: ignore[attr-defined]
                    self._open.append(stack.bottom)
        except BaseException:
            self.close()
            raise
        self.caught_up = time.monotonic()

    def catch_up(self) -> bool:
        """See the application's newest writes; ``False``: a store must be opened anew."""
        fresh = True
        for store in self._open:
            fresh = store.catch_up() and fresh
        self.caught_up = time.monotonic()
        return fresh

    def close(self) -> None:
        for store in self._open:
            store.close()
        self._open.clear()


def _why(entry: tuple[int, int, int] | None) -> str:
    """What the application process says of a task that does not serve (see WorkerTasks)."""
    if entry is None:
        return "not running in this process"
    state, slot, _ = entry
    if state == RESTORING:
        return f"restoring its state in slot {slot}"
    if state == RUNNING:
        return "restarting"  # it ran again as soon as the reader looked: a new generation
    return f"starting in slot {slot}"


class SecondaryTasks:
    """The :class:`~fluvial.iq.queries.TaskSource` of the reader: tasks the board says run,
    read from their files."""

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        state_root: Path,
        board: BoardView,
        secondary_root: Path,
        *,
        catch_up_interval_s: float = CATCH_UP_INTERVAL_S,
    ) -> None:
        self._specs = {
            sub.id: list(sub.stores) for sub in topology.subtopologies(application_id)
        }  # fmt: skip
        self._state_root = state_root
        self._board = board
        self._secondary_root = secondary_root
        self._interval = catch_up_interval_s
        self._tasks: dict[TaskId, SecondaryTask] = {}

    def find(self, task_id: TaskId) -> tuple[Any, str]:
        entry = self._board.task(task_id)
        if entry is None:
            return None, _why(entry)
        state, _, generation = entry
        task = self._tasks.get(task_id)
        if state != RUNNING:
            if task is not None:
                self._drop(task_id)
            return None, _why(entry)
        # Read before the files: a commit counted here has reached them.
        commits = self._board.commits(task_id)
        if task is not None and task.generation == generation:
            if commits == task.commits or time.monotonic() - task.caught_up < self._interval:
                return task, "running"
            try:
                fresh = task.catch_up()
            except Exception as error:  # the files moved under the reader: open them anew
                log.info("reader: catching up task %s failed (%s); reopening", task_id, error)
                fresh = False
            # Checked after the catch-up: the board changes before a restore touches the files,
            # so the same word here means the files held this generation's committed state.
            now = self._board.task(task_id)
            if fresh and now == entry:
                task.commits = commits
                return task, "running"
            self._drop(task_id)
            if now != entry:  # the task stopped or restarted meanwhile
                return None, _why(now)
        elif task is not None:
            self._drop(task_id)  # an older generation: the task was opened anew since
        try:
            task = SecondaryTask(
                task_id, self._specs[task_id.subtopology], self._state_root / str(task_id),
                self._secondary_root / str(task_id), generation, commits,
            )  # fmt: skip
        except StreamsError as error:
            log.warning("reader: cannot open task %s: %s", task_id, error)
            raise StoreUnavailableError(
                f"task {task_id} cannot be read yet ({error}): ask again shortly"
            ) from None
        now = self._board.task(task_id)
        if now != entry:
            task.close()
            return None, _why(now)
        self._tasks[task_id] = task
        return task, "running"

    def slot_of(self, task_id: TaskId) -> int | None:
        entry = self._board.task(task_id)
        return entry[1] if entry is not None else None

    def _drop(self, task_id: TaskId) -> None:
        task = self._tasks.pop(task_id, None)
        if task is not None:
            task.close()

    def close(self) -> None:
        for task_id in list(self._tasks):
            self._drop(task_id)


# -- the application process, asked for what only it has ---------------------------------------


class ApplicationLink:
    """The application process's private endpoint: ``latest`` queries and worker metrics."""

    def __init__(self, address: str, token: str | None) -> None:
        self.base_url = f"http://{address}"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client: httpx.AsyncClient | None = None
        self._sync = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=5.0)

    async def query(
        self, store: str, op: str, key: str | None, params: dict[str, str]
    ) -> dict[str, Any]:
        """Ask the application process; its refusals come back as the same errors."""
        if self._client is None:  # made on the server's event loop, used only there
            self._client = httpx.AsyncClient(
                base_url=self.base_url, headers=self._headers, timeout=FORWARD_TIMEOUT_S,
                limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
            )  # fmt: skip
        path = f"/stores/{quote(store, safe='')}/"
        path += f"keys/{quote(key or '', safe='')}" if op == "key" else op
        try:
            response = await self._client.get(path, params=params)
        except httpx.HTTPError as error:
            raise StoreUnavailableError(
                f"the application process did not answer ({type(error).__name__}): ask "
                "again shortly"
            ) from None
        try:
            body: dict[str, Any] = response.json()
        except ValueError:
            body = {"error": response.text}
        if response.status_code == 200:
            return body
        message = str(body.get("error", ""))
        if response.status_code == 503:
            retry = response.headers.get("retry-after", "1")
            raise StoreUnavailableError(message, retry_after_s=int(retry) if retry.isdigit() else 1)
        if response.status_code == 404:
            raise UnknownStoreError(message)
        if 400 <= response.status_code < 500:
            raise QueryError(message)
        raise StreamsError(message.removeprefix("the query failed: "))

    def worker_metrics(self) -> list[WorkerMetrics]:
        try:
            rows = self._sync.get(WORKER_METRICS_PATH).json()
        except (httpx.HTTPError, ValueError):
            return []  # the application is starting or stopping: no samples this time
        return [WorkerMetrics(**row) for row in rows]


# -- the service --------------------------------------------------------------------------------


class ReaderQueryService:
    """The :class:`~fluvial.iq.server.QueryService` of the reader process.

    ``committed`` queries read the task stores' files; ``latest`` queries go to the
    application process, which holds the newest uncommitted state.
    """

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        *,
        exactly_once: bool,
        board: BoardView,
        tasks: SecondaryTasks,
        link: ApplicationLink,
    ) -> None:
        self.topology = topology
        self.application_id = application_id
        self.exactly_once = exactly_once
        self.board = board
        self.tasks = tasks
        self.link = link
        self._queries: LocalQueries | None = None
        self._local = LocalQueryService(self._ready_queries, application_id=application_id,
                                        running=lambda: self.board.running)  # fmt: skip

    def _ready_queries(self) -> LocalQueries | None:
        if self._queries is None and self.board.ready():
            self._queries = LocalQueries(self.topology, self.application_id, self.board.task_ids,
                                         self.tasks, exactly_once=self.exactly_once)  # fmt: skip
        return self._queries

    def stores(self) -> list[dict[str, Any]]:
        return self._local.stores()

    def health(self) -> tuple[bool, dict[str, Any]]:
        body: dict[str, Any] = {"application_id": self.application_id}
        if not self.board.ready():
            body["status"] = "starting"
            return True, body
        running = self.board.running
        serving, assigned = self.board.serving()
        body.update(status="running" if running else "stopped", tasks_serving=serving,
                    tasks=assigned, default_isolation=COMMITTED if self.exactly_once else LATEST)  # fmt: skip
        return running, body

    def execute(self, store: str, op: str, key: str | None, params: dict[str, str]) -> Any:
        isolation = params.get("isolation")
        if isolation == LATEST or (isolation is None and not self.exactly_once):
            return self.link.query(store, op, key, params)  # awaited by the HTTP layer
        return self._local.execute(store, op, key, params)


# -- the reader process -------------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when the application process dies, however it dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before the request took effect
        os._exit(1)


def main() -> None:
    """``python -m fluvial.iq.reader``: settings as one JSON line on stdin, then serve
    until stdin closes. Reports ``ready`` or ``error <message>`` on stdout."""
    settings = json.loads(sys.stdin.readline())
    _die_with_parent(int(settings["parent_pid"]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the application decides when to stop
    # The reports go to the original stdout; anything else printed (the app's own code) to stderr.
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, format="fluvial reader: %(message)s")
    try:
        from fluvial.loader import load_app

        topology = load_app(settings["app_file"]).topology
        application_id = settings["application_id"]
        board = BoardView(Path(settings["board"]))
        tasks = SecondaryTasks(topology, application_id, Path(settings["state_root"]), board,
                               Path(settings["secondary_root"]))  # fmt: skip
        token = os.environ.get(TOKEN_ENV) or None
        link = ApplicationLink(settings["application"], token)
        service = ReaderQueryService(topology, application_id,
                                     exactly_once=bool(settings["exactly_once"]), board=board,
                                     tasks=tasks, link=link)  # fmt: skip
        collectors = [WorkerMetricsCollector(application_id, link.worker_metrics)]
        app, _ = make_app(service, token=token, collectors=collectors)
        sock = socket.socket(fileno=int(settings["listen_fd"]))
        host = str(sock.getsockname()[0])
        server = HttpServer(app, host, 0, name="fluvial-reader", sock=sock)
        server.start()
    except Exception as error:
        report.write(f"error {error}\n")
        report.flush()
        sys.exit(1)
    report.write("ready\n")
    report.flush()
    sys.stdin.read()  # until the application closes its end of the pipe
    server.stop(timeout_s=5)
    tasks.close()


class ReaderProcess:
    """The application's handle on its reader process: start, check, stop."""

    def __init__(
        self,
        app_file: Path,
        *,
        application_id: str,
        state_root: Path,
        exactly_once: bool,
        sock: socket.socket,
        application_address: str,
        board: Path,
    ) -> None:
        self.sock = sock
        self.secondary_root = board.parent / "secondary"
        self._settings = {
            "app_file": str(Path(app_file).resolve()),
            "application_id": application_id,
            "state_root": str(state_root),
            "exactly_once": exactly_once,
            "application": application_address,
            "board": str(board),
            "secondary_root": str(self.secondary_root),
            "listen_fd": sock.fileno(),
            "parent_pid": os.getpid(),
        }
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process; it serves once :meth:`wait_ready` returns."""
        shutil.rmtree(self.secondary_root, ignore_errors=True)
        # It never talks to Kafka: of the secrets, it keeps only the token it checks.
        self._proc = children.popen(
            [sys.executable, "-m", "fluvial.iq.reader"], keep=(TOKEN_ENV,),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(self.sock.fileno(),),
            # Its own process group: a Ctrl-C at the terminal goes to the application, which
            # stops the reader when it is done. The same session, so the same CPU share.
            process_group=0,
        )  # fmt: skip
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(self._settings).encode() + b"\n")
        self._proc.stdin.flush()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for the reader to serve; raise with its reason if it cannot."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                self.stop()
                raise StreamsError(f"the query reader process did not start in {timeout_s:g} s")
        line = proc.stdout.readline().decode().strip()
        if line != "ready":
            self.stop()
            reason = line.removeprefix("error ") or f"it exited with code {proc.returncode}"
            raise StreamsError(f"the query reader process failed to start: {reason}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()  # the reader stops serving and exits
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(self.secondary_root, ignore_errors=True)


def worker_metrics_route(metrics: Callable[[], list[WorkerMetrics]]) -> dict[str, Any]:
    """The application endpoint's route that gives the reader the workers' metrics."""
    return {WORKER_METRICS_PATH: lambda: [asdict(m) for m in metrics()]}


if __name__ == "__main__":
    main()
