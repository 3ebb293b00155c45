"""Egress declared by an application: sinks that ``fluvial run`` runs beside the topology.

An ``APP.py`` may end its pipeline in a database::

    def build(builder):
        ... .to("pageview-windowed-counts", key_serde=..., value_serde=serdes.long())

    egress = [
        PostgresSink("pageview-windowed-counts", table="pageview_counts", mode="upsert",
                     dsn=os.environ["PAGEVIEWS_DSN"], value_serde="long", window_size_ms=5000),
    ]

Each sink reads the application's output topic ``read_committed``, so it sees exactly what the
application committed, and runs in its own thread of the ``fluvial run`` process. Sinks that
name no ``bootstrap_servers`` use the application's (and its ``client_config``). When a sink
fails, the application is stopped too; when the application stops, so do its sinks, each
after committing its current batch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fluvial.errors import ConfigError, FluvialError


def declared_egress(app_file: Path | str) -> list[Any]:
    """The ``egress`` list of an already loaded ``APP.py`` (empty when it declares none)."""
    module = sys.modules.get(f"fluvial_app_{Path(app_file).stem}")
    declared = getattr(module, "egress", None) if module is not None else None
    if declared is None:
        return []
    from fluvial.sinks.postgres import PostgresSink  # the driver loads only when needed

    sinks = list(declared) if isinstance(declared, list | tuple) else [declared]
    for sink in sinks:
        if not isinstance(sink, PostgresSink):
            raise ConfigError(
                f"'egress' in {app_file} holds {type(sink).__name__}; it must be a list of "
                "fluvial.sinks.PostgresSink"
            )
    return sinks


class Egress:
    """The running sinks of one application."""

    def __init__(
        self,
        sinks: list[Any],
        *,
        bootstrap_servers: str,
        client_config: dict[str, Any] | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        self.sinks = [
            s.bind(bootstrap_servers=bootstrap_servers, client_config=client_config) for s in sinks
        ]
        for sink in self.sinks:
            sink._validate_runnable()
        self.say = say
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._started = False

    def start(self, timeout_s: float = 120) -> None:
        """Start every sink and wait until each has claimed its partitions, so a sink that
        cannot run (a missing topic, table or column) fails before the application starts."""
        for sink in self.sinks:
            ready = threading.Event()
            thread = threading.Thread(
                target=self._run, args=(sink, ready), name=f"fluvial-egress-{sink.sink_id}",
                daemon=True,
            )  # fmt: skip
            thread.start()
            self._threads.append(thread)
            while not ready.wait(0.1):
                if not thread.is_alive() or timeout_s <= 0:
                    break
                timeout_s -= 0.1
            if self.errors:
                self.stop()
                raise FluvialError(f"egress {sink.sink_id!r} cannot start: {self.errors[0]}")
            if not ready.is_set():
                self.stop()
                raise FluvialError(
                    f"egress {sink.sink_id!r} did not claim its partitions in time: is "
                    "PostgreSQL reachable, and is another process holding its offset rows?"
                )
        self._started = True

    def _run(self, sink: Any, ready: threading.Event) -> None:
        def on_ready(progress: Any) -> None:
            self.say(f"egress: {sink.describe()} (epoch {progress.epoch})")
            ready.set()

        try:
            sink.run(on_ready=on_ready)
        except BaseException as exc:
            self.errors.append(exc)
            if self._started:
                self.say(f"egress: {sink.sink_id} failed: {exc}")
                # The application stops with its egress: output that never lands is no
                # progress. (Before the start completes, start() reports the error itself.)
                os.kill(os.getpid(), signal.SIGTERM)

    def stop(self, timeout_s: float = 60) -> None:
        for sink in self.sinks:
            sink.stop()
        for thread in self._threads:
            thread.join(timeout_s)
        for sink in self.sinks:
            self.say(f"egress: {sink.sink_id} stopped. {sink.progress().line()}")
