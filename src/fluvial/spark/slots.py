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
and lets go as well. A slot's standby copies (``num_standby_replicas``) move the same way.

After a layout change the driver's new generation is written to ``.slots/generation``; the
janitors close idle Workers of older generations at once, so the task directories and standby
copies they hold are free for the new layout (a task that lands next to a standby copy
takes it over).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from fluvial.children import fluvial_secret
from fluvial.config import StreamsConfig
from fluvial.errors import ConfigError, StreamsError
from fluvial.metrics import WorkerMetrics
from fluvial.processor.collector import TaskId
from fluvial.runtime.client_calls import transactional_id
from fluvial.runtime.clients import producer_settings
from fluvial.runtime.standby import copies_worth_taking, standby_root
from fluvial.runtime.worker import Worker
from fluvial.spark.fencing import check_current_driver, fatal_slot_error
from fluvial.spark.progress import COUNTERS as _COUNTERS
from fluvial.spark.progress import GAUGES as _GAUGES
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

# An executor may keep its state elsewhere than the driver's state_dir (one directory per
# Spark worker on a shared machine, a local disk on a cluster node).
EXECUTOR_STATE_DIR_ENV = "FLUVIAL_EXECUTOR_STATE_DIR"
HANDOFF_TIMEOUT_S = 120.0
# How long a starting slot waits for a live standby to hand over a copy worth taking.
STANDBY_HANDOFF_TIMEOUT_S = 10.0
JANITOR_INTERVAL_S = 0.1
# How long a lease's end waits for its query endpoint to start (a side service).
SERVE_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class AppSource:
    """The user's APP.py as text: executors rebuild the topology from it.

    Topologies hold serde objects that do not pickle, and a cluster node need not share the
    driver's filesystem, so the source travels instead of the object. The driver's
    ``FLUVIAL_*`` environment travels too, for apps configured from the environment, but never
    a secret (:func:`~fluvial.children.fluvial_secret`, the rule every child process follows):
    the executors would set it in their environment. They get the client settings inside each
    lease instead (``LeasePlan.config``). Only the names of the withheld variables travel, so
    that an APP.py that reads one when loaded fails with the reason.
    """

    filename: str
    text: str
    env: dict[str, str] = field(default_factory=dict)
    withheld: tuple[str, ...] = ()
    # Internal topics carried over from an earlier deployment (Topology.internal_names()).
    internal_names: dict[str, dict[str, str]] = field(default_factory=dict)

    def __repr__(self) -> str:
        # Variable names only: a value has no business in a log or an error.
        return (
            f"AppSource(filename={self.filename!r}, digest={self.digest!r}, "
            f"env={sorted(self.env)}, withheld={list(self.withheld)})"
        )

    @property
    def digest(self) -> str:
        """Changes with the source, the internal names and the environment it is built with:
        the same APP.py under other ``FLUVIAL_*`` values is another topology."""
        names = json.dumps(self.internal_names, sort_keys=True) if self.internal_names else ""
        env = json.dumps(self.env, sort_keys=True) if self.env else ""
        return hashlib.sha256((self.text + names + env).encode()).hexdigest()[:16]

    @classmethod
    def read(cls, path: Path, internal_names: dict[str, dict[str, str]] | None = None) -> AppSource:
        names = [k for k in os.environ if k.startswith("FLUVIAL_") and k != EXECUTOR_STATE_DIR_ENV]
        env = {k: os.environ[k] for k in names if not fluvial_secret(k)}
        withheld = tuple(sorted(set(names) - set(env)))
        return cls(path.name, path.read_text(), env, withheld, dict(internal_names or {}))


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
    # Standby tasks per slot (never a slot's own active tasks): kept warm between leases.
    standbys: dict[int, list[TaskId]] = field(default_factory=dict)
    # The bearer token the slots' query endpoints require (the driver's FLUVIAL_SERVE_TOKEN):
    # it travels here, like the client settings, never in the executors' environment.
    serve_token: str | None = field(default=None, repr=False)
    # Where the driver takes live progress reports (fluvial.spark.progress), and their token.
    progress_address: str | None = None
    progress_token: str | None = field(default=None, repr=False)
    # The config's default_timestamp_extractor travels as APP.py, not in ``config``.
    timestamp_extractor_from_app: bool = False


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
    # Changelog records the slot's standby stores had not applied at the end: task -> store.
    standby_lags: dict[str, dict[str, int]] = field(default_factory=dict)
    # An error no retry can mend (a missing ACL, a newer driver): the driver stops with it.
    fatal: Exception | None = None
    # When the task began (seconds since the epoch, the executor's clock).
    began: float = 0.0
    # The lease's task (Spark partition) that ran the slot: see _slot_for.
    partition: int = -1


