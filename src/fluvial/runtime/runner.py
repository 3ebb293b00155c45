"""``fluvial run``: an application in the foreground with a live status line.

SIGTERM or SIGINT asks every worker to commit and stop. If that takes longer than
``stop_timeout_s`` (Kafka unreachable, say), the process exits without a final commit; a second
SIGINT exits at once. Either way the next start resumes from the last commit, as after a crash.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rich.console import Console

from fluvial.config import StreamsConfig
from fluvial.runtime.engine import Application
from fluvial.runtime.metrics import WorkerMetricsCollector, summarize
from fluvial.runtime.server import (
    DEFAULT_HOST,
    TOKEN_ENV,
    HttpServer,
    QueryMetrics,
    QueryService,
    parse_address,
)
from fluvial.runtime.server import serve as start_server
from fluvial.runtime.serving import LocalQueryService
from fluvial.runtime.shutdown import DEFAULT_STOP_TIMEOUT_S, SignalStop, run_in_thread
from fluvial.topology.topology import Topology

STATUS_INTERVAL_S = 0.5
PLAIN_STATUS_INTERVAL_S = 5.0


def status_line(app: Application, started: float) -> str:
    totals = summarize(app.metrics())
    line = (
        f"in {int(totals['records_in']):,}  out {int(totals['records_out']):,}  "
        f"commits {int(totals['commits']):,}  lag {int(totals['lag']):,}  "
        f"dropped-late {int(totals['dropped_records']):,}"
    )
    if totals["restore_total"]:
        line += f"  restored {int(totals['restored']):,}/{int(totals['restore_total']):,}"
    return line + f"  [{time.monotonic() - started:.0f}s]"


class Endpoints:
    """The HTTP endpoints of a running application: ``--serve`` and ``--prometheus-port``.

    Both run on the same server stack (Starlette on uvicorn); ``/metrics`` is on both.
    """

    def __init__(self) -> None:
        self.servers: list[HttpServer] = []
        self.query_metrics: QueryMetrics | None = None

    def start(
        self,
        app: Any,
        service: QueryService | None,
        *,
        serve: str | None,
        prometheus_port: int | None,
    ) -> None:
        token = os.environ.get(TOKEN_ENV) or None
        collectors = [WorkerMetricsCollector(app.config.application_id, app.metrics)]
        if serve:
            server, self.query_metrics = start_server(service, serve, token=token,
                                                      collectors=collectors)  # fmt: skip
            self.servers.append(server)
        if prometheus_port:
            server, _ = start_server(None, f"{DEFAULT_HOST}:{prometheus_port}", token=token,
                                     collectors=collectors)  # fmt: skip
            self.servers.append(server)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()


def check_serve_address(serve: str | None) -> None:
    """Refuse a malformed ``--serve`` before anything starts."""
    if serve:
        parse_address(serve)


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
) -> int:
    """Run until stopped; return the process exit code (0 clean, 1 failed).

    ``serve`` (``HOST:PORT``) serves interactive queries, health and metrics over HTTP.
    """
    console = console or Console(stderr=True)
    check_serve_address(serve)
    app = Application(topology, config, workers=workers)
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
    endpoints.start(app, service, serve=serve, prometheus_port=prometheus_port)
    if serve:
        console.print(f"fluvial: serving queries on http://{endpoints.servers[0].host}:"
                      f"{endpoints.servers[0].port}", highlight=False)  # fmt: skip
    try:
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
    try:
        if live and console.is_terminal:
            with console.status(status_line(app, started)) as status:
                while not app.wait(STATUS_INTERVAL_S):
                    status.update(status_line(app, started))
        else:
            last = time.monotonic()
            while not app.wait(STATUS_INTERVAL_S):
                if live and time.monotonic() - last >= PLAIN_STATUS_INTERVAL_S:
                    console.print(status_line(app, started), highlight=False)
                    last = time.monotonic()
    finally:
        run_in_thread(app.close)
        endpoints.stop()
        stopper.done()  # stopped in time: the deadline no longer applies
    console.print(f"fluvial: stopped. {status_line(app, started)}", highlight=False)
    if app.errors:
        console.print(f"[bold red]error:[/] {app.errors[0]}", highlight=False, soft_wrap=True)
        return 1
    sys.stdout.flush()
    return 0
