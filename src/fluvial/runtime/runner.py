"""``fluvial run``: an application in the foreground with a live status line.

SIGTERM or SIGINT asks every worker to commit and stop. If that takes longer than
``stop_timeout_s`` (Kafka unreachable, say), the process exits without a final commit; a second
SIGINT exits at once. Either way the next start resumes from the last commit, as after a crash.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.iq.board import TaskBoard, board_path, remove_stale_reader_dirs
from fluvial.iq.server import (
    DEFAULT_HOST,
    TOKEN_ENV,
    HttpServer,
    QueryMetrics,
    QueryService,
    listen,
    make_app,
    parse_address,
)
from fluvial.iq.server import serve as start_server
from fluvial.iq.service import LocalQueryService
from fluvial.metrics import WorkerMetricsCollector, summarize
from fluvial.runtime.app_lag import LagWatch
from fluvial.runtime.deployments import DeploymentPolicy
from fluvial.runtime.engine import Application
from fluvial.runtime.shutdown import DEFAULT_STOP_TIMEOUT_S, SignalStop, run_in_thread
from fluvial.topology.topology import Topology

if TYPE_CHECKING:
    from fluvial.iq.reader import ReaderProcess

STATUS_INTERVAL_S = 0.5
PLAIN_STATUS_INTERVAL_S = 5.0


#: Status-line fields of the records that reached no output, by reason (shown when not 0).
_DROPPED_FIELDS = (
    ("null_key_records", "null-key"),
    ("invalid_timestamps", "bad-time"),
    ("undecodable_records", "undecodable"),
    ("failed_records", "failed"),
    ("dead_letters", "dead-letters"),
    ("unproduced_records", "unproduced"),
)


def status_line(app: Application, started: float, watch: LagWatch | None = None) -> str:
    """``in … out … commits … lag … late …`` and the other reasons records were dropped.

    ``lag`` is the whole application's (source and repartition topics, from ``watch``) when
    known, else what the workers measured; "caught up" only when both say nothing is left.
    """
    totals = summarize(app.metrics())
    lag = int(totals["lag"])
    whole = watch.latest if watch is not None else None
    # Until the whole application's lag is read, a worker's own (which knows nothing of records
    # it has not fetched yet) must not pass for "caught up".
    lag_text = "lag ?" if watch is not None and whole is None else f"lag {lag:,}"
    if whole is not None:
        lag = max(lag, whole.total)
        lag_text = f"lag {lag:,}" + ("+" if not all(p.exact for p in whole.partitions) else "")
        if lag == 0 and whole.caught_up:
            lag_text = "lag 0 (caught up)"
    line = (
        f"in {int(totals['records_in']):,}  out {int(totals['records_out']):,}  "
        f"commits {int(totals['commits']):,}  {lag_text}  "
        f"late {int(totals['late_records']):,}"
    )
    for name, label in _DROPPED_FIELDS:
        if totals[name]:
            line += f"  {label} {int(totals[name]):,}"
    stores, done = int(totals["stores_to_restore"]), int(totals["stores_restored"])
    if done < stores:
        line += f"  restoring {done} of {stores} stores"
        if totals["restore_total"]:
            line += f" ({int(totals['restored']):,} of {int(totals['restore_total']):,} records)"
    return line + f"  [{time.monotonic() - started:.0f}s]"


class Endpoints:
    """The HTTP endpoints of a running application: ``--serve`` and ``--prometheus-port``.

    Both run on the same server stack (Starlette on uvicorn); ``/metrics`` is on both. With a
    reader process (:mod:`fluvial.iq.reader`), the ``--serve`` address is the reader's, and
    this process answers the reader on a private endpoint.
    """

    def __init__(self) -> None:
        self.servers: list[HttpServer] = []
        self.query_metrics: QueryMetrics | None = None
        self.address: str | None = None
        self.reader: ReaderProcess | None = None
        self._listener: socket.socket | None = None
        self._board: TaskBoard | None = None

    def start(
        self,
        app: Any,
        service: QueryService | None,
        *,
        serve: str | None,
        prometheus_port: int | None,
        reader_app_file: Path | None = None,
    ) -> None:
        """``reader_app_file``: serve committed reads from a reader process that loads it."""
        token = os.environ.get(TOKEN_ENV) or None
        collectors = [WorkerMetricsCollector(app.config.application_id, app.metrics)]
        if serve and reader_app_file is not None:
            self._start_reader(app, service, serve, token, collectors, reader_app_file)
        elif serve:
            server, self.query_metrics = start_server(service, serve, token=token,
                                                      collectors=collectors)  # fmt: skip
            self.servers.append(server)
            self.address = f"{server.host}:{server.port}"
        if prometheus_port:
            server, _ = start_server(None, f"{DEFAULT_HOST}:{prometheus_port}", token=token,
                                     collectors=collectors)  # fmt: skip
            self.servers.append(server)

    def _start_reader(
        self,
        app: Any,
        service: QueryService | None,
        serve: str,
        token: str | None,
        collectors: list[Any],
        app_file: Path,
    ) -> None:
        # Imported here: its HTTP client takes a while to import, and only the reader needs it.
        from fluvial.iq.reader import ReaderProcess, worker_metrics_route

        config = app.config
        # Bound here: a bad address fails before anything starts, and queries wait in the
        # socket's backlog, never refused, while the reader starts.
        self._listener = listen(serve, token=token)
        host, port = self._listener.getsockname()[:2]
        self.address = f"{host}:{port}"
        private, _ = make_app(service, token=token, collectors=collectors,
                              internal=worker_metrics_route(app.metrics))  # fmt: skip
        server = HttpServer(private, DEFAULT_HOST, 0, name="fluvial-app-queries")
        server.start()
        self.servers.append(server)
        state_root = Path(config.state_dir) / config.application_id
        remove_stale_reader_dirs(state_root)
        self._board = app.task_board = TaskBoard(board_path(state_root))
        self.reader = ReaderProcess(
            app_file, application_id=config.application_id, state_root=state_root,
            exactly_once=config.exactly_once, sock=self._listener,
            application_address=f"{DEFAULT_HOST}:{server.port}", board=self._board.path,
        )  # fmt: skip
        self.reader.start()
        board = self._board

        def stopping() -> None:
            # Health says "stopped" as soon as a stop is asked for, as the in-process one does.
            app.stop_event.wait()
            board.stopped()

        threading.Thread(target=stopping, name="fluvial-board-stop", daemon=True).start()

    def wait_ready(self) -> None:
        if self.reader is not None:
            self.reader.wait_ready()

    def check_reader(self, console: Console) -> None:
        """Start the reader again if it died: the --serve address must keep answering."""
        if self.reader is None or self.reader.alive():
            return
        console.print("fluvial: the query reader process exited; starting it again",
                      highlight=False)  # fmt: skip
        try:
            self.reader.stop()
            self.reader.start()
            self.reader.wait_ready()
        except StreamsError as error:
            console.print(f"fluvial: {error}", highlight=False)

    def stop(self) -> None:
        if self.reader is not None:
            self.reader.stop()
            self.reader = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for server in self.servers:
            server.stop()
        self.servers.clear()
        if self._board is not None:
            self._board.close()
            shutil.rmtree(self._board.path.parent, ignore_errors=True)
            self._board = None


def check_serve_address(serve: str | None) -> None:
    """Refuse a malformed ``--serve`` before anything starts."""
    if serve:
        parse_address(serve)


def use_reader_process(
    config: StreamsConfig, serve: str | None, app_file: Path | None, reader: bool | None
) -> bool:
    """Whether committed reads are served by a reader process (see :mod:`fluvial.iq.reader`).

    By default they are under exactly-once, where queries are committed unless they ask
    otherwise; under at-least-once they default to ``latest``, which only the application
    process can answer.
    """
    if reader and app_file is None:
        raise StreamsError(
            "a query reader process loads the application from its file: run it with "
            "'fluvial run APP.py', or serve queries in-process"
        )
    if not serve or app_file is None:
        return False
    return config.exactly_once if reader is None else reader


def run_application(
    topology: Topology,
    config: StreamsConfig,
    *,
    workers: int | None = None,
    console: Console | None = None,
    prometheus_port: int | None = None,
    live: bool = True,
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    serve: str | None = None,
    app_file: Path | None = None,
    reader: bool | None = None,
    deployment: DeploymentPolicy | None = None,
) -> int:
    """Run until stopped; return the process exit code (0 clean, 1 failed).

    ``serve`` (``HOST:PORT``) serves interactive queries, health and metrics over HTTP.
    ``reader`` serves its committed reads from a reader process that loads ``app_file``
    (by default under exactly-once, when ``app_file`` is given), or in this process (False).
    """
    console = console or Console(stderr=True)
    check_serve_address(serve)
    with_reader = use_reader_process(config, serve, app_file, reader)
    app = Application(topology, config, workers=workers, deployment=deployment)
    stopper = SignalStop(app.stop_event.set, timeout_s=stop_timeout_s, console=console)
    stopper.install()
    started = time.monotonic()
    console.print(
        f"fluvial: running {config.application_id} on {config.bootstrap_servers} "
        f"({config.processing_guarantee}, commit every {config.commit_interval_ms} ms)",
        highlight=False,
    )
    endpoints = Endpoints()
    service = LocalQueryService(lambda: app.queries, application_id=config.application_id,
                                running=lambda: not app.stop_event.is_set())  # fmt: skip
    # Serve before the tasks restore: a query meanwhile gets 503 with Retry-After.
    endpoints.start(app, service, serve=serve, prometheus_port=prometheus_port,
                    reader_app_file=app_file if with_reader else None)  # fmt: skip
    if serve:
        reading = " (committed reads in a reader process)" if with_reader else ""
        console.print(f"fluvial: serving queries on http://{endpoints.address}{reading}",
                      highlight=False)  # fmt: skip
    try:
        # The reader answers before the tasks restore, so that a query meanwhile gets 503.
        run_in_thread(endpoints.wait_ready)
        # Off the main thread: creating topics blocks in the Kafka client, and signals
        # must not wait.
        run_in_thread(app.start)
    except BaseException:
        endpoints.stop()
        raise
    console.print(
        f"fluvial: {len(app.task_ids)} task(s) on {len(app.workers)} worker(s); "
        "Ctrl-C commits and stops",
        highlight=False,
    )
    watch = LagWatch(topology, config).start() if live else None
    try:
        if live and console.is_terminal:
            with console.status(status_line(app, started, watch)) as status:
                while not app.wait(STATUS_INTERVAL_S):
                    status.update(status_line(app, started, watch))
                    endpoints.check_reader(console)
        else:
            last = time.monotonic()
            while not app.wait(STATUS_INTERVAL_S):
                endpoints.check_reader(console)
                if live and time.monotonic() - last >= PLAIN_STATUS_INTERVAL_S:
                    console.print(status_line(app, started, watch), highlight=False)
                    last = time.monotonic()
    finally:
        run_in_thread(app.close)
        endpoints.stop()
        if watch is not None:
            watch.stop()
        stopper.done()  # stopped in time: the deadline no longer applies
    console.print(f"fluvial: stopped. {status_line(app, started, watch)}", highlight=False)
    if app.errors:
        console.print(f"[bold red]error:[/] {app.errors[0]}", highlight=False, soft_wrap=True)
        return 1
    sys.stdout.flush()
    return 0