@dataclass
class _Entry:
    app_id: str
    run_key: tuple[str, int]
    slot: int
    worker: Worker
    incarnation: str
    slots_dir: Path
    # The task directories and standby copies it holds locked.
    dirs: list[Path]
    busy: bool = True


_entries: dict[tuple[str, int], _Entry] = {}
_entries_lock = threading.Lock()
_janitor: threading.Thread | None = None
_apps: dict[str, Topology] = {}
_app_extractors: dict[str, Callable[[Any, int], int] | None] = {}


def lease_partition(
    plan: LeasePlan, source_broadcast: object, index: int, iterator: Iterator[object]
) -> Iterator[LeaseResult]:
    """The body of one slot task (``mapPartitionsWithIndex``): partition ``index`` runs the
    slot the driver places it on (:func:`_slot_for`), its own unless this process holds another
    slot's warm Worker."""
    from pyspark import TaskContext

    # Drain the input: PySpark reuses a Python worker only if its task read all of it.
    for _ in iterator:
        pass
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    source: AppSource = source_broadcast.value  # type: ignore[attr-defined]
    result = run_lease(plan, source, _slot_for(plan, index), attempt)
    result.partition = index
    yield result


def _slot_for(plan: LeasePlan, partition: int) -> int:
    """The slot task ``partition`` of the lease runs. Spark hands a task to whichever idle
    Python worker of the executor comes first, so the task may land in the process that holds
    another slot's warm Worker. The driver then places it on that slot, and the other slot's
    task on the slot its own process holds, so that no Worker closes and reopens its stores.
    Without the driver's progress service, or when it cannot be asked, it is the partition's
    own slot."""
    if not plan.progress_address or not plan.progress_token:
        return partition
    from fluvial.spark.progress import ask_slot

    app_id = plan.config.application_id
    run_key = (plan.run_id, plan.generation)
    with _entries_lock:
        holding = sorted(
            entry.slot
            for entry in _entries.values()
            if entry.app_id == app_id
            and not entry.busy
            and entry.run_key == run_key
            and plan.expected.get(entry.slot) == entry.incarnation
        )
    slot = ask_slot(plan.progress_address, plan.progress_token, lease=plan.lease,
                    partition=partition, holding=holding)  # fmt: skip
    return partition if slot is None or slot not in plan.slots else slot


def run_lease(plan: LeasePlan, source: AppSource, slot: int, attempt: int) -> LeaseResult:
    """Run slot ``slot`` for one lease in this process and report what it did."""
    began = time.time()
    _start_janitor()
    config = _executor_config(plan, source)
    started = time.monotonic()
    # What the driver sees while the lease runs: the Worker (restoring, then running) and
    # its counters since the lease began.
    live: dict[str, object] = {}
    stop = threading.Event()
    reporter = None
    if plan.progress_address and plan.progress_token:
        from fluvial.spark.progress import ProgressReporter

        reporter = ProgressReporter(plan.progress_address, plan.progress_token, slot=slot,
                                    lease=plan.lease, attempt=attempt,
                                    snapshot=partial(_progress, live), stop=stop)  # fmt: skip
    try:
        result = _run_lease(plan, source, config, slot, attempt, started, live, stop)
        result.began = began
        return result
    finally:
        if reporter is not None:
            reporter.close()


