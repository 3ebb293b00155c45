"""The executor side of the Spark engine: one slot's :class:`Worker` inside a PySpark worker.

A lease is one Spark task per slot. The task runs in a PySpark Python worker process, which
Spark reuses for later tasks, so the slot's Worker (its open stores, consumer and producer)
is kept in a module-level cache and reused by the next lease when that lands in the same
process and nothing else ran the slot in between.

Spark hands a task to whichever idle Python worker comes first (measured: about half of the
leases of a slot change process on ``local[2]``), so a slot regularly moves between processes
of one executor. Its task directories are locked by the process holding its Worker, so the
newcomer asks for them: it drops a *want* file per task, and a janitor thread in every process
closes an idle Worker whose tasks are wanted elsewhere. The newcomer fences the slot's
transactional id first, so a holder that is still busy (a zombie) fails its next commit
and lets go as well.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from confluent_kafka import Producer

from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.processor.collector import TaskId
from fluvial.runtime.clients import producer_settings
from fluvial.runtime.metrics import WorkerMetrics
from fluvial.runtime.worker import Worker, transactional_id
from fluvial.spark.fencing import check_current_driver, fatal_slot_error
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

# An executor may keep its state elsewhere than the driver's state_dir (one directory per
# Spark worker on a shared machine, a local disk on a cluster node).
EXECUTOR_STATE_DIR_ENV = "FLUVIAL_EXECUTOR_STATE_DIR"
HANDOFF_TIMEOUT_S = 120.0
JANITOR_INTERVAL_S = 0.1

_COUNTERS = (
    "records_in",
    "records_processed",
    "records_out",
    "commits",
    "commit_latency_total_s",
    "dropped_records",
    "restore_total",
    "restored",
)
_GAUGES = ("lag", "commit_latency_max_s")


@dataclass(frozen=True)
class AppSource:
    """The user's APP.py as text: executors rebuild the topology from it.

    Topologies hold serde objects that do not pickle, and a cluster node need not share the
    driver's filesystem, so the source travels instead of the object. The driver's
    ``FLUVIAL_*`` environment travels too, for apps configured from the environment.
    """

    filename: str
    text: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    @classmethod
    def read(cls, path: Path) -> AppSource:
        env = {
            k: v
            for k, v in os.environ.items()
            if k.startswith("FLUVIAL_") and k != EXECUTOR_STATE_DIR_ENV
        }
        return cls(path.name, path.read_text(), env)


@dataclass(frozen=True)
class LeasePlan:
    """What every slot task of one lease needs to know."""

    run_id: str
    generation: int  # changes when the slot layout changes: cached Workers of older ones go
    lease: int
    lease_seconds: float
    config: StreamsConfig
    slots: dict[int, list[TaskId]]
    # Incarnation of the Worker that completed the slot's previous lease: only that one may be
    # reused, since any other may have been fenced or overtaken in between.
    expected: dict[int, str]
    final: bool = False


@dataclass
class LeaseResult:
    slot: int
    host: str
    pid: int
    incarnation: str
    attempt: int
    reused: bool
    seconds: float
    start_seconds: float
    metrics: dict[str, float]
    task_metrics: dict[str, dict[str, int]]
    # Where this process answers interactive queries for the slot (host:port).
    query_endpoint: str | None = None
    # The Python that ran the slot: the packed environment's on a cluster (fluvial pack).
    python: str = ""
    # An error no retry can mend (a missing ACL, a newer driver): the driver stops with it.
    fatal: Exception | None = None


@dataclass
class _Entry:
    app_id: str
    run_key: tuple[str, int]
    slot: int
    worker: Worker
    incarnation: str
    slots_dir: Path
    task_ids: list[TaskId]
    busy: bool = True


_entries: dict[tuple[str, int], _Entry] = {}
_entries_lock = threading.Lock()
_janitor: threading.Thread | None = None
_apps: dict[str, Topology] = {}


def lease_partition(
    plan: LeasePlan, source_broadcast: object, index: int, iterator: Iterator[object]
) -> Iterator[LeaseResult]:
    """The body of one slot task (``mapPartitionsWithIndex``): partition ``index`` is the slot."""
    from pyspark import TaskContext

    # Drain the input: PySpark reuses a Python worker only if its task read all of it.
    for _ in iterator:
        pass
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    source: AppSource = source_broadcast.value  # type: ignore[attr-defined]
    yield run_lease(plan, source, index, attempt)


def run_lease(plan: LeasePlan, source: AppSource, slot: int, attempt: int) -> LeaseResult:
    """Run slot ``slot`` for one lease in this process and report what it did."""
    _start_janitor()
    config = _executor_config(plan.config)
    started = time.monotonic()
    try:
        entry, reused = _take(plan, source, config, slot, attempt)
    except Exception as error:
        return _fatal_or_raise(plan, source, config, slot, attempt, started, error)
    worker = entry.worker
    query_endpoint = _serve_queries(plan, source, config, entry)
    before = {n: 0.0 for n in _COUNTERS} if not reused else _snapshot(worker.metrics)
    start_seconds = time.monotonic() - started
    try:
        worker.run_for(plan.lease_seconds)
        # End every lease on a commit: between leases nothing is in flight, so the driver
        # can move the slot or stop without losing or repeating work.
        if plan.final:
            worker.close(clean=True)
        else:
            worker.commit()
    except BaseException as error:
        _discard(entry, clean=False)
        if not isinstance(error, Exception):
            raise
        return _fatal_or_raise(plan, source, config, slot, attempt, started, error)
    after = _snapshot(worker.metrics)
    metrics = {n: after[n] - before[n] for n in _COUNTERS}
    metrics.update({n: float(getattr(worker.metrics, n)) for n in _GAUGES})
    result = LeaseResult(
        slot=slot,
        host=socket.gethostname(),
        pid=os.getpid(),
        python=sys.executable,
        incarnation=entry.incarnation,
        attempt=attempt,
        reused=reused,
        seconds=time.monotonic() - started,
        start_seconds=start_seconds,
        metrics=metrics,
        task_metrics=dict(worker.metrics.task_metrics),
        query_endpoint=query_endpoint,
    )
    with _entries_lock:
        if plan.final:
            _entries.pop((entry.app_id, slot), None)
        entry.busy = False
    return result


def _fatal_or_raise(
    plan: LeasePlan,
    source: AppSource,
    config: StreamsConfig,
    slot: int,
    attempt: int,
    started: float,
    error: Exception,
) -> LeaseResult:
    """Report an error no retry can mend as the task's result; raise any other (Spark retries)."""
    fatal = fatal_slot_error(plan.run_id, _topology(source), config, error)
    if fatal is None:
        raise error
    log.error("slot %d: %s", slot, fatal)
    return LeaseResult(
        slot=slot, host=socket.gethostname(), pid=os.getpid(), incarnation="", attempt=attempt,
        reused=False, seconds=time.monotonic() - started, start_seconds=0.0, metrics={},
        task_metrics={}, python=sys.executable, fatal=fatal,
    )  # fmt: skip


