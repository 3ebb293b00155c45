"""The Processor API: the interfaces user processors implement and the context they are given.

This module holds only contracts. The task runtime (:mod:`fluvial.processor.task`) provides the
context; DSL operators are processors like any user's, so one mechanism runs everything.
It sits below both :mod:`fluvial.topology` (whose nodes hold processor suppliers) and
:mod:`fluvial.processor` (which runs them), so the topology never imports the task runtime.
Users import these names from :mod:`fluvial` or :mod:`fluvial.processor`.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). Users subclass :class:`Processor` (an interpreted subclass of the
compiled class is allowed); the engine calls their ``init``, ``process`` and ``close`` through
it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from fluvial.records import Record

KIn = TypeVar("KIn")
VIn = TypeVar("VIn")


class PunctuationType(enum.Enum):
    """What drives a punctuator: the task's stream time or the wall clock."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


Punctuator = Callable[[int], None]
"""Called with the current time (stream time or wall-clock time, by the schedule's type)."""


class Cancellable(Protocol):
    """Handle of a scheduled punctuation."""

    def cancel(self) -> None:
        """Stop the punctuation; it does not fire again."""


class ProcessorContext(Protocol):
    """What a processor may do and know while it runs inside a task.

    Record metadata (``topic``, ``partition``, ``offset``) describes the input record currently
    being processed and is ``None`` inside a punctuator, where no input record exists.
    """

    @property
    def application_id(self) -> str:
        """The application's ``application_id``."""

    @property
    def task_id(self) -> Any:
        """The task running this processor: its sub-topology and partition number."""

    @property
    def topic(self) -> str | None:
        """The topic of the input record being processed; None in a punctuator."""

    @property
    def partition(self) -> int | None:
        """The partition of the input record being processed; None in a punctuator."""

    @property
    def offset(self) -> int | None:
        """The offset of the input record being processed; None in a punctuator."""

    @property
    def timestamp_ms(self) -> int:
        """The timestamp of the record being processed (in a punctuator: the time it fired at)."""

    @property
    def metrics(self) -> Any:
        """The task's counters (:class:`~fluvial.processor.TaskMetrics`); a processor may add its
        own with ``metrics.increment("name")``."""

    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest record timestamp it has seen (-1 before any)."""

    def current_system_time_ms(self) -> int:
        """The wall-clock time the task works with, in milliseconds (the test driver's mock
        clock under ``TopologyTestDriver``)."""

    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None:
        """Send a record downstream, processed by the children before ``forward`` returns.

        :param record: the record to send; derive it from the input with
            ``record.with_value(...)`` or ``record.with_key_value(...)`` to keep its timestamp
            and headers.
        :param child_name: send to this child only (a name given when the topology was built);
            by default to every child.
        :raises TopologyError: if no child has that name.
        """

    def get_state_store(self, name: str) -> Any:
        """A state store connected to this processor.

        :param name: the store's name, as given to ``Stores`` and passed to
            ``KStream.process(supplier, name)`` or ``StreamsBuilder.add_state_store``.
        :returns: the store (key-value, window, session or versioned, with typed keys and
            values); writes go to its changelog and commit with the task.
        :raises TopologyError: if the processor is not connected to that store.
        """

    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, callback: Punctuator
    ) -> Cancellable:
        """Call ``callback(time_ms)`` every ``interval_ms``.

        ```python
        def init(self, context):
            super().init(context)
            self.counts = context.get_state_store("counts")
            context.schedule(60_000, PunctuationType.WALL_CLOCK_TIME, self.emit_all)
        ```

        :param interval_ms: the interval, in milliseconds.
        :param punctuation_type: ``PunctuationType.STREAM_TIME``: driven by record timestamps,
            on the grid of multiples of the interval, once the task has stream time;
            ``PunctuationType.WALL_CLOCK_TIME``: driven by the wall clock, first one interval
            from now.
        :param callback: ``callback(time_ms) -> None``, called with the stream or wall-clock
            time it fires at; it may forward records and use stores.
        :returns: a handle whose ``cancel()`` stops the punctuation.
        """

    def request_commit(self) -> None:
        """Ask the task to commit soon, without waiting for ``commit_interval_ms``."""


# Interpreted classes (built-in operators not compiled, and users') subclass it.
@mypyc_attr(allow_interpreted_subclasses=True)
class Processor(Generic[KIn, VIn]):
    """A node of the processor graph: it receives records one at a time and may forward others.

    Subclasses override :meth:`process`; :meth:`init` keeps the context in ``self.context``
    so that ``process`` can forward, read stores and schedule punctuators.
    """

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        """Called once before the first record; keep the context, open stores, schedule."""
        self.context = context

    def process(self, record: Record[KIn, VIn]) -> None:
        """Handle one record."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(record)")

    def close(self) -> None:
        """Called once when the task closes; release what ``init`` acquired."""


ProcessorSupplier = Callable[[], Processor[Any, Any]]
"""A zero-argument factory: every task gets its own processor instance."""