def _run_lease(
    plan: LeasePlan,
    source: AppSource,
    config: StreamsConfig,
    slot: int,
    attempt: int,
    started: float,
    live: dict[str, object],
    stop: threading.Event,
) -> LeaseResult:
    try:
        entry, reused = _take(plan, source, config, slot, attempt,
                              on_worker=lambda w: live.update(worker=w))  # fmt: skip
    except Exception as error:
        return _fatal_or_raise(plan, source, config, slot, attempt, started, error)
    worker = entry.worker
    # The query endpoint starts beside the lease: a process's first one imports and starts
    # an HTTP server, which the slot's first records need not wait for (queries meanwhile
    # get 503 with Retry-After from the driver, as while a slot moves).
    serving: list[str | None] = []
    server = threading.Thread(
        target=lambda: serving.append(_serve_queries(plan, source, config, entry)),
        name="fluvial-slot-serve",
        daemon=True,
    )
    server.start()
    before = {n: 0.0 for n in _COUNTERS} if not reused else _snapshot(worker.metrics)
    tasks_before = {t: dict(c) for t, c in worker.metrics.task_metrics.items()} if reused else {}
    live.update(worker=worker, before=before, running=True)
    start_seconds = time.monotonic() - started
    try:
        worker.run_for(plan.lease_seconds, until=stop)
        # End every lease on a commit: between leases nothing is in flight, so the driver
        # can move the slot or stop without losing or repeating work.
        if plan.final:
            worker.close(clean=True)
        else:
            worker.pause()  # until the next lease, which may run it again
            # The ends seen in fetches: no broker round trip on the lease's path.
            worker.refresh_standby_lag(fresh=False)
    except BaseException as error:
        failure = worker.fatal_cause(error)  # before the producer is discarded
        _discard(entry, clean=False)
        if not isinstance(error, Exception):
            raise
        # The producer's own error (fenced, refused) when the failure only said "fatal".
        explained = failure if isinstance(failure, Exception) else error
        return _fatal_or_raise(plan, source, config, slot, attempt, started, explained)
    server.join(SERVE_START_TIMEOUT_S)
    query_endpoint = serving[0] if serving else None
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
        task_metrics=_task_deltas(worker.metrics.task_metrics, tasks_before),
        query_endpoint=query_endpoint,
        standby_lags=dict(worker.metrics.standby_lags),
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
    """Serve this process's slots' stores and register where (see :mod:`fluvial.iq.spark_routing`)."""
    from fluvial.iq.spark_routing import slot_endpoint

    app_id = config.application_id

    def workers() -> list[Worker]:
        with _entries_lock:
            return [e.worker for e in _entries.values() if e.app_id == app_id]

    try:
        task_ids = [t for tasks in plan.slots.values() for t in tasks]
        endpoint = slot_endpoint(_topology(source), app_id, task_ids, workers,
                                 exactly_once=config.exactly_once,
                                 token=plan.serve_token)  # fmt: skip
        endpoint.register(entry.slots_dir, entry.slot)
        return endpoint.address
    except Exception as error:  # queries are a side service: processing goes on without them
        log.warning("slot %d cannot serve queries: %s", entry.slot, error)
        return None


def _executor_config(plan: LeasePlan, source: AppSource) -> StreamsConfig:
    config = plan.config
    overrides: dict[str, Any] = {}
    state_dir = os.environ.get(EXECUTOR_STATE_DIR_ENV)
    if state_dir:
        overrides["state_dir"] = state_dir
    if plan.timestamp_extractor_from_app:
        # A function does not travel in the plan (it lives in APP.py, which executors rebuild).
        _topology(source)
        extractor = _app_extractors.get(source.digest)
        if extractor is None:
            raise ConfigError(
                f"the driver's default_timestamp_extractor is not in {source.filename}'s config: "
                "on the Spark engine define it in APP.py's config = StreamsConfig(...)"
            )
        overrides["default_timestamp_extractor"] = extractor
    return config.with_overrides(**overrides) if overrides else config


def _progress(live: dict[str, object]) -> dict[str, float] | None:
    """The slot's progress in this lease so far, for the driver's status line."""
    worker = live.get("worker")
    if not isinstance(worker, Worker):
        return None
    metrics = worker.metrics
    before = live.get("before") or {n: 0.0 for n in _COUNTERS}
    assert isinstance(before, dict)
    now = _snapshot(metrics)
    report = {n: now[n] - before[n] for n in _COUNTERS}
    report.update({n: float(getattr(metrics, n)) for n in _GAUGES})
    # The lag is measured at commits: until the first one it is not known here.
    report["lag_known"] = float(bool(live.get("running")) and metrics.commits > 0)
    return report


