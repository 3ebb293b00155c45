"""``fluvial run`` on the Spark engine: the same foreground loop and status line as the local one.

SIGTERM or SIGINT lets the current lease end on its commit and stops, within
``stop_timeout_s``; past it, or on a second SIGINT, the lease is cancelled and the process
exits (the next start resumes from the last commit, as after a crash).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console

from fluvial.config import StreamsConfig
from fluvial.runtime.app_lag import LagWatch
from fluvial.runtime.deployments import DeploymentPolicy
from fluvial.runtime.runner import (
    PLAIN_STATUS_INTERVAL_S,
    STATUS_INTERVAL_S,
    Endpoints,
    check_serve_address,
    status_line,
)
from fluvial.runtime.shutdown import DEFAULT_STOP_TIMEOUT_S, SignalStop, run_in_thread
from fluvial.spark.engine import SparkApplication


def run_spark_application(
    app_path: Path,
    config: StreamsConfig,
    *,
    master: str = "local[*]",
    workers: int | None = None,
    console: Console | None = None,
    prometheus_port: int | None = None,
    live: bool = True,
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    serve: str | None = None,
    pack: bool | None = None,
    spark_conf: dict[str, str] | None = None,
    deployment: DeploymentPolicy | None = None,
) -> int:
    """Run until stopped; return the process exit code (0 clean, 1 failed).

    ``pack``: ship a packed environment with fluvial to the executors (``fluvial pack``);
    by default on for cluster masters (anything but ``local``).
    """
    from fluvial.spark.pack import ensure_packed, is_cluster_master

    console = console or Console(stderr=True)
    check_serve_address(serve)
    python_env = None
    if is_cluster_master(master) if pack is None else pack:
        python_env = ensure_packed(say=lambda line: console.print(f"fluvial: {line}",
                                                                  highlight=False))  # fmt: skip
        console.print(
            f"fluvial: executors run Python from {python_env.archive.name} "
            f"({'built' if python_env.built else 'reused'}; spark.archives)",
            highlight=False,
            soft_wrap=True,
        )
    app = SparkApplication(app_path, config, master=master, slots=workers, python_env=python_env,
                           spark_conf=spark_conf, deployment=deployment)  # fmt: skip
    started = time.monotonic()
    console.print(
        f"fluvial: running {config.application_id} on {config.bootstrap_servers} "
        f"({config.processing_guarantee}, commit every {config.commit_interval_ms} ms) "
        f"on Spark {master}, leases of {app.lease_seconds:g} s",
        highlight=False,
        soft_wrap=True,
    )
    # Spark's jobs are cancelled before a forced exit; the JVM exits with this process.
    stopper = SignalStop(
        app.stop_event.set, timeout_s=stop_timeout_s, console=console, before_exit=app.cancel
    )
    # Before start(): a signal during Spark's start-up must not leave a half-started JVM.
    stopper.install()
    # Serve before Spark starts: queries meanwhile get 503 with Retry-After.
    endpoints = Endpoints()
    router = app.router if serve else None
    endpoints.start(app, router, serve=serve, prometheus_port=prometheus_port)
    if router is not None:
        router.metrics = endpoints.query_metrics
        server = endpoints.servers[0]
        console.print(f"fluvial: serving queries on http://{server.host}:{server.port}, "
                      "routed to the slots", highlight=False)  # fmt: skip
    try:
        run_in_thread(app.start)
    except BaseException:
        endpoints.stop()
        raise
    # The SparkContext installs its own SIGINT handler (cancel all jobs, raise): ours wins,
    # so that Ctrl-C lets the lease commit.
    stopper.install()
    ui = f", UI {app.ui_url}" if app.ui_url else ""
    console.print(
        f"fluvial: {len(app.task_ids)} task(s) on {len(app.layout)} slot(s) "
        f"(Spark {app.sc.master}{ui}, job group {app.job_group}); Ctrl-C commits and stops",
        highlight=False,
        soft_wrap=True,
    )
    watch = LagWatch(app.topology, app.config).start() if live else None
    try:
        if live and console.is_terminal:
            with console.status(status_line(app, started, watch)) as status:  # type: ignore[arg-type]
                while not app.wait(STATUS_INTERVAL_S):
                    status.update(status_line(app, started, watch))  # type: ignore[arg-type]
        else:
            last = time.monotonic()
            while not app.wait(STATUS_INTERVAL_S):
                if live and time.monotonic() - last >= PLAIN_STATUS_INTERVAL_S:
                    console.print(status_line(app, started, watch), highlight=False)  # type: ignore[arg-type]
                    last = time.monotonic()
    finally:
        run_in_thread(app.close)
        endpoints.stop()
        if watch is not None:
            watch.stop()
        stopper.done()  # stopped in time: the deadline no longer applies
    console.print(f"fluvial: stopped. {status_line(app, started, watch)}", highlight=False)  # type: ignore[arg-type]
    if app.errors:
        console.print(f"[bold red]error:[/] {app.errors[0]}", highlight=False, soft_wrap=True)
        return 1
    sys.stdout.flush()
    return 0
