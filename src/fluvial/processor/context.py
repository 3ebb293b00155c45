"""The context each live processor node gets: forwarding, stores, time and record metadata.

Each node has its own context object bound to it, so ``forward`` always knows which node is
forwarding, also when it runs later from a cache flush or a punctuator.

The context reads the task through :class:`NodeHost`, which the task implements, so this module
imports nothing of the task: the task builds its nodes and their contexts, never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fluvial.errors import TopologyError
from fluvial.processor_api import Cancellable, PunctuationType, Punctuator
from fluvial.records import Record


class NodeHost(Protocol):
    """What a node's context reads from and asks of the task that runs the node.

    :class:`~fluvial.processor.task.StreamTask` is the one implementation.
    """

    commit_requested: bool

    @property
    def guarded(self) -> bool: ...

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> Any: ...

    @property
    def current_topic(self) -> str | None: ...

    @property
    def current_partition(self) -> int | None: ...

    @property
    def current_offset(self) -> int | None: ...

    @property
    def current_timestamp_ms(self) -> int: ...

    @property
    def metrics(self) -> Any: ...

    @property
    def stream_time(self) -> int: ...

    @property
    def wall_clock_ms(self) -> int: ...

    def store_for_processor(self, name: str) -> Any: ...

    def sources_reaching(self, node_name: str) -> frozenset[str]: ...

    def stream_time_into(self, node_name: str) -> int: ...

    def earliest_time(self, topics: frozenset[str]) -> int | None: ...

    def schedule(
        self, node_name: str, interval_ms: int, type_: PunctuationType, callback: Punctuator
    ) -> Cancellable: ...


class LiveNode:
    """A node of a running task: its processor, its children and its entry.

    ``process`` is how records enter the node: its processor's ``process``, or the fused run
    of stateless operators that starts at it (see :mod:`fluvial.processor.fusion`).
    """

    def __init__(self, name: str, processor: Any, stores: list[str]) -> None:
        self.name = name
        # A Processor, or any object with init, process and close (the Processor API takes
        # duck-typed processors): typed Any, so the compiled engine does not check its class.
        self.processor = processor
        self.stores = stores
        self.children: list[LiveNode] = []
        self.process: Callable[[Record[Any, Any]], None] = processor.process
        # The fused step that ``process`` runs, for fused nodes: callers may skip ``process``.
        self.step: Callable[[Any, Any, Record[Any, Any]], None] | None = None


class NodeContext:
    """:class:`~fluvial.processor_api.ProcessorContext` for one node of one task."""

    def __init__(self, task: NodeHost, node: LiveNode) -> None:
        self._task = task
        self._node = node
        # The common case, a chain: forward is a direct call of the one child (of its fused
        # step, when it starts a run of stateless operators).
        self._only_child: Callable[[Record[Any, Any]], None] | None = None
        self._step: Callable[[Any, Any, Record[Any, Any]], None] | None = None
        if len(node.children) == 1:
            child = node.children[0]
            self._only_child, self._step = child.process, child.step

    @property
    def application_id(self) -> str:
        return self._task.application_id

    @property
    def task_id(self) -> Any:
        return self._task.task_id

    @property
    def node_name(self) -> str:
        return self._node.name

    @property
    def topic(self) -> str | None:
        return self._task.current_topic

    @property
    def partition(self) -> int | None:
        return self._task.current_partition

    @property
    def offset(self) -> int | None:
        return self._task.current_offset

    @property
    def timestamp_ms(self) -> int:
        return self._task.current_timestamp_ms

    @property
    def metrics(self) -> Any:
        return self._task.metrics

    def current_stream_time_ms(self) -> int:
        return self._task.stream_time

    def current_system_time_ms(self) -> int:
        return self._task.wall_clock_ms

    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None:
        """Send ``record`` to every child, or only to ``child_name``."""
        if child_name is None:
            step = self._step
            if step is not None:
                step(record.key, record.value, record)
                return
            only_child = self._only_child
            if only_child is not None:
                only_child(record)
                return
        else:
            for child in self._node.children:
                if child.name == child_name:
                    child.process(record)
                    return
            raise TopologyError(
                f"{self._node.name!r} has no child named {child_name!r}; its children are "
                f"{[c.name for c in self._node.children]}"
            )
        for child in self._node.children:
            child.process(record)

    def windowed_writer(self, key_serde: Any) -> Any:
        """For a DSL windowed aggregate: the direct write of its sink
        (:meth:`~fluvial.processor.nodes.SinkProcessor.windowed_writer`) when every result goes
        through ``to_stream`` alone to that one sink, and no exception handler has to tell the
        nodes apart. Else ``None``: the aggregate forwards its results."""
        if self._task.guarded:
            return None
        children = self._node.children
        if len(children) != 1 or not getattr(children[0].processor, "passes_new_values", False):
            return None
        after = children[0].children
        if len(after) != 1:
            return None
        writer = getattr(after[0].processor, "windowed_writer", None)
        return None if writer is None else writer(key_serde)

    def input_stream_time_ms(self) -> int:
        """For built-in operators: the stream time of the task's inputs whose records reach
        this node (a joined table's input does not), where a windowed operator resumes."""
        return self._task.stream_time_into(self._node.name)

    def sources_reaching(self, node_name: str) -> frozenset[str]:
        """For built-in operators: the task's source topics whose records reach ``node_name``."""
        return self._task.sources_reaching(node_name)

    def earliest_time(self, topics: frozenset[str]) -> int | None:
        """For built-in operators: the earliest timestamp the task processed from ``topics``,
        or else the earliest of their records waiting in the task (``None``: none known)."""
        return self._task.earliest_time(topics)

    def get_state_store(self, name: str) -> Any:
        if name not in self._node.stores:
            raise TopologyError(
                f"processor {self._node.name!r} asked for store {name!r} but is not connected to "
                f"it: pass the store name to process(...) or connect it when adding the processor"
            )
        return self._task.store_for_processor(name)

    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, callback: Punctuator
    ) -> Cancellable:
        return self._task.schedule(self._node.name, interval_ms, punctuation_type, callback)

    def request_commit(self) -> None:
        self._task.commit_requested = True
