"""Interactive queries: read a running application's state stores, by key, from any thread.

A query names a store and (for point and windowed queries) a key. The key's partition decides
the task that owns it; the task's stores are read in place while the worker keeps processing.

Isolation, chosen per query:

- ``committed`` reads only what a committed transaction covers. Persistent stores keep writes
  since the last commit in their transactional layer's buffer and apply them to RocksDB only
  once the Kafka transaction committed, so the store *under* that layer holds exactly the last
  commit. An answer read there is never taken back by a crash: the restarted task restores to
  that commit or a later one. In-memory stores keep no committed copy apart from their writes,
  so they answer ``latest`` only.
- ``latest`` reads through the record cache and the buffer: the newest processed state, which
  an aborted transaction (a crash) may take back.

Thread safety: the worker thread never waits for a query. Reads hold the task's
``query_lock``, which only closing a task takes too, so a store is never closed under a read.
RocksDB serves reads concurrently with the commit's atomic write batch. The in-memory layers
(cache, buffer) are dicts that the worker mutates; a read that meets a concurrent change retries.
"""

from __future__ import annotations

import base64
import heapq
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluvial.errors import SerializationError, StreamsError
from fluvial.partitioner import default_partition, murmur2  # noqa: F401 - re-exported
from fluvial.processor.collector import TaskId
from fluvial.processor.task import StreamTask
from fluvial.records import Window, Windowed
from fluvial.serdes import Serde
from fluvial.state.base import StateStore, from_timestamped_bytes
from fluvial.topology.nodes import (
    KEY_VALUE,
    SESSION,
    TIMESTAMPED_KEY_VALUE,
    VERSIONED_KEY_VALUE,
    WINDOW,
    StoreSpec,
)
from fluvial.topology.topology import Topology

COMMITTED = "committed"
LATEST = "latest"
ISOLATIONS = (COMMITTED, LATEST)

#: How long a client should wait before asking again about a task that is not serving.
RETRY_AFTER_S = 1
_READ_ATTEMPTS = 20

KEY_VALUE_KINDS = (KEY_VALUE, TIMESTAMPED_KEY_VALUE, VERSIONED_KEY_VALUE)


# -- errors -----------------------------------------------------------------------------------


class QueryError(StreamsError):
    """A query that cannot be answered; ``status`` is the HTTP status that says why."""

    status = 400


class UnknownStoreError(QueryError):
    status = 404