def _serve_queries(
    plan: LeasePlan, source: AppSource, config: StreamsConfig, entry: _Entry
) -> str | None:
    """Serve this process's slots' stores and register where (see :mod:`fluvial.spark.queries`)."""
    from fluvial.spark.queries import slot_endpoint

    app_id = config.application_id

    def workers() -> list[Worker]:
        with _entries_lock:
            return [e.worker for e in _entries.values() if e.app_id == app_id]

    try:
        task_ids = [t for tasks in plan.slots.values() for t in tasks]
        endpoint = slot_endpoint(_topology(source), app_id, task_ids, workers,
                                 exactly_once=config.exactly_once)  # fmt: skip
        endpoint.register(entry.slots_dir, entry.slot)
        return endpoint.address
    except Exception as error:  # queries are a side service: processing goes on without them
        log.warning("slot %d cannot serve queries: %s", entry.slot, error)
        return None


def _executor_config(config: StreamsConfig) -> StreamsConfig:
    state_dir = os.environ.get(EXECUTOR_STATE_DIR_ENV)
    return config.with_overrides(state_dir=state_dir) if state_dir else config


def _take(
    plan: LeasePlan, source: AppSource, config: StreamsConfig, slot: int, attempt: int
) -> tuple[_Entry, bool]:
    """The slot's Worker: the cached one if it may be reused, otherwise a fresh, started one."""
    app_id = config.application_id
    run_key = (plan.run_id, plan.generation)
    stale: list[_Entry] = []
    with _entries_lock:
        entry = _entries.get((app_id, slot))
        if (
            entry is not None
            and not entry.busy
            and attempt == 0
            and entry.run_key == run_key
            and plan.expected.get(slot) == entry.incarnation
        ):
            entry.busy = True
            _write_pid(entry.slots_dir, slot)
            return entry, True
        # Anything else this process holds for an older layout or run must go first: its
        # tasks may be ours now.
        for key, other in list(_entries.items()):
            if (
                other.app_id == app_id
                and not other.busy
                and (other.run_key != run_key or other.slot == slot)
            ):
                stale.append(_entries.pop(key))
    for other in stale:
        _close(other.worker, clean=False)
    topology = _topology(source)
    task_ids = list(plan.slots[slot])
    slots_dir = Path(config.state_dir) / app_id / ".slots"
    slots_dir.mkdir(parents=True, exist_ok=True)
    _write_pid(slots_dir, slot)
    if config.exactly_once:
        # A task of a driver that a newer one replaced must not take the slot back from it.
        check_current_driver(plan.run_id, topology, config)
        # Fence before waiting: a holder still running (a zombie) then fails at its next
        # commit and lets go of the task directories.
        _fence(config, slot)
    _acquire_tasks(config, slots_dir, task_ids)
    confirm = None
    if config.exactly_once:
        # Again once the worker fenced the slot (see Worker.start).
        confirm = partial(check_current_driver, plan.run_id, topology, config)
    worker = Worker(slot, topology, config, task_ids, confirm_owner=confirm)
    try:
        worker.start()
    except BaseException:
        _close(worker, clean=False)
        raise
    finally:
        _withdraw_wants(slots_dir, task_ids)
    entry = _Entry(app_id, run_key, slot, worker, uuid.uuid4().hex[:12], slots_dir, task_ids)
    with _entries_lock:
        _entries[(app_id, slot)] = entry
    return entry, False


