"""``TopologyTestDriver``: runs a topology synchronously, with no broker and a mocked wall clock.

It drives the same :class:`~fluvial.processor.StreamTask` the Kafka runtime drives, one task per
sub-topology (partition 0), over the same store stack (RocksDB stores under their transactional
layer, whose buffered writes each commit applies, as the runtime does once Kafka committed). Records written to repartition topics (or to any topic the topology
reads) are fed straight back into the task reading them, after the record that caused them.

By default the driver commits after every input record, flushing record caches as Kafka Streams'
test driver does; pass ``auto_commit=False`` and call :meth:`commit` to see caching coalesce.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

from fluvial.config import StreamsConfig, to_millis
from fluvial.processor.collector import ConsumedRecord, Headers
from fluvial.processor.metrics import combine
from fluvial.processor.stores import StoreStack
from fluvial.processor.task import StreamTask
from fluvial.records import Record
from fluvial.serdes import Serde
from fluvial.state.base import StateStore, WindowStore
from fluvial.state.session import SessionStore
from fluvial.state.typed import (
    ReadOnlyKeyValueStore,
    TypedSessionStore,
    TypedVersionedKeyValueStore,
)
from fluvial.state.versioned import VersionedKeyValueStore
from fluvial.testing.topics import TestInputTopic, TestOutputTopic
from fluvial.testing.views import ReadOnlyWindowStore
from fluvial.topology.nodes import IN_MEMORY, ROCKSDB, StoreSpec
from fluvial.topology.topology import Topology

RawRecord = Record[bytes | None, bytes | None]


class TopologyTestDriver:
    """Deterministic, in-process execution of a topology for tests.

    ``store_type`` picks the default store backend (``"in_memory"`` or ``"rocksdb"``) for stores
    that do not choose one, so one test can run over both.
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig | None = None,
        *,
        store_type: str = IN_MEMORY,
        auto_commit: bool = True,
        initial_wall_clock_ms: int = 0,
    ) -> None:
        config = config or StreamsConfig(application_id="fluvial-test")
        # The driver never waits for data: every record is processed as soon as it is piped.
        self.config = config.with_overrides(max_task_idle_ms=0)
        self.topology = topology
        self.auto_commit = auto_commit
        self.wall_clock_ms = initial_wall_clock_ms
        self._tmp: Path | None = (
            Path(tempfile.mkdtemp(prefix="fluvial-ttd-")) if store_type == ROCKSDB else None
        )
        self._outputs: dict[str, deque[RawRecord]] = {}
        self._changelogs: dict[str, list[RawRecord]] = {}
        self._offsets: dict[str, int] = {}
        self._sent = 0  # records the tasks sent, so commit() knows when flushing settled
        self._task_by_topic: dict[str, StreamTask] = {}
        self.tasks: list[StreamTask] = []
        app = self.config.application_id
        self._changelog_topics = set()
        # GlobalKTables first: every stream task reads their stores.
        global_stores: dict[str, StateStore] = {}
        global_sub = topology.global_subtopology(app)
        if global_sub is not None:
            state_dir = None if self._tmp is None else self._tmp / "global"
            global_task = StreamTask(
                (-1, 0), global_sub, self.config, state_dir, self,
                default_store_type=store_type, wall_clock_ms=initial_wall_clock_ms,
                transactional=False,  # as in the runtime: rebuilt from its topic, never committed
            )  # fmt: skip
            self.tasks.append(global_task)
            for topic in global_sub.source_topics:
                self._task_by_topic[topic] = global_task
            global_task.initialize()
            global_stores = dict(global_task.stores)
        for sub in topology.subtopologies(app):
            state_dir = None if self._tmp is None else self._tmp / f"{sub.id}_0"
            task = StreamTask(
                (sub.id, 0), sub, self.config, state_dir, self, default_store_type=store_type,
                global_stores=global_stores, wall_clock_ms=initial_wall_clock_ms,
            )  # fmt: skip
            self.tasks.append(task)
            self._changelog_topics |= set(sub.changelog_topics().values())
            for topic in sub.source_topics:
                self._task_by_topic[topic] = task
        for task in self.tasks:
            task.initialize()
            task.punctuate_wall_clock(self.wall_clock_ms)
        self._closed = False

    # -- the collector the tasks write to ---------------------------------------------------
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """Where the driver's tasks produce (the driver is their record collector).

        Output records wait for ``create_output_topic`` readers; records of a topic the topology
        reads again (a repartition topic) are processed at once; changelog records are kept apart.
        """
        self._sent += 1
        offset = self._next_offset(topic)
        raw: RawRecord = Record(key, value, timestamp_ms, headers, topic, 0, offset)
        if topic in self._changelog_topics:
            self._changelogs.setdefault(topic, []).append(raw)
            return
        self._outputs.setdefault(topic, deque()).append(raw)
        reader = self._task_by_topic.get(topic)
        if reader is not None:  # repartition topics, and outputs the topology reads again
            reader.add_records(
                topic, 0, [ConsumedRecord(key, value, timestamp_ms, offset, headers)]
            )

    def _next_offset(self, topic: str) -> int:
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1
        return offset

    # -- topics -----------------------------------------------------------------------------
    def create_input_topic(
        self,
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        start_timestamp_ms: int = 0,
        auto_advance_ms: int = 0,
    ) -> TestInputTopic:
        """A topic to pipe records into; each piped record is processed to completion at once.

        ```python
        inp = driver.create_input_topic("pageview-events", serdes.string(), serdes.json())
        inp.pipe_input("k1", {"period": 40000, "category": "news"}, timestamp_ms=11)
        ```

        :param name: a topic the topology reads.
        :param key_serde: serializes the keys you pipe.
        :param value_serde: serializes the values you pipe.
        :param start_timestamp_ms: the topic's clock: the timestamp of records piped without one.
        :param auto_advance_ms: how far that clock moves after each such record.
        :returns: a :class:`TestInputTopic`.
        :raises ValueError: if the topology does not read ``name``.
        """
        if name not in self._task_by_topic:
            raise ValueError(
                f"the topology does not read topic {name!r}; it reads {sorted(self._task_by_topic)}"
            )
        return TestInputTopic(
            self, name, key_serde, value_serde, start_timestamp_ms, auto_advance_ms
        )

    def create_output_topic(
        self, name: str, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> TestOutputTopic:
        """A reader of what the topology wrote to a topic, in write order.

        :param name: the topic.
        :param key_serde: deserializes the keys.
        :param value_serde: deserializes the values.
        :returns: a :class:`TestOutputTopic`; records written before it was made can be read too.
        """
        return TestOutputTopic(
            self._outputs.setdefault(name, deque()), name, key_serde, value_serde
        )

    def _pipe(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers,
    ) -> None:
        self._check_open()
        offset = self._next_offset(topic)
        task = self._task_by_topic[topic]
        task.add_records(topic, 0, [ConsumedRecord(key, value, timestamp_ms, offset, headers)])
        self._run_until_idle()
        if self.auto_commit:
            self.commit()

    def _run_until_idle(self) -> None:
        """Process every buffered record, upstream sub-topologies first, until none is left."""
        progressed = True
        while progressed:
            progressed = False
            for task in self.tasks:
                # The runtime's path: batches, each record with its stream-time punctuations.
                while task.process_batch(1000, self.wall_clock_ms):
                    progressed = True

    # -- time and commits -------------------------------------------------------------------
    def advance_wall_clock_time(self, duration: int | timedelta) -> None:
        """Move the mocked wall clock and fire due wall-clock punctuators."""
        self._check_open()
        self.wall_clock_ms += to_millis(duration, "wall-clock advance")
        for task in self.tasks:
            task.punctuate_wall_clock(self.wall_clock_ms)
            self._run_until_idle()
        if self.auto_commit:
            self.commit()

    def commit(self) -> None:
        """Flush every task's caches and stores, as a commit would, and process what that emits.

        Flushing may feed records to sub-topologies already flushed (a foreign-key join's
        response comes back to the left side), so rounds repeat until a round sends nothing.
        """
        while True:
            sent_before = self._sent
            for task in self.tasks:  # upstream first: its flush may feed downstream tasks
                task.flush()
                self._run_until_idle()
            if self._sent == sent_before:
                break
        self._commit_stores()

    def _commit_stores(self) -> None:
        """What the runtime does once a commit's Kafka transaction succeeded: persistent stores
        apply their buffered writes together with the changelog offset they reach."""
        for task in self.tasks:
            changelogs = task.subtopology.changelog_topics()
            for name, stack in task.store_stacks.items():
                if stack.transactional is None:
                    continue
                topic = changelogs.get(name)
                offset = self._offsets.get(topic) if topic is not None else None
                stack.committed(offset if offset is not None else stack.store.committed_offset)

    # -- stores -----------------------------------------------------------------------------
    def _find_store(self, name: str) -> tuple[StoreSpec, StateStore, str | None]:
        for task in self.tasks:
            if name in task.stores:
                spec = next(s for s in task.subtopology.stores if s.name == name)
                topic = task.subtopology.changelog_topics().get(name)
                return spec, task.stores[name], topic
        raise KeyError(f"no state store named {name!r}; stores: {sorted(self.topology.stores)}")

    def get_key_value_store(self, name: str) -> ReadOnlyKeyValueStore[Any, Any]:
        """Read-only view of a key-value store, plain values (see ``get_with_timestamp``)."""
        spec, store, topic = self._find_store(name)
        if isinstance(store, WindowStore | SessionStore | VersionedKeyValueStore):
            raise TypeError(
                f"store {name!r} is a {type(store).__name__}: use get_window_store, "
                "get_session_store or get_versioned_key_value_store"
            )
        assert spec.key_serde is not None and spec.value_serde is not None
        inner: Any = store
        return ReadOnlyKeyValueStore(inner, spec.key_serde, spec.value_serde, topic)

    get_timestamped_key_value_store = get_key_value_store

    def get_window_store(self, name: str) -> ReadOnlyWindowStore:
        """A window store, for reading only, with ``Windowed`` keys and deserialized values.

        :param name: the store's name (``Materialized.as_``, or generated: see
            ``topology.describe()``).
        :returns: a :class:`ReadOnlyWindowStore`.
        :raises TypeError: if the store is not a window store.
        """
        spec, store, _ = self._find_store(name)
        if not isinstance(store, WindowStore):
            raise TypeError(f"store {name!r} is not a window store: use get_key_value_store")
        assert spec.key_serde is not None and spec.value_serde is not None
        return ReadOnlyWindowStore(store, spec.key_serde, spec.value_serde, spec.internal_format)

    def get_session_store(self, name: str) -> TypedSessionStore[Any, Any]:
        """Sessions of a session store as ``(Windowed key, value)``; for reading only."""
        spec, store, topic = self._find_store(name)
        if not isinstance(store, SessionStore):
            raise TypeError(f"store {name!r} is not a session store")
        assert spec.key_serde is not None and spec.value_serde is not None
        return TypedSessionStore(store, spec.key_serde, spec.value_serde, topic)

    def get_versioned_key_value_store(self, name: str) -> TypedVersionedKeyValueStore[Any, Any]:
        """A versioned store: ``get(key)`` and ``get(key, as_of_timestamp_ms)``; for reading only."""
        spec, store, topic = self._find_store(name)
        if not isinstance(store, VersionedKeyValueStore):
            raise TypeError(f"store {name!r} is not a versioned store")
        assert spec.key_serde is not None and spec.value_serde is not None
        return TypedVersionedKeyValueStore(store, spec.key_serde, spec.value_serde, topic)

    def get_state_store(self, name: str) -> StateStore:
        """The task's bytes-level store itself (for store-level assertions)."""
        return self._find_store(name)[1]

    def get_store_stack(self, name: str) -> StoreStack:
        """Every layer of a store as the task built it (bytes store, transactional layer, cache)."""
        for task in self.tasks:
            if name in task.store_stacks:
                return task.store_stacks[name]
        raise KeyError(f"no state store named {name!r}; stores: {sorted(self.topology.stores)}")

    def changelog(self, store_name: str) -> list[RawRecord]:
        """Every changelog record written for a store so far, as raw bytes."""
        _, store, topic = self._find_store(store_name)
        if topic is None:
            raise ValueError(f"store {store_name!r} has logging disabled: it has no changelog")
        return list(self._changelogs.get(topic, []))

    # -- metrics and lifecycle --------------------------------------------------------------
    def metrics(self) -> dict[str, int]:
        """Counters summed over all tasks: ``dropped-records``, ``records-processed``, ..."""
        return combine([t.metrics for t in self.tasks])

    def producer_topics(self) -> list[str]:
        """Topics written so far (outputs and internal topics, changelogs excluded)."""
        return sorted(t for t, q in self._outputs.items() if q or self._offsets.get(t))

    def close(self) -> None:
        """Commit (flushing caches) and close every task."""
        if self._closed:
            return
        try:
            self.commit()
        finally:
            self._closed = True
            for task in self.tasks:
                task.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the test driver is closed")

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            # Do not flush after a failure: the error is what the test wants to see.
            self._closed = True
            for task in self.tasks:
                task.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            return
        self.close()


__all__ = ["TopologyTestDriver"]