def _take(
    plan: LeasePlan,
    source: AppSource,
    config: StreamsConfig,
    slot: int,
    attempt: int,
    *,
    on_worker: Callable[[Worker], None] | None = None,
) -> tuple[_Entry, bool]:
    """The slot's Worker: the cached one if it may be reused, otherwise a fresh, started one.
    ``on_worker`` hears of it before it starts (and restores)."""
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
    standby_ids = list(plan.standbys.get(slot, []))
    root = Path(config.state_dir) / app_id
    slots_dir = root / ".slots"
    slots_dir.mkdir(parents=True, exist_ok=True)
    _write_pid(slots_dir, slot)
    _write_generation(slots_dir, run_key)
    if config.exactly_once:
        # A task of a driver that a newer one replaced must not take the slot back from it.
        check_current_driver(plan.run_id, topology, config)
    stateful = {s.id for s in topology.subtopologies(app_id) if s.changelog_topics()}
    dirs = [root / str(t) for t in task_ids] + [
        standby_root(root, slot) / str(t) for t in standby_ids if t.subtopology in stateful
    ]
    if config.exactly_once and any(_held(d) for d in dirs):
        # Fence before waiting: a holder still running (a zombie) then fails at its next
        # commit and lets go of the task directories. With none held, the Worker's own
        # start fences the slot.
        _fence(config, slot)
    _acquire_dirs(root, slots_dir, dirs)
    # A standby copy on this machine much further along than a task's own directory (the task
    # came here from a lost executor) is worth asking its holder for: the Worker takes it over.
    copies = copies_worth_taking(topology, config, root, task_ids) if config.exactly_once else []
    _await_handoff(root, slots_dir, copies)
    confirm = None
    if config.exactly_once:
        # Again once the worker fenced the slot (see Worker.start).
        confirm = partial(check_current_driver, plan.run_id, topology, config)
    worker = Worker(
        slot, topology, config, task_ids, standby_task_ids=standby_ids, confirm_owner=confirm
    )
    if on_worker is not None:
        on_worker(worker)
    try:
        worker.start()
    except BaseException:
        _close(worker, clean=False)
        raise
    finally:
        _withdraw_wants(root, slots_dir, dirs + copies)
    entry = _Entry(app_id, run_key, slot, worker, uuid.uuid4().hex[:12], slots_dir, dirs)
    with _entries_lock:
        _entries[(app_id, slot)] = entry
    return entry, False


#: The ``FLUVIAL_*`` variables this process last set for an application (see _use_env).
_app_env: dict[str, str] = {}


def _use_env(env: dict[str, str]) -> None:
    """Set the driver's ``FLUVIAL_*`` variables for an APP.py about to be loaded here.

    A Python worker runs the leases of every application of its Spark context, one after
    another: the values an earlier application set are replaced, and those it set that this
    one lacks are removed, so APP.py reads what its own driver has."""
    for key, value in _app_env.items():
        if key not in env and os.environ.get(key) == value:
            del os.environ[key]
    _app_env.clear()
    for key, value in env.items():
        os.environ[key] = value
        _app_env[key] = value


def _topology(source: AppSource) -> Topology:
    """Rebuild the topology from APP.py once per process and source version."""
    from fluvial.loader import AppError, load_app

    topology = _apps.get(source.digest)
    if topology is None:
        _use_env(source.env)
        directory = Path(tempfile.gettempdir()) / "fluvial-apps" / source.digest
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / source.filename
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(source.text)
            partial.replace(path)
        try:
            loaded = load_app(path)
            topology = loaded.topology
            if any(source.internal_names.values()):  # as the driver's deployment named them
                topology = topology.renamed(source.internal_names.get("changelogs"),
                                            source.internal_names.get("repartitions"))  # fmt: skip
            if loaded.config is not None:
                _app_extractors[source.digest] = loaded.config.default_timestamp_extractor
        except (KeyError, AppError) as error:
            # The loader reports what APP.py raised as an AppError, the KeyError its cause.
            missing = error if isinstance(error, KeyError) else error.__cause__
            name = missing.args[0] if isinstance(missing, KeyError) and missing.args else None
            if name not in source.withheld:
                raise
            raise ConfigError(
                f"{source.filename} reads ${name} when it is loaded, but the executors rebuild "
                f"it without that variable: it may hold a secret, and fluvial never puts one "
                "in the executors' environment (they get the client settings with each lease). "
                f"Read it only where the driver needs it, e.g. os.environ.get({name!r})"
            ) from None
        _apps[source.digest] = topology
    return topology


def _fence(config: StreamsConfig, slot: int) -> None:
    producer = Producer(producer_settings(config, transactional_id(config.application_id, slot)))
    producer.init_transactions(60)
    producer.flush(5)


def _want_file(root: Path, slots_dir: Path, task_dir: Path) -> Path:
    """Where a process asks for a task directory (or standby copy) another one holds."""
    return slots_dir / ("task-" + "-".join(task_dir.relative_to(root).parts) + ".want")


def _acquire_dirs(root: Path, slots_dir: Path, dirs: list[Path]) -> None:
    """Wait until no other process on this host holds these task directories."""
    deadline = time.monotonic() + HANDOFF_TIMEOUT_S
    announced = False
    for task_dir in dirs:
        task_dir.mkdir(parents=True, exist_ok=True)
        while not _lock_free(task_dir / ".lock"):
            if not announced:
                for wanted in dirs:
                    _want_file(root, slots_dir, wanted).write_text(str(os.getpid()))
                announced = True
            if time.monotonic() > deadline:
                raise StreamsError(
                    f"the task state in {task_dir} stayed locked by another process for "
                    f"{HANDOFF_TIMEOUT_S:.0f} s; is a second application using this state_dir?"
                )
            time.sleep(JANITOR_INTERVAL_S)


