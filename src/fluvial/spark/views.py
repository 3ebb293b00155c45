"""``SparkApplication.store(name)``: the local engine's read-only views, on the Spark driver.

The stores live in executor processes. The views here are the very classes the local engine
gives (:mod:`fluvial.iq.queries`), over a source whose every bytes-level read (``get``,
``range``, ``fetch``, ...) becomes one query through the driver's router, the code the
``--serve`` endpoint runs: the router finds the slot that holds the task and asks it with
``raw=true``, so keys travel and values come back as the bytes the store holds, and the view
decodes them through the store's serdes exactly as on the local engine.

The router is asynchronous; the views run it on an event loop thread of their own, so they
work with or without an HTTP server.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, NamedTuple

from fluvial.errors import StreamsError
from fluvial.iq.queries import (
    SESSION,
    VERSIONED_KEY_VALUE,
    KeyQueryMetadata,
    LocalQueries,
    StoreInfo,
    StoreUnavailableError,
    StoreView,
)
from fluvial.iq.spark_routing import FORWARD_TIMEOUT_S, MOVE_BUDGET_S, RoutingQueryService
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask
from fluvial.state.session import SessionEntry

#: Scans from Python return every entry; the HTTP endpoint's default limit does not apply.
NO_LIMIT = str(2**62)
#: How long one routed read may take: the router's own forward timeout and move budget, plus
#: a margin for a loaded driver.
CALL_TIMEOUT_S = FORWARD_TIMEOUT_S + MOVE_BUDGET_S + 20.0


class _Version(NamedTuple):
    """A versioned store's answer: its value is all a view reads of it."""

    value: bytes


class _RouterLoop:
    """An event loop in a daemon thread, for calling the router from plain Python."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="fluvial-query-views", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(CALL_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            raise StoreUnavailableError(
                f"no answer from the slots within {CALL_TIMEOUT_S:g} s: ask again shortly"
            ) from None

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class _SlotLayout:
    """Where tasks are, as the driver's layout says; their stores are read remotely."""

    def __init__(self, router: RoutingQueryService) -> None:
        self._router = router

    def find(self, task_id: TaskId) -> tuple[StreamTask | None, str]:
        return None, "on an executor"

    def slot_of(self, task_id: TaskId) -> int | None:
        return self._router.slot_of(task_id)


class RoutedQueries(LocalQueries):
    """Queries from the driver's Python: the local views, each read routed to a slot."""

    def __init__(
        self, router: RoutingQueryService, loop: _RouterLoop, task_ids: list[TaskId]
    ) -> None:
        super().__init__(router.topology, router.application_id, task_ids, _SlotLayout(router),
                         exactly_once=router.exactly_once)  # fmt: skip
        self.router = router
        self._loop = loop

    def read(self, task_id: TaskId, info: StoreInfo, isolation: str, read: Any) -> Any:
        return read(_RemoteStore(self, task_id, info, isolation))

    def metadata_for_key(self, name: str, key: Any) -> KeyQueryMetadata:
        self.info(name)
        return self.router.metadata_for_key(name, key)

    def ask(self, store: str, op: str, key: bytes | None, params: dict[str, str]) -> Any:
        text = None if key is None else _b64(key)
        return self._loop.run(self.router.execute(store, op, text, {**params, "raw": "true"}))


class _RemoteStore:
    """The bytes-store calls the views make, answered by the slot that holds ``task_id``."""

    def __init__(
        self, queries: RoutedQueries, task_id: TaskId, info: StoreInfo, isolation: str
    ) -> None:
        self._queries = queries
        self._info = info
        self._params = {"isolation": isolation, "tasks": str(task_id)}

    def _ask(self, op: str, key: bytes | None = None, **params: object) -> Any:
        asked = {**self._params, **{k: str(v) for k, v in params.items() if v is not None}}
        return self._queries.ask(self._info.name, op, key, asked)

    # key-value stores
    def get(self, key: bytes) -> Any:
        body = self._ask("key", key)
        value = _unb64(body["value"]) if body.get("found") else None
        if self._info.kind == VERSIONED_KEY_VALUE:
            return None if value is None else _Version(value)
        return value

    def range(self, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        body = self._ask("range", None, **{"from": _b64(lo), "to": _b64(hi), "limit": NO_LIMIT})
        return iter([(_unb64(e["key"]), _unb64(e["value"])) for e in body["entries"]])

    def approximate_num_entries(self) -> int:
        return int(self._ask("count")["approximate_num_entries"])

    # window and session stores
    def fetch(self, key: bytes, time: int | None = None) -> Any:
        if self._info.kind == SESSION:
            sessions = self._ask("key", key)["sessions"]
            return iter([SessionEntry(key, s["start"], s["end"], _unb64(s["value"]))
                         for s in sessions])  # fmt: skip
        body = self._ask("key", key, time=time)
        return _unb64(body["value"]) if body.get("found") else None

    def fetch_range(self, key: bytes, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
        windows = self._ask("key", key, **{"from": lo, "to": hi})["windows"]
        return iter([(w["start"], _unb64(w["value"])) for w in windows])

    def fetch_all(self, lo: int, hi: int) -> Iterator[tuple[bytes, int, bytes]]:
        body = self._ask("windows", None, **{"from": lo, "to": hi, "limit": NO_LIMIT})
        return iter([(_unb64(w["key"]), w["start"], _unb64(w["value"])) for w in body["windows"]])


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.urlsafe_b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


class DriverViews:
    """The Python views of a running Spark application, routed through its router."""

    def __init__(self, router: RoutingQueryService, task_ids: Any) -> None:
        self.router = router
        self._task_ids = task_ids
        self._loop: _RouterLoop | None = None
        self._lock = threading.Lock()

    def queries(self) -> RoutedQueries:
        task_ids = list(self._task_ids())
        if not task_ids:
            raise StreamsError("the application is not started: call start() before querying")
        with self._lock:
            if self._loop is None:
                self._loop = _RouterLoop()
            return RoutedQueries(self.router, self._loop, task_ids)

    def store(self, name: str, *, isolation: str | None = None) -> StoreView:
        return self.queries().store(name, isolation=isolation)

    def metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        return self.queries().metadata_for_key(store, key)

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.run(self.router.aclose())
            finally:
                loop.stop()
