"""Interactive queries on the Spark engine: slot endpoints on executors, a router on the driver.

A slot's stores live in the PySpark Python worker process that runs its :class:`Worker`, and
stay open between leases. Each such process serves the tasks it holds over HTTP (the same
Starlette service as the local engine), on 127.0.0.1 or ``FLUVIAL_EXECUTOR_QUERY_HOST``, on a
free port. It registers that endpoint two ways:

- at once, in ``<state_dir>/<application_id>/.slots/slot-<N>.endpoint`` (readable by a driver
  on the same machine or a shared filesystem);
- in every lease result, which reaches the driver wherever the executor runs.

The driver's ``--serve`` endpoint computes a key's partition, task and slot as the local engine
does and forwards the query to the slot's endpoint. A slot that moved (another process, another
executor) answers "not running here" from its old endpoint, or nothing at all; the router then
rereads the registration and tries once more, and otherwise answers 503 with ``Retry-After``.
Scans (ranges, every window) go to every slot, each answering for its own tasks, and are merged.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from fluvial.processor.collector import TaskId
from fluvial.runtime.queries import (
    COMMITTED,
    LATEST,
    Decoder,
    LocalQueries,
    QueryError,
    StoreUnavailableError,
    UnknownStoreError,
    default_partition,
    parse_key,
    store_infos,
)
from fluvial.runtime.server import TOKEN_ENV, HttpServer, QueryMetrics, make_app
from fluvial.runtime.serving import LocalQueryService, WorkerTasks
from fluvial.runtime.worker import Worker
from fluvial.topology.topology import Topology

EXECUTOR_HOST_ENV = "FLUVIAL_EXECUTOR_QUERY_HOST"
FORWARD_TIMEOUT_S = 10.0
#: How long the router follows a moving slot before it answers 503.
MOVE_BUDGET_S = 3.0


# -- the executor side ------------------------------------------------------------------------


class SlotEndpoint:
    """This Python worker process's query endpoint, over the slot Workers it holds."""

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        task_ids: list[TaskId],
        workers: Callable[[], list[Worker]],
        *,
        exactly_once: bool,
    ) -> None:
        self.task_ids = list(task_ids)
        self.queries = LocalQueries(topology, application_id, task_ids, WorkerTasks(workers),
                                    exactly_once=exactly_once)  # fmt: skip
        service = LocalQueryService(
            lambda: self.queries, application_id=application_id, running=lambda: True,
            stale_unavailable="no standby of it serves queries",
        )  # fmt: skip
        app, _ = make_app(service, token=os.environ.get(TOKEN_ENV) or None)
        host = os.environ.get(EXECUTOR_HOST_ENV, "127.0.0.1")
        self.server = HttpServer(app, host, 0, name="fluvial-slot-queries")
        self.server.start()
        self.address = f"{host}:{self.server.port}"

    def register(self, slots_dir: Path, slot: int) -> None:
        """Tell a driver on this machine where the slot answers now."""
        path = slots_dir / f"slot-{slot}.endpoint"
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(self.address)
        partial.replace(path)


_endpoints: dict[str, SlotEndpoint] = {}
_endpoints_lock = threading.Lock()


def slot_endpoint(
    topology: Topology,
    application_id: str,
    task_ids: list[TaskId],
    workers: Callable[[], list[Worker]],
    *,
    exactly_once: bool,
) -> SlotEndpoint:
    """This process's endpoint for the application (one per process, started on first use)."""
    with _endpoints_lock:
        endpoint = _endpoints.get(application_id)
        if endpoint is None:
            endpoint = SlotEndpoint(topology, application_id, task_ids, workers,
                                    exactly_once=exactly_once)  # fmt: skip
            _endpoints[application_id] = endpoint
        elif sorted(endpoint.task_ids) != sorted(task_ids):
            endpoint.task_ids = list(task_ids)
            endpoint.queries = LocalQueries(topology, application_id, task_ids,
                                            WorkerTasks(workers),
                                            exactly_once=exactly_once)  # fmt: skip
        return endpoint


# -- the driver side --------------------------------------------------------------------------