def _await_handoff(root: Path, slots_dir: Path, copies: list[Path]) -> None:
    """Ask the holders of these standby copies to hand them over; wait a while for it."""
    held = [copy for copy in copies if not _lock_free(copy / ".lock")]
    if not held:
        return
    for copy in held:
        _want_file(root, slots_dir, copy).write_text(str(os.getpid()))
    deadline = time.monotonic() + STANDBY_HANDOFF_TIMEOUT_S
    while any(not _lock_free(copy / ".lock") for copy in held):
        if time.monotonic() > deadline:
            log.warning("standby copies %s were not handed over within %.0f s; restoring "
                        "from the changelog instead", [str(c) for c in held],
                        STANDBY_HANDOFF_TIMEOUT_S)  # fmt: skip
            return
        time.sleep(JANITOR_INTERVAL_S)


def _held(task_dir: Path) -> bool:
    """Whether another process holds this task directory (or standby copy) now."""
    return (task_dir / ".lock").exists() and not _lock_free(task_dir / ".lock")


def _lock_free(path: Path) -> bool:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def _withdraw_wants(root: Path, slots_dir: Path, dirs: list[Path]) -> None:
    for task_dir in dirs:
        want = _want_file(root, slots_dir, task_dir)
        with contextlib.suppress(OSError):
            if want.read_text() == str(os.getpid()):
                want.unlink()


def _write_generation(slots_dir: Path, run_key: tuple[str, int]) -> None:
    """The driver's current run and layout: janitors close idle Workers of older ones."""
    path = slots_dir / "generation"
    current = _current_generation(slots_dir)
    if current == run_key or (current and current[0] == run_key[0] and current[1] > run_key[1]):
        return  # already known, or a late task of an older layout: never go back
    text = f"{run_key[0]} {run_key[1]}"
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(text)
    partial.replace(path)


def _current_generation(slots_dir: Path) -> tuple[str, int] | None:
    with contextlib.suppress(OSError, ValueError):
        run_id, generation = (slots_dir / "generation").read_text().split()
        return run_id, int(generation)
    return None


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
    """Close idle Workers whose tasks another process on this host wants, or whose layout
    the driver has replaced; hand over standby copies a task starting here wants."""
    me = str(os.getpid())
    while True:
        time.sleep(JANITOR_INTERVAL_S)
        wanted: list[_Entry] = []
        with _entries_lock:
            for key, entry in list(_entries.items()):
                current = _current_generation(entry.slots_dir)
                if not entry.busy and current is not None and current != entry.run_key:
                    wanted.append(_entries.pop(key))
                    continue
                root = entry.slots_dir.parent
                standbys = standby_root(root, entry.slot)
                for task_dir in list(entry.dirs):
                    want = _want_file(root, entry.slots_dir, task_dir)
                    with contextlib.suppress(OSError):
                        wanter = want.read_text()
                        if not _alive(wanter):
                            # Its process died while it waited (a kill -9 mid-start): the
                            # want would close every later holder of the directory. A
                            # newcomer's want overwrites it.
                            continue
                        if task_dir.parent == standbys and entry.worker.standbys is not None:
                            # Another slot's task starting here wants the copy (this process
                            # may run it): only the copy goes; idle, at once (under the lock,
                            # so no lease starts meanwhile); busy, at the Worker's next poll.
                            task_id = TaskId(*map(int, task_dir.name.split("_")))
                            if entry.busy:
                                entry.worker.standbys.request_release(task_id)
                            else:
                                entry.worker.standbys.release(task_id)
                            entry.dirs.remove(task_dir)
                        elif wanter != me and not entry.busy:
                            wanted.append(_entries.pop(key))
                            break
        for entry in wanted:
            log.info("releasing slot %d: another process runs it now, or its layout is gone",
                     entry.slot)  # fmt: skip
            _close(entry.worker, clean=False)


def _alive(pid_text: str) -> bool:
    """Whether the process that wrote a want file (on this host) still runs."""
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True  # another user's process; a file being written
    return True


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


def _task_deltas(
    now: dict[str, dict[str, int]], before: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """What each task counted in this lease: the driver adds them up over leases and slots."""
    deltas = {}
    for task, counts in now.items():
        earlier = before.get(task, {})
        changed = {n: c - earlier.get(n, 0) for n, c in counts.items() if c != earlier.get(n, 0)}
        if changed:
            deltas[task] = changed
    return deltas


def _snapshot(metrics: WorkerMetrics) -> dict[str, float]:
    return {n: float(getattr(metrics, n)) for n in _COUNTERS}
