"""``fluvial run``: an application in the foreground with a live status line.

SIGTERM or SIGINT asks every worker to commit and stop. If that takes longer than
``stop_timeout_s`` (Kafka unreachable, say), the process exits without a final commit; a second
SIGINT exits at once. Either way the next start resumes from the last commit, as after a crash.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rich.console import Console

from fluvial.config import StreamsConfig
from fluvial.runtime.engine import Application
from fluvial.runtime.metrics import summarize
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


def _serve_prometheus(app: Application, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") != "/metrics":
                self.send_error(404)
                return
            body = app.prometheus_metrics().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="fluvial-metrics").start()
    return server


def run_application(
    topology: Topology,
    config: StreamsConfig,
    *,
    workers: int | None = None,
    console: Console | None = None,
    prometheus_port: int | None = None,
    live: bool = True,
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
) -> int:
    """Run until stopped; return the process exit code (0 clean, 1 failed)."""
    console = console or Console(stderr=True)
    app = Application(topology, config, workers=workers)
    stopper = SignalStop(app.stop_event.set, timeout_s=stop_timeout_s, console=console)
    stopper.install()
    started = time.monotonic()
    console.print(
        f"fluvial: running {config.application_id} on {config.bootstrap_servers} "
        f"({config.processing_guarantee}, commit every {config.commit_interval_ms} ms)",
        highlight=False,
    )
    # Off the main thread: creating topics blocks in the Kafka client, and signals must not wait.
    run_in_thread(app.start)
    server = _serve_prometheus(app, prometheus_port) if prometheus_port else None
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
        stopper.done()
        if server is not None:
            server.shutdown()
    console.print(f"fluvial: stopped. {status_line(app, started)}", highlight=False)
    if app.errors:
        console.print(f"[bold red]error:[/] {app.errors[0]}", highlight=False, soft_wrap=True)
        return 1
    sys.stdout.flush()
    return 0
