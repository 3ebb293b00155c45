"""Interactive queries on the Spark engine: slot endpoints on executors, a router on the driver.

A slot's stores live in the PySpark Python worker process that runs its ``Worker``, and
stay open between leases. Each such process serves the tasks it holds over HTTP (the same
Starlette service as the local engine), on 127.0.0.1 or ``FLUVIAL_EXECUTOR_QUERY_HOST``, on a
free port. It registers that endpoint two ways:

- at once, in ``<state_dir>/<application_id>/.slots/slot-<N>.endpoint`` (readable by a driver
  on the same machine or a shared filesystem);
- in every lease result, which reaches the driver wherever the executor runs.

The driver's ``--serve`` endpoint computes a key's partition, task and slot as the local engine
does and forwards the query to the slot's endpoint. A slot that moved (another process, another
executor) answers "not running here" from its old endpoint, or nothing at all; the router then
rereads the registration and tries again for a while, and otherwise answers 503 with
``Retry-After``. Scans (ranges, every window) go to every slot, each answering for its own
tasks, and are merged.

With ``allow_stale=true``, a task whose active slot does not answer is asked of the slots that
keep a standby replica of it (``num_standby_replicas``): their answer says it is stale and how
far each changelog partition read is behind.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from fluvial.iq.queries import (
    COMMITTED,
    LATEST,
    Decoder,
    KeyQueryMetadata,
    LocalQueries,
    QueryError,
    StoreInfo,
    StoreUnavailableError,
    UnknownStoreError,
    default_partition,
    parse_key,
    store_infos,
)
from fluvial.iq.server import TOKEN_ENV, HttpServer, QueryMetrics, make_app
from fluvial.iq.service import (
    DEFAULT_LIMIT,
    LocalQueryService,
    QueriedWorker,
    StandbyQueries,
    WorkerStandbys,
    WorkerTasks,
    raw_key,
    task_list,
)
from fluvial.processor.collector import TaskId
from fluvial.topology.topology import Topology

EXECUTOR_HOST_ENV = "FLUVIAL_EXECUTOR_QUERY_HOST"
FORWARD_TIMEOUT_S = 10.0
#: How long the router follows a moving slot before it answers 503.
MOVE_BUDGET_S = 3.0
#: With ``allow_stale``, how long the active slot may take before its standbys are asked:
#: a slot whose process hangs must not hold up the stale answer for the whole forward timeout.
STALE_ACTIVE_TIMEOUT_S = 2.0


# -- the executor side ------------------------------------------------------------------------


class SlotEndpoint:
    """This Python worker process's query endpoint, over the slot Workers it holds."""

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        task_ids: list[TaskId],
        workers: Callable[[], Iterable[QueriedWorker]],
        *,
        exactly_once: bool,
        token: str | None = None,
    ) -> None:
        self._topology = topology
        self._application_id = application_id
        self._workers = workers
        self._exactly_once = exactly_once
        self.use_tasks(task_ids)
        service = LocalQueryService(
            lambda: self.queries, application_id=application_id, running=lambda: True,
            stale_unavailable="the driver asks standbys for stale answers",
            standby_queries=lambda: self.standby_queries,
        )  # fmt: skip
        app, _ = make_app(service, token=token)
        host = os.environ.get(EXECUTOR_HOST_ENV, "127.0.0.1")
        self.server = HttpServer(app, host, 0, name="fluvial-slot-queries")
        self.server.start()
        self.address = f"{host}:{self.server.port}"

    def use_tasks(self, task_ids: list[TaskId]) -> None:
        """Serve the stores of these tasks (every task of the application's current layout)."""
        self.task_ids = list(task_ids)
        args = (self._topology, self._application_id, self.task_ids)
        self.queries = LocalQueries(*args, WorkerTasks(self._workers),
                                    exactly_once=self._exactly_once)  # fmt: skip
        self.standby_queries = StandbyQueries(*args, WorkerStandbys(self._workers),
                                              exactly_once=self._exactly_once)  # fmt: skip

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
    workers: Callable[[], Iterable[QueriedWorker]],
    *,
    exactly_once: bool,
    token: str | None = None,
) -> SlotEndpoint:
    """This process's endpoint for the application (one per process, started on first use);
    ``token``: the bearer token it requires (the driver's, sent with each lease)."""
    with _endpoints_lock:
        endpoint = _endpoints.get(application_id)
        if endpoint is None:
            endpoint = SlotEndpoint(topology, application_id, task_ids, workers,
                                    exactly_once=exactly_once, token=token)  # fmt: skip
            _endpoints[application_id] = endpoint
        elif sorted(endpoint.task_ids) != sorted(task_ids):
            endpoint.use_tasks(task_ids)
        return endpoint


# -- the driver side --------------------------------------------------------------------------


def _limit(params: dict[str, str]) -> int:
    """The ``limit`` of a scan. The slots validated it already: they answered."""
    try:
        return int(params.get("limit") or DEFAULT_LIMIT) or DEFAULT_LIMIT
    except ValueError:
        return DEFAULT_LIMIT


