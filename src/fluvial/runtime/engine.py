"""The local engine: every task of an application in one Python process.

The driver part (topic creation, task planning, slot assignment, fencing) is shared with the
Spark engine; only the scheduling differs. Here each slot is a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import KafkaException

from fluvial.config import StreamsConfig
from fluvial.errors import ChangelogGapError, CoPartitioningError, StreamsError
from fluvial.iq.board import TaskBoard
from fluvial.iq.queries import KeyQueryMetadata, LocalQueries, StoreView
from fluvial.kafka.security import AuthorizationError
from fluvial.metrics import WorkerMetrics, prometheus_text
from fluvial.processor.collector import TaskId
from fluvial.runtime.client_calls import FencedError
from fluvial.runtime.clients import check_client_settings
from fluvial.runtime.commit_metadata import check_commit_metadata
from fluvial.runtime.deployments import DeploymentPolicy
from fluvial.runtime.epoch import CHECK_INTERVAL_S, DriverEpoch, DriverFencedError
from fluvial.runtime.topics import TopicPlan, ensure_internal_topics
from fluvial.runtime.worker import Worker
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

MAX_RESTARTS = 10
HEALTHY_RUN_S = 60.0
#: How long an epoch check waits for another one still under way before it gives up.
EPOCH_CHECK_WAIT_S = 30.0


def plan_tasks(topology: Topology, config: StreamsConfig, plan: TopicPlan) -> list[TaskId]:
    """One task per (sub-topology, partition); a sub-topology has as many as its inputs."""
    tasks = []
    for sub in topology.subtopologies(config.application_id):
        partitions = max(plan.partitions[t] for t in sub.source_topics)
        tasks += [TaskId(sub.id, p) for p in range(partitions)]
    return tasks


def assign_slots(tasks: list[TaskId], slots: int) -> dict[int, list[TaskId]]:
    """Deterministic and sticky: the same tasks and slot count give the same placement.

    Tasks of one partition number go to one slot, so a record and its repartitioned successor
    tend to be processed side by side.
    """
    assignment: dict[int, list[TaskId]] = {slot: [] for slot in range(slots)}
    for task in sorted(tasks, key=lambda t: (t.partition, t.subtopology)):
        assignment[task.partition % slots].append(task)
    return assignment


def assign_standbys(assignment: dict[int, list[TaskId]], replicas: int) -> dict[int, list[TaskId]]:
    """Place ``replicas`` standbys of every task on other slots than its active one.

    Engines whose slots run on different machines use it (the local engine keeps none).
    """
    slots = sorted(assignment)
    standbys: dict[int, list[TaskId]] = {slot: [] for slot in slots}
    if replicas <= 0 or len(slots) < 2:
        return standbys
    for index, slot in enumerate(slots):
        for task in assignment[slot]:
            for step in range(1, min(replicas, len(slots) - 1) + 1):
                standbys[slots[(index + step) % len(slots)]].append(task)
    return standbys


class Application:
    """Runs a topology on Kafka with the local engine until closed.

    ``workers`` is the number of slots (default ``config.num_stream_threads``); each runs its
    tasks in a thread with its own consumer and (transactional) producer.
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        *,
        workers: int | None = None,
        on_progress: Callable[[WorkerMetrics], None] | None = None,
        deployment: DeploymentPolicy | None = None,
    ) -> None:
        self.topology = topology
        #: What the user said of this deployment's state (``--allow-state-loss``).
        self.deployment = deployment
        self.config = config
        self.slots = workers or config.num_stream_threads
        self.on_progress = on_progress
        self.stop_event = threading.Event()
        self.workers: list[Worker] = []
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self.task_ids: list[TaskId] = []
        self._queries: LocalQueries | None = None
        self.run_id = uuid.uuid4().hex[:12]
        #: Under exactly-once, this driver's claim on the application (one driver at a time).
        self.epoch: DriverEpoch | None = None
        self._epoch_lock = threading.Lock()
        #: Proves the epoch every few seconds. Not waited for on stop: it commits nothing of
        #: the application's, and its check may be waiting out a broker that is gone.
        self._epoch_watcher: threading.Thread | None = None
        #: Set before :meth:`start` to tell a reader process where every task stands.
        self.task_board: TaskBoard | None = None

    def start(self) -> None:
        """Check and create what the application needs, then start its workers and return.

        Before anything runs it checks what earlier runs committed against this topology,
        creates or checks the internal topics, plans the tasks and, under exactly-once, fences
        earlier instances. The workers then run in background threads until :meth:`close`.

        ```python
        with Application(topology, config) as app:   # starts; closing commits and stops
            app.wait(timeout_s=60)
        ```

        :raises StreamsError: (or a subclass) naming what is wrong and the fix.
        """
        check_client_settings(self.config)
        check_commit_metadata(self.topology, self.config)
        # A new version that would drop committed state stops here, before anything is made.
        plan = ensure_internal_topics(self.topology, self.config, self.deployment)
        self.topology = plan.topology or self.topology
        self.task_ids = plan_tasks(self.topology, self.config, plan)
        slots = min(self.slots, len(self.task_ids))
        if self.config.num_standby_replicas:
            # A standby on the same machine as its active task would share its disk and state
            # directory: it could never speed up a failover, so the local engine keeps none.
            log.warning("num_standby_replicas=%d has no effect with the local engine: every "
                        "task already runs on this machine", self.config.num_standby_replicas)  # fmt: skip
        if self.config.exactly_once:
            # Fences an earlier driver of the application and every slot id it may use.
            self.epoch = DriverEpoch(self.topology, self.config, self.run_id)
            self.epoch.claim(slots)
            self._epoch_watcher = threading.Thread(target=self._watch_epoch,
                                                   name="fluvial-driver-epoch", daemon=True)  # fmt: skip
        assignment = assign_slots(self.task_ids, slots)
        board = self.task_board
        if board is not None:
            board.publish(self.config.application_id, assignment)
        for slot, task_ids in assignment.items():
            worker = Worker(slot, self.topology, self.config, task_ids,
                            stop=self.stop_event, on_progress=self.on_progress,
                            confirm_owner=self._confirm_epoch if self.epoch else None,
                            task_listener=board.update if board is not None else None)  # fmt: skip
            self.workers.append(worker)
            thread = threading.Thread(
                target=self._run_worker, args=(worker,), name=f"fluvial-slot-{slot}", daemon=True
            )
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()
        if self._epoch_watcher is not None:
            self._epoch_watcher.start()

    def _run_worker(self, worker: Worker) -> None:
        restarts = 0
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                worker.run()
                return
            except DriverFencedError as error:
                self._driver_fenced(error)
                return
            except FencedError as error:
                # A newer driver took over (then stop), or a slot task of an older driver that
                # has yet to notice fenced this one once: this driver's epoch stands, so the
                # slot starts again and fences it back.
                fenced = self._check_epoch()
                if fenced is not None:
                    self._driver_fenced(fenced)
                    return
                restarts += 1
                if restarts > MAX_RESTARTS:
                    self.errors.append(error)
                    self.stop_event.set()
                    return
                log.warning("slot %d: %s; this driver is still the current one, so the slot "
                            "starts again", worker.slot, error)  # fmt: skip
            except (ChangelogGapError, AuthorizationError, CoPartitioningError) as error:
                # Fatal: restarting cannot help.
                log.error("%s", error)
                self.errors.append(error)
                self.stop_event.set()
                return
            except (StreamsError, KafkaException) as error:
                if isinstance(error, KafkaException) and error.args[0].fatal():
                    log.error("slot %d failed: %s", worker.slot, error)
                    self.errors.append(error)
                    self.stop_event.set()
                    return
                # Abortable: the transaction is gone, local state falls back to the last commit
                # and processing resumes from the committed offsets.
                # The budget is for failures in a row: a slot that ran a while since its last
                # restart starts over, so a long run survives any number of broker restarts.
                if time.monotonic() - started >= HEALTHY_RUN_S:
                    restarts = 0
                restarts += 1
                if restarts > MAX_RESTARTS:
                    self.errors.append(error)
                    self.stop_event.set()
                    return
                log.warning("slot %d failed (%s); restarting from the last commit",
                            worker.slot, error)  # fmt: skip
                time.sleep(min(5.0, 0.5 * restarts))
                # A driver that a newer one fenced meanwhile must not take its slot back.
                fenced = self._check_epoch()
                if fenced is not None:
                    self._driver_fenced(fenced)
                    return
            except BaseException as error:  # a bug or a fatal error: stop everything
                log.exception("slot %d failed", worker.slot)
                self.errors.append(error)
                self.stop_event.set()
                return

    def _watch_epoch(self) -> None:
        """Prove every few seconds that no newer driver took over; stop if one did.

        The slots' transactional ids already keep a fenced driver from committing; this also
        stops its idle slots, which never try to commit.
        """
        while not self.stop_event.wait(CHECK_INTERVAL_S):
            error = self._check_epoch()
            if error is not None:
                self._driver_fenced(error)
                return

    def _driver_fenced(self, error: StreamsError) -> None:
        """Stop every slot without a last commit, with ``error`` as the reason."""
        if any(type(seen) is type(error) for seen in self.errors):
            return  # every slot finds out: say it once
        log.error("%s", error)
        self.errors.insert(0, error)  # the reason the slots fail from now on
        for worker in self.workers:
            worker.commit_on_stop = False  # their transactional ids are fenced too
        self.stop_event.set()

    def _confirm_epoch(self) -> None:
        """Raise :class:`DriverFencedError` if a newer driver took over (see Worker.start)."""
        error = self._check_epoch()
        if error is not None:
            raise error

    def _check_epoch(self) -> StreamsError | None:
        """The fatal error if this driver lost its epoch or its rights; ``None`` otherwise."""
        if self.epoch is None:
            return None
        # A check can take minutes while the group coordinator's broker is away (five
        # attempts of up to 60 s): a slot starting meanwhile must not wait on it that long. Not checking is safe: the slots' transactional ids still fence
        # a driver that lost its epoch; the next check tells. A stop does not wait for it.
        deadline = time.monotonic() + EPOCH_CHECK_WAIT_S
        while not self._epoch_lock.acquire(timeout=0.2):
            if self.stop_event.is_set():
                return None
            if time.monotonic() >= deadline:
                log.warning("could not check the driver epoch: an earlier check has not "
                            "returned within %g s", EPOCH_CHECK_WAIT_S)  # fmt: skip
                return None
        try:
            self.epoch.check()
        except (DriverFencedError, AuthorizationError) as error:
            return error
        except Exception as error:  # a broker away for a while: the next check tells
            if not self.stop_event.is_set():
                log.warning("could not check the driver epoch: %s", error)
        finally:
            self._epoch_lock.release()
        return None

    @property
    def running(self) -> bool:
        """Whether some worker is still running."""
        return any(t.is_alive() for t in self._threads)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for every worker to stop; ``False`` if the timeout passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in self._threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        return not self.running

    def close(self, timeout_s: float = 60.0) -> None:
        """Ask every worker to commit and stop, and wait for them."""
        self.stop_event.set()
        self.wait(timeout_s)
        if self.epoch is not None:
            # Not waiting for the epoch watcher: a check it has under way (up to five attempts
            # of 60 s while the group coordinator's broker is away) needs the epoch's consumer
            # no more, and it starts none once stopping.
            self.epoch.close()

    def raise_if_failed(self) -> None:
        """Raise the first error a worker stopped with, as a
        :class:`~fluvial.errors.StreamsError`; return if none did."""
        if self.errors:
            error = self.errors[0]
            raise error if isinstance(error, StreamsError) else StreamsError(str(error))

    def metrics(self) -> list[WorkerMetrics]:
        """The counters of each worker slot, one :class:`WorkerMetrics` per slot."""
        return [w.metrics for w in self.workers]

    def prometheus_metrics(self) -> str:
        """The workers' metrics in Prometheus' text format (what ``--prometheus-port`` serves)."""
        return prometheus_text(self.config.application_id, self.metrics())

    # -- interactive queries ---------------------------------------------------------------

    @property
    def queries(self) -> LocalQueries | None:
        """Queries over every task of this process; ``None`` until :meth:`start` planned them."""
        if self._queries is None and self.task_ids:
            from fluvial.iq.service import WorkerTasks

            self._queries = LocalQueries(
                self.topology, self.config.application_id, self.task_ids,
                WorkerTasks(lambda: self.workers), exactly_once=self.config.exactly_once,
            )  # fmt: skip
        return self._queries

    def store(self, name: str, *, isolation: str | None = None) -> StoreView:
        """A read-only view of a running store (see :mod:`fluvial.iq.queries`).

        ``isolation`` is ``"committed"`` (the default under exactly-once: only state a
        committed transaction covers) or ``"latest"`` (the newest processed state).
        """
        return self._started_queries().store(name, isolation=isolation)

    def query_metadata_for_key(self, store: str, key: object) -> KeyQueryMetadata:
        """Which partition, task and slot own ``key`` of ``store``, and where its standbys are."""
        return self._started_queries().metadata_for_key(store, key)

    def _started_queries(self) -> LocalQueries:
        queries = self.queries
        if queries is None:
            raise StreamsError("the application is not started: call start() before querying")
        return queries

    def __enter__(self) -> Application:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