class StoreUnavailableError(QueryError):
    """The owning task is restoring, restarting or moving: ask again after ``retry_after_s``."""

    status = 503

    def __init__(self, message: str, *, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# -- what a store is and where a key lives ----------------------------------------------------


@dataclass(frozen=True)
class StoreInfo:
    """A queryable store: its kind, serdes, and the sub-topology whose tasks hold it."""

    spec: StoreSpec
    subtopology: int
    partitions: int
    changelog_topic: str | None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        info: dict[str, Any] = {
            "name": spec.name,
            "type": spec.kind,
            "key_serde": spec.key_serde.name if spec.key_serde else None,
            "value_serde": spec.value_serde.name if spec.value_serde else None,
            "partitions": self.partitions,
            "subtopology": self.subtopology,
            "backend": spec.store_type or "default",
        }
        if spec.window_size_ms is not None:
            info["window_size_ms"] = spec.window_size_ms
        if spec.retention_ms is not None:
            info["retention_ms"] = spec.retention_ms
        return info


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Who owns a key of a store: its partition, task, the slot running it, and its standbys."""

    store: str
    partition: int
    task: TaskId
    active_slot: int | None
    standby_slots: tuple[int, ...] = ()
    #: Where the active slot answers queries (``host:port``), on engines where that is elsewhere.
    active_endpoint: str | None = None
    standby_endpoints: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "partition": self.partition,
            "task": str(self.task),
            "active_slot": self.active_slot,
            "standby_slots": list(self.standby_slots),
            "active_endpoint": self.active_endpoint,
            "standby_endpoints": list(self.standby_endpoints),
        }


def store_infos(
    topology: Topology, application_id: str, task_ids: Iterable[TaskId]
) -> dict[str, StoreInfo]:
    """Every store of the topology's tasks (global stores aside), by name."""
    partitions: dict[int, int] = {}
    for task in task_ids:
        partitions[task.subtopology] = max(partitions.get(task.subtopology, 0), task.partition + 1)
    infos: dict[str, StoreInfo] = {}
    for sub in topology.subtopologies(application_id):
        changelogs = sub.changelog_topics()
        for spec in sub.stores:
            infos[spec.name] = StoreInfo(spec, sub.id, partitions.get(sub.id, 0),
                                         changelogs.get(spec.name))  # fmt: skip
    return infos


# -- keys and values in and out ---------------------------------------------------------------


def parse_key(info: StoreInfo, text: str) -> Any:
    """A key given as text (a URL path segment) as the store's key type."""
    serde = info.spec.key_serde
    name = serde.name if serde is not None else "bytes"
    try:
        if name in ("long", "integer", "short"):
            return int(text)
        if name in ("double", "float"):
            return float(text)
        if name == "json":
            # JSON when it parses (42, "42", [1, 2]); otherwise the text is a string key.
            try:
                return json.loads(text)
            except ValueError:
                return text
        if name == "bytes":
            return text.encode()
        if name == "uuid":
            import uuid

            return uuid.UUID(text)
    except ValueError:
        raise QueryError(f"bad key {text!r} for store {info.name!r}: its keys are {name}") from None
    return text


def to_json_value(value: Any) -> Any:
    """Decoded objects as JSON: bytes as base64, windowed keys as objects, the rest as-is."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Windowed):
        return {"key": to_json_value(value.key), "start": value.window.start_ms,
                "end": value.window.end_ms}  # fmt: skip
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


# -- reading one task's store -----------------------------------------------------------------


class TaskSource(Protocol):
    """Where the live tasks are: an engine's view of the tasks running in this process."""

    def find(self, task_id: TaskId) -> tuple[StreamTask | None, str]:
        """The running task, or ``None`` and why not ("restoring", "not running here")."""
        ...

    def slot_of(self, task_id: TaskId) -> int | None: ...


def _bytes_store(task: StreamTask, info: StoreInfo, isolation: str) -> StateStore:
    """The bytes-level store to read: above or below the transactional layer."""
    stack = task.store_stacks[info.name]
    if isolation == LATEST:
        # Under a timestamped view: read raw timestamped bytes; decoding strips the timestamp.
        return stack.raw
    if stack.transactional is None:
        raise QueryError(
            f"store {info.name!r} is in memory: it keeps no committed copy apart from its "
            "uncommitted writes, so it answers isolation=latest only (or materialize it in "
            "RocksDB for committed reads)"
        )
    return stack.bottom


def read_task(
    source: TaskSource,
    task_id: TaskId,
    info: StoreInfo,
    isolation: str,
    read: Callable[[StateStore], Any],
) -> Any:
    """Run ``read`` on one task's store, safely against the worker thread."""
    task, why = source.find(task_id)
    if task is None:
        raise StoreUnavailableError(
            f"task {task_id} of store {info.name!r} is {why}: ask again shortly"
        )
    with task.query_lock:
        if not task.queryable:
            raise StoreUnavailableError(
                f"task {task_id} of store {info.name!r} is restarting: ask again shortly"
            )
        return read_retrying(_bytes_store(task, info, isolation), read)


def read_retrying(store: StateStore, read: Callable[[StateStore], Any]) -> Any:
    """``read(store)``, again if the worker changed a cache or buffer dict under it."""
    for attempt in range(_READ_ATTEMPTS):
        try:
            return read(store)
        except (RuntimeError, KeyError):
            if attempt == _READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


class Decoder:
    """Bytes of one store back into objects, through the store's serdes."""

    def __init__(self, info: StoreInfo) -> None:
        spec = info.spec
        self.key_serde: Serde[Any] = spec.key_serde  # type: ignore[assignment]
        self.value_serde: Serde[Any] = spec.value_serde  # type: ignore[assignment]
        if self.key_serde is None or self.value_serde is None:
            raise QueryError(f"store {info.name!r} has no serdes: it cannot be queried")
        self.topic = info.changelog_topic
        # DSL aggregation window stores and timestamped tables keep the timestamp before values.
        self.timestamped = spec.kind == TIMESTAMPED_KEY_VALUE or (
            spec.kind == WINDOW and spec.internal_format
        )

    def key_bytes(self, key: Any) -> bytes:
        try:
            data = self.key_serde.serialize(self.topic, key)
        except SerializationError as error:
            raise QueryError(f"bad key {key!r}: {error}") from None
        if data is None:
            raise QueryError("a key is required")
        return data

    def key(self, data: bytes) -> Any:
        return self.key_serde.deserialize(self.topic, data)

    def value(self, raw: bytes | None) -> Any:
        if raw is None:
            return None
        if self.timestamped:
            raw = from_timestamped_bytes(raw)[0]
        return self.value_serde.deserialize(self.topic, raw)

    def versioned_value(self, raw: bytes | None) -> Any:
        """A versioned store's value (its versions keep their timestamps apart)."""
        return None if raw is None else self.value_serde.deserialize(self.topic, raw)


class RawDecoder(Decoder):
    """Keys and values as the store holds them: bytes in, bytes out.

    A Spark slot answers the driver's Python views this way, and the driver decodes the bytes
    through the serdes exactly as a local view would.
    """

    def key_bytes(self, key: Any) -> bytes:
        if not isinstance(key, bytes | bytearray):
            raise QueryError(f"a raw query takes its key as bytes, not {type(key).__name__}")
        return bytes(key)

    def key(self, data: bytes) -> Any:
        return data

    def value(self, raw: bytes | None) -> Any:
        return raw

    def versioned_value(self, raw: bytes | None) -> Any:
        return raw


# -- the read-only views ----------------------------------------------------------------------


class _View:
    def __init__(
        self, queries: LocalQueries, info: StoreInfo, isolation: str | None, *, raw: bool = False
    ) -> None:
        self._queries = queries
        self.info = info
        self.name = info.name
        self._isolation = isolation
        self._decoder = RawDecoder(info) if raw else Decoder(info)
        #: Scans read only these tasks (a Spark slot answers for its own; the driver merges).
        self.only_tasks: set[TaskId] | None = None

    def _iso(self, isolation: str | None) -> str:
        return self._queries.isolation(isolation or self._isolation)

    def _task_for(self, key: Any) -> tuple[TaskId, bytes]:
        data = self._decoder.key_bytes(key)
        partition = default_partition(data, self.info.partitions)
        return TaskId(self.info.subtopology, partition), data

    def tasks(self) -> list[TaskId]:
        """The tasks a scan reads: every task of the store, or :attr:`only_tasks`."""
        tasks = [TaskId(self.info.subtopology, p) for p in range(self.info.partitions)]
        if self.only_tasks is not None:
            tasks = [t for t in tasks if t in self.only_tasks]
        return tasks

    def _read(self, task_id: TaskId, isolation: str | None, read: Callable[[Any], Any]) -> Any:
        return self._queries.read(task_id, self.info, self._iso(isolation), read)


class KeyValueView(_View):
    """A read-only view of a key-value store (plain, timestamped or versioned)."""

    def get(self, key: Any, *, isolation: str | None = None) -> Any:
        task_id, data = self._task_for(key)
        if self.info.kind == VERSIONED_KEY_VALUE:
            found = self._read(task_id, isolation, lambda s: s.get(data))
            return None if found is None else self._decoder.versioned_value(found.value)
        return self._decoder.value(self._read(task_id, isolation, lambda s: s.get(data)))

    def range(
        self, from_key: Any = None, to_key: Any = None, *, isolation: str | None = None
    ) -> list[tuple[Any, Any]]:
        """Entries with ``from_key <= key <= to_key`` in key-bytes order, over every partition."""
        self._no_versioned("range")
        lo = None if from_key is None else self._decoder.key_bytes(from_key)
        hi = None if to_key is None else self._decoder.key_bytes(to_key)
        parts = [
            self._read(task_id, isolation, lambda s: list(s.range(lo, hi)))
            for task_id in self.tasks()
        ]
        return [
            (self._decoder.key(k), self._decoder.value(v))
            for k, v in heapq.merge(*parts, key=lambda kv: kv[0])
        ]

    def all(self, *, isolation: str | None = None) -> list[tuple[Any, Any]]:
        return self.range(None, None, isolation=isolation)

    def approximate_num_entries(self, *, isolation: str | None = None) -> int:
        return sum(
            int(self._read(task_id, isolation, lambda s: s.approximate_num_entries()))
            for task_id in self.tasks()
        )

    def _no_versioned(self, what: str) -> None:
        if self.info.kind == VERSIONED_KEY_VALUE:
            raise QueryError(
                f"store {self.name!r} is versioned: it answers get(key) only, not {what}"
            )


class WindowView(_View):
    """A read-only view of a window store."""

    def fetch(
        self,
        key: Any,
        time_from: int,
        time_to: int | None = None,
        *,
        isolation: str | None = None,
    ) -> Any:
        """``fetch(key, start)``: the value of the window starting at ``start`` (or ``None``).

        ``fetch(key, from, to)``: ``[(Window, value)]`` for window starts in ``[from, to]``.
        """
        task_id, data = self._task_for(key)
        if time_to is None:
            raw = self._read(task_id, isolation, lambda s: s.fetch(data, int(time_from)))
            return self._decoder.value(raw)
        rows = self._read(
            task_id, isolation, lambda s: list(s.fetch_range(data, int(time_from), int(time_to)))
        )
        size = self.info.spec.window_size_ms or 0
        return [(Window(start, start + size), self._decoder.value(raw)) for start, raw in rows]

    def fetch_all(
        self, time_from: int, time_to: int, *, isolation: str | None = None
    ) -> list[tuple[Windowed[Any], Any]]:
        """``[(Windowed(key, window), value)]`` for window starts in ``[from, to]``, every key."""
        parts = [
            self._read(
                task_id, isolation, lambda s: list(s.fetch_all(int(time_from), int(time_to)))
            )
            for task_id in self.tasks()
        ]
        size = self.info.spec.window_size_ms or 0
        return [
            (Windowed(self._decoder.key(k), Window(start, start + size)), self._decoder.value(raw))
            for k, start, raw in heapq.merge(*parts, key=lambda row: (row[1], row[0]))
        ]


class SessionView(_View):
    """A read-only view of a session store."""

    def fetch(self, key: Any, *, isolation: str | None = None) -> list[tuple[Windowed[Any], Any]]:
        """Every session of ``key``: ``[(Windowed(key, Window(start, end)), value)]``."""
        task_id, data = self._task_for(key)
        entries = self._read(task_id, isolation, lambda s: list(s.fetch(data)))
        return [
            (
                Windowed(self._decoder.key(e.key), Window(e.start_ms, e.end_ms)),
                self._decoder.value(e.value),
            )  # fmt: skip
            for e in entries
        ]


StoreView = KeyValueView | WindowView | SessionView


class LocalQueries:
    """Queries over the tasks of this process (every task, with the local engine)."""

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        task_ids: Iterable[TaskId],
        source: TaskSource,
        *,
        exactly_once: bool,
        standbys: Callable[[TaskId], tuple[int, ...]] | None = None,
    ) -> None:
        self.topology = topology
        self.application_id = application_id
        self.source = source
        self.exactly_once = exactly_once
        self._standbys = standbys
        self.stores = store_infos(topology, application_id, task_ids)

    @property
    def default_isolation(self) -> str:
        """``committed`` under exactly-once (answers a crash cannot take back), else ``latest``."""
        return COMMITTED if self.exactly_once else LATEST

    def isolation(self, isolation: str | None) -> str:
        if isolation is None:
            return self.default_isolation
        if isolation not in ISOLATIONS:
            raise QueryError(f"unknown isolation {isolation!r}: use committed or latest")
        return isolation

    def info(self, name: str) -> StoreInfo:
        info = self.stores.get(name)
        if info is None:
            known = ", ".join(sorted(self.stores)) or "none"
            raise UnknownStoreError(f"no store named {name!r}; this application has: {known}")
        return info

    def store(self, name: str, *, isolation: str | None = None, raw: bool = False) -> StoreView:
        """A read-only view of a store; ``isolation`` sets the default of its queries.

        ``raw`` views take and give keys and values as the bytes the store holds.
        """
        info = self.info(name)
        self.isolation(isolation)
        if info.kind in KEY_VALUE_KINDS:
            return KeyValueView(self, info, isolation, raw=raw)
        if info.kind == WINDOW:
            return WindowView(self, info, isolation, raw=raw)
        if info.kind == SESSION:
            return SessionView(self, info, isolation, raw=raw)
        raise QueryError(f"store {name!r} of type {info.kind} cannot be queried")

    def read(
        self, task_id: TaskId, info: StoreInfo, isolation: str, read: Callable[[Any], Any]
    ) -> Any:
        """Run ``read`` on the bytes store of one task (see :func:`read_task`)."""
        return read_task(self.source, task_id, info, isolation, read)

    def metadata_for_key(self, name: str, key: Any) -> KeyQueryMetadata:
        return self.metadata_for_key_bytes(name, Decoder(self.info(name)).key_bytes(key))

    def metadata_for_key_bytes(self, name: str, data: bytes) -> KeyQueryMetadata:
        """:meth:`metadata_for_key` of a key already serialized."""
        info = self.info(name)
        task_id = TaskId(info.subtopology, default_partition(data, info.partitions))
        standbys = self._standbys(task_id) if self._standbys is not None else ()
        return KeyQueryMetadata(name, task_id.partition, task_id,
                                self.source.slot_of(task_id), tuple(standbys))  # fmt: skip