def _flag(params: dict[str, str], name: str) -> bool:
    return params.get(name, "").lower() in ("1", "true", "yes")


class RoutingQueryService:
    """The driver's query service: forwards each query to the slot that owns the key.

    The ``--serve`` endpoint calls :meth:`execute` from its event loop; the driver's Python
    views (:mod:`fluvial.spark.views`) call it from a loop of their own.
    """

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
        standbys: Callable[[], dict[int, list[TaskId]]] = dict,
    ) -> None:
        self.topology = topology
        self.application_id = application_id
        self._task_ids = task_ids
        self._layout = layout
        self._reported = reported
        self._standbys = standbys
        self._slots_dir = slots_dir
        self.exactly_once = exactly_once
        self._running = running
        self.metrics: QueryMetrics | None = None
        self._token = os.environ.get(TOKEN_ENV) or None
        # One pooled client per event loop: the HTTP server's, and the Python views'.
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._clients_lock = threading.Lock()

    # -- where things are -------------------------------------------------------------------

    def infos(self) -> dict[str, StoreInfo]:
        task_ids = self._task_ids()
        if not task_ids:
            raise StoreUnavailableError("the application is starting: ask again shortly")
        return store_infos(self.topology, self.application_id, task_ids)

    def info(self, store: str) -> StoreInfo:
        infos = self.infos()
        info = infos.get(store)
        if info is None:
            known = ", ".join(sorted(infos)) or "none"
            raise UnknownStoreError(f"no store named {store!r}; this application has: {known}")
        return info

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

    def standby_slots(self, task_id: TaskId) -> tuple[int, ...]:
        """The slots that keep a standby replica of ``task_id``."""
        return tuple(slot for slot, tasks in sorted(self._standbys().items()) if task_id in tasks)

    def metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """Which partition, task and slot own ``key`` of ``store``, and where its standbys are."""
        info = self.info(store)
        data = Decoder(info).key_bytes(key)
        return self._metadata(info, data)

    def _metadata(self, info: StoreInfo, data: bytes) -> KeyQueryMetadata:
        task_id = TaskId(info.subtopology, default_partition(data, info.partitions))
        active = self.slot_of(task_id)
        standbys = self.standby_slots(task_id)
        return KeyQueryMetadata(
            info.name, task_id.partition, task_id, active, standbys,
            active_endpoint=None if active is None else self.endpoint(active),
            standby_endpoints=tuple(e for s in standbys if (e := self.endpoint(s)) is not None),
        )  # fmt: skip

    # -- the service ------------------------------------------------------------------------

    def stores(self) -> list[dict[str, Any]]:
        infos = self.infos()
        return [infos[name].to_json() for name in sorted(infos)]

    def health(self) -> tuple[bool, dict[str, Any]]:
        running = self._running()
        layout = self._layout()
        body = {
            "application_id": self.application_id,
            "status": "running" if running else "stopped",
            "engine": "spark",
            "slots": {str(slot): self.endpoint(slot) for slot in sorted(layout)},
            "standbys": {
                str(slot): [str(t) for t in tasks]
                for slot, tasks in sorted(self._standbys().items())
                if tasks
            },
            "default_isolation": COMMITTED if self.exactly_once else LATEST,
        }
        return running, body

    async def execute(
        self, store: str, op: str, key: str | None, params: dict[str, str]
    ) -> dict[str, Any]:
        info = self.info(store)
        allow_stale = _flag(params, "allow_stale")
        # The slots answer for their own active (or standby) tasks; staleness is decided here.
        forwarded = {k: v for k, v in params.items() if k != "allow_stale"}
        if op == "key":
            assert key is not None
            if _flag(params, "raw"):
                data = raw_key(key)
            else:
                data = Decoder(info).key_bytes(parse_key(info, key))
            metadata = self._metadata(info, data)
            if metadata.active_slot is None:
                raise StoreUnavailableError(f"task {metadata.task} has no slot yet: ask again "
                                            "shortly")  # fmt: skip
            path = f"/stores/{quote(store, safe='')}/keys/{quote(key, safe='')}"
            [body] = await self._route(metadata.active_slot, [metadata.task], path, forwarded,
                                       allow_stale)  # fmt: skip
            body["slot"] = metadata.active_slot
            body["standby_slots"] = list(metadata.standby_slots)
            return body
        layout = self._layout()
        asked = task_list(params["tasks"]) if params.get("tasks") else None
        parts = []
        for slot in sorted(layout):
            mine = [
                t
                for t in layout[slot]
                if t.subtopology == info.subtopology and (asked is None or t in asked)
            ]
            if mine:
                path = f"/stores/{quote(store, safe='')}/{op}"
                parts.append(self._route(slot, mine, path, forwarded, allow_stale))
        answers = [answer for found in await asyncio.gather(*parts) for answer in found]
        return self._merge(info, op, answers, raw=_flag(params, "raw"), limit=_limit(params))

    def _merge(
        self, info: StoreInfo, op: str, answers: list[dict[str, Any]], *, raw: bool, limit: int
    ) -> dict[str, Any]:
        """One answer from the slots' answers: merged in key (or window) order, then cut back
        to ``limit``, since each slot applied the limit to its own tasks only."""
        decoder = Decoder(info)

        def key_bytes(value: Any) -> bytes:
            if raw:
                return base64.b64decode(value)
            try:
                return decoder.key_bytes(value)
            except QueryError:
                return str(value).encode()

        stale = [a for a in answers if a.get("stale")]
        body: dict[str, Any] = {"store": info.name, "stale": bool(stale)}
        if answers:
            body["isolation"] = answers[0].get("isolation")
        if stale:
            partitions = [p for a in stale for p in a["lag"]["partitions"]]
            known = [a["lag"]["offset_lag"] for a in stale]
            body["lag"] = {
                "offset_lag": None if None in known else sum(known),
                "partitions": partitions,
            }
        truncated = any(a.get("truncated") for a in answers)
        if op == "count":
            body["approximate_num_entries"] = sum(a["approximate_num_entries"] for a in answers)
            body["approximate"] = any(a.get("approximate", True) for a in answers)
        else:
            field = "windows" if op == "windows" else "entries"
            if op == "windows":
                merged = heapq.merge(*(a["windows"] for a in answers),
                                     key=lambda w: (w["start"], key_bytes(w["key"])))  # fmt: skip
            else:
                merged = heapq.merge(*(a["entries"] for a in answers),
                                     key=lambda e: key_bytes(e["key"]))  # fmt: skip
            rows = list(itertools.islice(merged, limit + 1))
            truncated = truncated or len(rows) > limit
            body[field] = rows[:limit]
        body["truncated"] = truncated
        return body

    async def _route(
        self,
        slot: int,
        tasks: list[TaskId],
        path: str,
        params: dict[str, str],
        allow_stale: bool,
    ) -> list[dict[str, Any]]:
        """The answer of ``slot`` for ``tasks``, following the slot while it moves.

        With ``allow_stale``, every round that the active slot does not answer also asks the
        tasks' standbys, and their answers (one per task) are returned instead.
        """
        scoped = {**params, "tasks": ",".join(str(t) for t in tasks)}
        deadline = time.monotonic() + MOVE_BUDGET_S
        attempt = 0
        why_not = ""
        while True:
            try:
                timeout = STALE_ACTIVE_TIMEOUT_S if allow_stale else FORWARD_TIMEOUT_S
                return [await self._ask(slot, path, scoped, timeout_s=timeout)]
            except StoreUnavailableError as error:
                active_error = str(error)
            if allow_stale:
                stale, why_not = await self._ask_standbys(tasks, path, params)
                if stale is not None:
                    return stale
            attempt += 1
            if time.monotonic() >= deadline:
                message = f"{active_error}; the slot is restoring or moving"
                if allow_stale:
                    message += f"; no stale answer either: {why_not}"
                raise StoreUnavailableError(message)
            await asyncio.sleep(min(0.2, 0.02 * attempt))

    async def _ask_standbys(
        self, tasks: list[TaskId], path: str, params: dict[str, str]
    ) -> tuple[list[dict[str, Any]] | None, str]:
        """One standby answer per task, or ``None`` and why not."""
        answers = []
        for task_id in tasks:
            slots = [s for s in self.standby_slots(task_id) if s != self.slot_of(task_id)]
            if not slots:
                return None, (f"task {task_id} has no standby replica (set "
                              "num_standby_replicas, with at least two slots)")  # fmt: skip
            reasons = []
            for standby_slot in slots:
                asked = {**params, "standby": "true", "tasks": str(task_id)}
                try:
                    answers.append(await self._ask(standby_slot, path, asked))
                    break
                except StoreUnavailableError as error:
                    reasons.append(f"standby in slot {standby_slot}: {error}")
            else:
                return None, "; ".join(reasons)
        return answers, ""

    async def _ask(
        self, slot: int, path: str, params: dict[str, str], *, timeout_s: float = FORWARD_TIMEOUT_S
    ) -> dict[str, Any]:
        """One request to a slot's endpoint; a slot that is not there (yet) is unavailable."""
        address = self.endpoint(slot)
        if address is None:
            raise StoreUnavailableError(f"slot {slot} has not registered its query endpoint yet")
        try:
            response = await self._http().get(
                f"http://{address}{path}", params=params, timeout=timeout_s
            )
        except httpx.HTTPError as error:
            raise StoreUnavailableError(
                f"slot {slot} at {address} did not answer ({type(error).__name__})"
            ) from None
        if self.metrics is not None:
            self.metrics.routed.labels(str(slot)).inc()
        body: dict[str, Any] = response.json()
        if response.status_code == 200:
            return body
        message = str(body.get("error", response.text))
        if response.status_code == 404:
            raise UnknownStoreError(message)
        if response.status_code == 503:
            raise StoreUnavailableError(message)
        raise QueryError(message)

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.get(loop)
            if client is None:
                headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
                client = self._clients[loop] = httpx.AsyncClient(
                    timeout=FORWARD_TIMEOUT_S, headers=headers,
                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
                )  # fmt: skip
            return client

    async def aclose(self) -> None:
        """Close the pooled connections of the running event loop."""
        with self._clients_lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
