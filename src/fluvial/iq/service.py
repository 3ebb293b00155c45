"""Interactive queries as JSON: the service the HTTP endpoint serves for tasks in this process.

The local engine serves every task this way. On the Spark engine each slot's Python worker
serves its own tasks the same way, and the driver routes to it (:mod:`fluvial.iq.spark_routing`).
The driver also asks a slot for:

- ``standby=true``: an answer from the slot's standby replica of the task, marked stale, with
  how far behind its changelog it is;
- ``raw=true``: keys (in the path, ``from``, ``to``) and answers as base64 of the bytes the
  store holds, which the driver's Python views decode through the store's serdes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any, Protocol

from fluvial.iq.queries import (
    COMMITTED,
    KEY_VALUE_KINDS,
    LATEST,
    SESSION,
    WINDOW,
    KeyValueView,
    LocalQueries,
    QueryError,
    SessionView,
    StoreInfo,
    StoreUnavailableError,
    WindowView,
    parse_key,
    read_retrying,
    to_json_value,
)
from fluvial.metrics import StoreLag
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask

MIN_TIME = -(2**63)
MAX_TIME = 2**63 - 1
DEFAULT_LIMIT = 10_000


class QueriedStandbys(Protocol):
    """What queries read of a worker's standby replicas (the runtime's ``StandbyTasks``)."""

    @property
    def tasks(self) -> Container[TaskId]: ...

    def serving(self, task_id: TaskId) -> StreamTask | None: ...

    def lags(self, task_id: TaskId | None = None, *, fresh: bool = True) -> list[StoreLag]: ...


class QueriedWorker(Protocol):
    """What queries read of a worker (the runtime's ``Worker``): its slot, the tasks assigned
    to it, those running, those restoring, and its standbys. The runtime hands its workers to
    this package; a protocol keeps the arrow pointing from the runtime to queries only."""

    @property
    def slot(self) -> int: ...

    @property
    def task_ids(self) -> Sequence[TaskId]: ...

    @property
    def tasks(self) -> Mapping[TaskId, StreamTask]: ...

    @property
    def task_states(self) -> Container[TaskId]: ...

    @property
    def standbys(self) -> QueriedStandbys | None: ...


class WorkerTasks:
    """The tasks of the workers (slots) running in this process."""

    def __init__(self, workers: Callable[[], Iterable[QueriedWorker]]) -> None:
        self._workers = workers

    def find(self, task_id: TaskId) -> tuple[StreamTask | None, str]:
        workers = list(self._workers())
        for worker in workers:
            task = worker.tasks.get(task_id)
            if task is not None:
                return task, "running"
        for worker in workers:
            if task_id in worker.task_ids:
                if task_id in worker.task_states:
                    return None, f"restoring its state in slot {worker.slot}"
                return None, f"starting in slot {worker.slot}"
        return None, "not running in this process"

    def slot_of(self, task_id: TaskId) -> int | None:
        for worker in self._workers():
            if task_id in worker.task_ids:
                return worker.slot
        return None

    def serving(self) -> tuple[int, int]:
        """(tasks answering queries, tasks assigned) in this process."""
        workers = list(self._workers())
        assigned = sum(len(w.task_ids) for w in workers)
        running = sum(1 for w in workers for t in list(w.tasks.values()) if t.queryable)
        return running, assigned


class WorkerStandbys:
    """The standby tasks of the workers (slots) running in this process."""

    def __init__(self, workers: Callable[[], Iterable[QueriedWorker]]) -> None:
        self._workers = workers

    def find(self, task_id: TaskId) -> tuple[StreamTask | None, str]:
        for worker in list(self._workers()):
            standbys = worker.standbys
            if standbys is not None and task_id in standbys.tasks:
                task = standbys.serving(task_id)
                if task is not None:
                    return task, "standby"
                return None, f"a standby in slot {worker.slot} that does not serve (yet)"
        return None, "no standby in this process"

    def slot_of(self, task_id: TaskId) -> int | None:
        for worker in list(self._workers()):
            if worker.standbys is not None and task_id in worker.standbys.tasks:
                return worker.slot
        return None

    def lags(self, task_id: TaskId) -> list[StoreLag]:
        for worker in list(self._workers()):
            if worker.standbys is not None and task_id in worker.standbys.tasks:
                return worker.standbys.lags(task_id)
        return []


class StandbyQueries(LocalQueries):
    """Queries over the standby tasks of this process: stale, committed changelog state.

    A standby holds nothing but applied changelog records, so every isolation reads the same
    bytes store (under the record cache and the transactional buffer, which stay empty).
    """

    source: WorkerStandbys

    def read(
        self, task_id: TaskId, info: StoreInfo, isolation: str, read: Callable[[Any], Any]
    ) -> Any:
        if info.changelog_topic is None:
            raise StoreUnavailableError(
                f"store {info.name!r} has no changelog, so no standby keeps a copy of it"
            )
        task, why = self.source.find(task_id)
        if task is None:
            raise StoreUnavailableError(f"task {task_id} of store {info.name!r} has {why}")
        with task.query_lock:
            if task.closed:
                raise StoreUnavailableError(f"the standby of task {task_id} is closing")
            return read_retrying(task.store_stacks[info.name].bottom, read)

    @property
    def answer_isolation(self) -> str:
        """What a standby answer is: committed records only, under exactly-once."""
        return COMMITTED if self.exactly_once else LATEST


def _int_param(params: dict[str, str], name: str, default: int | None) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise QueryError(f"parameter {name}={text!r} must be an integer (epoch ms)") from None


def _limit_param(params: dict[str, str]) -> int:
    """``limit``: at most this many entries (default 10,000); a whole number of at least 1."""
    text = params.get("limit")
    if text is None or text == "":
        return DEFAULT_LIMIT
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1:
        raise QueryError(
            f"parameter limit={text!r} must be a whole number of at least 1 (the most entries "
            f"to answer; {DEFAULT_LIMIT:,} when left out)"
        )
    return limit


def _bool_param(params: dict[str, str], name: str) -> bool:
    return params.get(name, "").lower() in ("1", "true", "yes")


class LocalQueryService:
    """Runs JSON queries against :class:`LocalQueries` (stores of tasks in this process)."""

    def __init__(
        self,
        queries: Callable[[], LocalQueries | None],
        *,
        application_id: str,
        running: Callable[[], bool],
        stale_unavailable: str = "the local engine keeps no standby replicas",
        standby_queries: Callable[[], StandbyQueries | None] | None = None,
    ) -> None:
        self._queries = queries
        self.application_id = application_id
        self._running = running
        self._stale_unavailable = stale_unavailable
        self._standby_queries = standby_queries

    def _ready(self, standby: bool = False) -> LocalQueries:
        if standby:
            found = self._standby_queries() if self._standby_queries is not None else None
            if found is None:
                raise StoreUnavailableError("no standby replica is kept in this process")
            return found
        queries = self._queries()
        if queries is None:
            raise StoreUnavailableError("the application is starting: ask again shortly")
        return queries

    def stores(self) -> list[dict[str, Any]]:
        queries = self._ready()
        return [queries.stores[name].to_json() for name in sorted(queries.stores)]

    def health(self) -> tuple[bool, dict[str, Any]]:
        queries = self._queries()
        running = self._running()
        body: dict[str, Any] = {
            "application_id": self.application_id,
            "status": "running" if running else "stopped",
        }
        if queries is not None:
            source = queries.source
            if isinstance(source, WorkerTasks):
                serving, assigned = source.serving()
                body["tasks_serving"] = serving
                body["tasks"] = assigned
            body["default_isolation"] = queries.default_isolation
        else:
            body["status"] = "starting" if running else body["status"]
        return running, body

    def execute(
        self, store: str, op: str, key: str | None, params: dict[str, str]
    ) -> dict[str, Any]:
        standby = _bool_param(params, "standby")
        raw = _bool_param(params, "raw")
        queries = self._ready(standby)
        info = queries.info(store)
        isolation = queries.isolation(params.get("isolation"))
        allow_stale = _bool_param(params, "allow_stale")
        view = queries.store(store, raw=raw)
        if params.get("tasks"):
            view.only_tasks = task_list(params["tasks"])
        body: dict[str, Any] = {"store": store, "isolation": isolation, "stale": False}
        read_tasks = view.tasks()
        if op == "key":
            assert key is not None
            parsed = _parse_key(queries, store, key, raw)
            if raw:
                metadata = queries.metadata_for_key_bytes(store, parsed)
            else:
                metadata = queries.metadata_for_key(store, parsed)
            read_tasks = [metadata.task]
        if isinstance(queries, StandbyQueries):
            # Taken before the read: the answer holds at least every record below the
            # positions it reports.
            body.update(self._staleness(queries, store, read_tasks))
        try:
            if op == "key":
                body.update(key=to_json_value(parsed), partition=metadata.partition,
                            task=str(metadata.task), slot=metadata.active_slot,
                            standby_slots=list(metadata.standby_slots))  # fmt: skip
                body.update(self._key_query(view, parsed, params, isolation))
            elif op in ("range", "all"):
                body.update(self._range(queries, view, store, op, params, isolation, raw))
            elif op == "windows":
                if info.kind != WINDOW:
                    raise QueryError(f"store {store!r} is a {info.kind} store: /windows is for "
                                     "window stores")  # fmt: skip
                assert isinstance(view, WindowView)
                lo = _int_param(params, "from", MIN_TIME)
                hi = _int_param(params, "to", MAX_TIME)
                limit = _limit_param(params)
                rows = view.fetch_all(lo, hi, isolation=isolation)  # type: ignore[arg-type]
                body["windows"] = [_window_row(w.key, w.window, v) for w, v in rows[:limit]]
                body["truncated"] = len(rows) > limit
            elif op == "count":
                if info.kind not in KEY_VALUE_KINDS:
                    raise QueryError(f"store {store!r} is a {info.kind} store: /count is for "
                                     "key-value stores")  # fmt: skip
                assert isinstance(view, KeyValueView)
                if _bool_param(params, "exact"):
                    # Counted entry by entry: exact, and as slow as reading the whole store.
                    body["approximate_num_entries"] = len(view.all(isolation=isolation))
                    body["approximate"] = False
                else:
                    # RocksDB's estimate: keys deleted or overwritten since its last
                    # compaction may still be counted. ?exact=true counts them one by one.
                    body["approximate_num_entries"] = view.approximate_num_entries(
                        isolation=isolation
                    )
                    body["approximate"] = True
            else:
                raise QueryError(f"unknown query {op!r}")
        except StoreUnavailableError as error:
            if allow_stale:
                raise StoreUnavailableError(
                    f"{error}; no stale answer either: {self._stale_unavailable}",
                    retry_after_s=error.retry_after_s,
                ) from None
            raise
        if isinstance(queries, StandbyQueries):
            body.update(isolation=queries.answer_isolation, slot=None)
        return body

    def _staleness(
        self, queries: StandbyQueries, store: str, tasks: list[TaskId]
    ) -> dict[str, Any]:
        """What a standby's answer says of itself: stale, whose, and how far behind."""
        source = queries.source
        lags = [lag for task_id in tasks for lag in source.lags(task_id) if lag.store == store]
        return {
            "stale": True,
            "standby_slot": source.slot_of(tasks[0]) if tasks else None,
            "lag": lag_json(lags),
        }

    def _key_query(
        self, view: Any, key: Any, params: dict[str, str], isolation: str
    ) -> dict[str, Any]:
        kind = view.info.kind
        if kind != WINDOW:
            given = [name for name in ("time", "from", "to") if params.get(name)]
            if given:
                raise QueryError(
                    f"store {view.name!r} is a {kind} store: ?{'=, ?'.join(given)}= are for "
                    "window stores; ask for the key alone"
                )
        if kind in KEY_VALUE_KINDS:
            value = view.get(key, isolation=isolation)
            return {"found": value is not None, "value": to_json_value(value)}
        if kind == WINDOW:
            start = _int_param(params, "time", None)
            if start is not None:
                value = view.fetch(key, start, isolation=isolation)
                size = view.info.spec.window_size_ms or 0
                return {"found": value is not None, "start": start, "end": start + size,
                        "value": to_json_value(value)}  # fmt: skip
            lo = _int_param(params, "from", MIN_TIME)
            hi = _int_param(params, "to", MAX_TIME)
            rows = view.fetch(key, lo, hi, isolation=isolation)
            return {"windows": [_window_row(None, w, v) for w, v in rows]}
        if kind == SESSION:
            assert isinstance(view, SessionView)
            sessions = view.fetch(key, isolation=isolation)
            return {"sessions": [_window_row(None, w.window, v) for w, v in sessions]}
        raise QueryError(f"store {view.name!r} of type {kind} cannot be queried by key")

    def _range(
        self,
        queries: LocalQueries,
        view: Any,
        store: str,
        op: str,
        params: dict[str, str],
        isolation: str,
        raw: bool,
    ) -> dict[str, Any]:
        if not isinstance(view, KeyValueView):
            hint = " use /windows?from=&to=" if isinstance(view, WindowView) else ""
            raise QueryError(f"store {store!r} is a {view.info.kind} store: /{op} is for "
                             f"key-value stores;{hint}")  # fmt: skip
        limit = _limit_param(params)
        lo = params.get("from")
        hi = params.get("to")
        entries = view.range(
            None if op == "all" or lo is None else _parse_key(queries, store, lo, raw),
            None if op == "all" or hi is None else _parse_key(queries, store, hi, raw),
            isolation=isolation,
        )
        return {
            "entries": [
                {"key": to_json_value(k), "value": to_json_value(v)} for k, v in entries[:limit]
            ],
            "truncated": len(entries) > limit,
        }


def task_list(text: str) -> set[TaskId]:
    tasks = set()
    for item in text.split(","):
        sub, _, partition = item.partition("_")
        try:
            tasks.add(TaskId(int(sub), int(partition)))
        except ValueError:
            raise QueryError(f"tasks={text!r}: give task ids like 1_0,1_2") from None
    return tasks


def _parse_key(queries: LocalQueries, store: str, text: str, raw: bool = False) -> Any:
    if raw:
        return raw_key(text)
    return parse_key(queries.info(store), text)


def raw_key(text: str) -> bytes:
    """A key given as URL-safe base64 of its serialized bytes (``raw=true`` queries)."""
    try:
        return base64.urlsafe_b64decode(text.encode())
    except (binascii.Error, ValueError):
        raise QueryError(f"raw key {text!r} is not URL-safe base64") from None


def lag_json(lags: list[StoreLag]) -> dict[str, Any]:
    """How far a standby answer is behind: in all, and per changelog partition read."""
    known = [lag.offset_lag for lag in lags]
    return {
        "offset_lag": None if any(n is None for n in known) else sum(n or 0 for n in known),
        "partitions": [lag.to_json() for lag in lags],
    }


def _window_row(key: Any, window: Any, value: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"start": window.start_ms, "end": window.end_ms,
                           "value": to_json_value(value)}  # fmt: skip
    if key is not None:
        row["key"] = to_json_value(key)
    return row