class RoutingQueryService:
    """The driver's query service: forwards each query to the slot that owns the key."""

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        *,
        task_ids: Callable[[], list[TaskId]],
        layout: Callable[[], dict[int, list[TaskId]]],
        reported: Callable[[], dict[int, str]],
        slots_dir: Path,
        exactly_once: bool,
        running: Callable[[], bool],
    ) -> None:
        self.topology = topology
        self.application_id = application_id
        self._task_ids = task_ids
        self._layout = layout
        self._reported = reported
        self._slots_dir = slots_dir
        self.exactly_once = exactly_once
        self._running = running
        self.metrics: QueryMetrics | None = None
        self._token = os.environ.get(TOKEN_ENV) or None
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    # -- where things are -------------------------------------------------------------------

    def _infos(self) -> dict[str, Any]:
        task_ids = self._task_ids()
        if not task_ids:
            raise StoreUnavailableError("the application is starting: ask again shortly")
        return store_infos(self.topology, self.application_id, task_ids)

    def endpoint(self, slot: int) -> str | None:
        """Where a slot answers: its registration file if this machine sees it, else the
        endpoint its last lease reported."""
        path = self._slots_dir / f"slot-{slot}.endpoint"
        try:
            text = path.read_text().strip()
            if text:
                return text
        except OSError:
            pass
        return self._reported().get(slot)

    def slot_of(self, task_id: TaskId) -> int | None:
        for slot, tasks in self._layout().items():
            if task_id in tasks:
                return slot
        return None

    # -- the service ------------------------------------------------------------------------

    def stores(self) -> list[dict[str, Any]]:
        infos = self._infos()
        return [infos[name].to_json() for name in sorted(infos)]

    def health(self) -> tuple[bool, dict[str, Any]]:
        running = self._running()
        layout = self._layout()
        body = {
            "application_id": self.application_id,
            "status": "running" if running else "stopped",
            "engine": "spark",
            "slots": {str(slot): self.endpoint(slot) for slot in sorted(layout)},
            "default_isolation": COMMITTED if self.exactly_once else LATEST,
        }
        return running, body

    async def execute(
        self, store: str, op: str, key: str | None, params: dict[str, str]
    ) -> dict[str, Any]:
        infos = self._infos()
        info = infos.get(store)
        if info is None:
            known = ", ".join(sorted(infos)) or "none"
            raise UnknownStoreError(f"no store named {store!r}; this application has: {known}")
        if op == "key":
            assert key is not None
            data = Decoder(info).key_bytes(parse_key(info, key))
            task_id = TaskId(info.subtopology, default_partition(data, info.partitions))
            slot = self.slot_of(task_id)
            if slot is None:
                raise StoreUnavailableError(f"task {task_id} has no slot yet: ask again shortly")
            return await self._forward(slot, f"/stores/{store}/keys/{key}", params)
        layout = self._layout()
        parts = []
        for slot in sorted(layout):
            mine = [t for t in layout[slot] if t.subtopology == info.subtopology]
            if not mine:
                continue
            scoped = {**params, "tasks": ",".join(str(t) for t in mine)}
            parts.append(self._forward(slot, f"/stores/{store}/{op}", scoped))
        answers = await asyncio.gather(*parts)
        return self._merge(info, op, answers)

    def _merge(self, info: Any, op: str, answers: list[dict[str, Any]]) -> dict[str, Any]:
        decoder = Decoder(info)

        def key_bytes(value: Any) -> bytes:
            try:
                return decoder.key_bytes(value)
            except QueryError:
                return str(value).encode()

        body: dict[str, Any] = {"store": info.name, "stale": False}
        if answers:
            body["isolation"] = answers[0].get("isolation")
        body["truncated"] = any(a.get("truncated") for a in answers)
        if op == "count":
            body["approximate_num_entries"] = sum(a["approximate_num_entries"] for a in answers)
        elif op == "windows":
            body["windows"] = list(heapq.merge(
                *(a["windows"] for a in answers),
                key=lambda w: (w["start"], key_bytes(w["key"])),
            ))  # fmt: skip
        else:
            body["entries"] = list(heapq.merge(
                *(a["entries"] for a in answers), key=lambda e: key_bytes(e["key"])
            ))  # fmt: skip
        return body

    async def _forward(self, slot: int, path: str, params: dict[str, str]) -> dict[str, Any]:
        """Ask the slot's endpoint. A slot that is moving (between processes, most leases on
        a small cluster) is asked again, following its registration, for a short while."""
        deadline = time.monotonic() + MOVE_BUDGET_S
        last_error = ""
        attempt = 0
        while True:
            address = self.endpoint(slot)
            if address is None:
                last_error = f"slot {slot} has not registered its query endpoint yet"
            else:
                try:
                    response = await self._http().get(f"http://{address}{path}", params=params)
                except httpx.HTTPError as error:
                    last_error = f"slot {slot} at {address} did not answer ({type(error).__name__})"
                else:
                    if self.metrics is not None:
                        self.metrics.routed.labels(str(slot)).inc()
                    body: dict[str, Any] = response.json()
                    if response.status_code == 200:
                        return body
                    message = str(body.get("error", response.text))
                    if response.status_code == 404:
                        raise UnknownStoreError(message)
                    if response.status_code != 503:
                        raise QueryError(message)
                    last_error = message
            attempt += 1
            if time.monotonic() >= deadline:
                raise StoreUnavailableError(f"{last_error}; the slot is restoring or moving")
            await asyncio.sleep(min(0.2, 0.02 * attempt))

    def _http(self) -> httpx.AsyncClient:
        # One pooled client per event loop (the server runs one loop for its lifetime).
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
            self._client = httpx.AsyncClient(
                timeout=FORWARD_TIMEOUT_S, headers=headers,
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            )  # fmt: skip
            self._client_loop = loop
        return self._client