def _topology(source: AppSource) -> Topology:
    """Rebuild the topology from APP.py once per process and source version."""
    from fluvial.runtime.loader import load_app

    topology = _apps.get(source.digest)
    if topology is None:
        for key, value in source.env.items():
            os.environ.setdefault(key, value)
        directory = Path(tempfile.gettempdir()) / "fluvial-apps" / source.digest
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / source.filename
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(source.text)
            partial.replace(path)
        topology = load_app(path).topology
        _apps[source.digest] = topology
    return topology


def _fence(config: StreamsConfig, slot: int) -> None:
    producer = Producer(producer_settings(config, transactional_id(config.application_id, slot)))
    producer.init_transactions(60)
    producer.flush(5)


def _acquire_tasks(config: StreamsConfig, slots_dir: Path, task_ids: list[TaskId]) -> None:
    """Wait until no other process on this host holds our tasks' state directories."""
    root = Path(config.state_dir) / config.application_id
    deadline = time.monotonic() + HANDOFF_TIMEOUT_S
    announced = False
    for task_id in task_ids:
        task_dir = root / str(task_id)
        task_dir.mkdir(parents=True, exist_ok=True)
        while not _lock_free(task_dir / ".lock"):
            if not announced:
                for tid in task_ids:
                    (slots_dir / f"task-{tid}.want").write_text(str(os.getpid()))
                announced = True
            if time.monotonic() > deadline:
                raise StreamsError(
                    f"task {task_id}'s state in {task_dir} stayed locked by another process for "
                    f"{HANDOFF_TIMEOUT_S:.0f} s; is a second application using this state_dir?"
                )
            time.sleep(JANITOR_INTERVAL_S)


def _lock_free(path: Path) -> bool:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def _withdraw_wants(slots_dir: Path, task_ids: list[TaskId]) -> None:
    for task_id in task_ids:
        want = slots_dir / f"task-{task_id}.want"
        with contextlib.suppress(OSError):
            if want.read_text() == str(os.getpid()):
                want.unlink()


def _write_pid(slots_dir: Path, slot: int) -> None:
    """Which process runs the slot now: for operators (and fault tests) to find it."""
    (slots_dir / f"slot-{slot}.pid").write_text(str(os.getpid()))


def _start_janitor() -> None:
    global _janitor
    with _entries_lock:
        if _janitor is None or not _janitor.is_alive():
            _janitor = threading.Thread(target=_janitor_loop, name="fluvial-janitor", daemon=True)
            _janitor.start()


def _janitor_loop() -> None:
    """Close idle Workers whose tasks another process on this host wants."""
    me = str(os.getpid())
    while True:
        time.sleep(JANITOR_INTERVAL_S)
        wanted: list[_Entry] = []
        with _entries_lock:
            for key, entry in list(_entries.items()):
                if entry.busy:
                    continue
                for task_id in entry.task_ids:
                    want = entry.slots_dir / f"task-{task_id}.want"
                    with contextlib.suppress(OSError):
                        if want.read_text() != me:
                            wanted.append(_entries.pop(key))
                            break
        for entry in wanted:
            log.info("releasing slot %d: another process runs it now", entry.slot)
            _close(entry.worker, clean=False)


def _discard(entry: _Entry, *, clean: bool) -> None:
    with _entries_lock:
        if _entries.get((entry.app_id, entry.slot)) is entry:
            del _entries[(entry.app_id, entry.slot)]
    _close(entry.worker, clean=clean)


def _close(worker: Worker, *, clean: bool) -> None:
    # An idle Worker committed at the end of its lease, so a dirty close loses nothing; it
    # only aborts the empty transaction it had begun.
    try:
        worker.close(clean=clean)
    except Exception as error:  # closing is best effort: the next holder fences anyway
        log.warning("closing slot %d: %s", worker.slot, error)


def _snapshot(metrics: WorkerMetrics) -> dict[str, float]:
    return {n: float(getattr(metrics, n)) for n in _COUNTERS}
