"""The Processor API: the interfaces user processors implement and the context they are given.

This module holds only contracts. The task runtime (:mod:`fluvial.processor.task`) provides the
context; DSL operators are processors like any user's, so one mechanism runs everything.
It sits below both :mod:`fluvial.topology` (whose nodes hold processor suppliers) and
:mod:`fluvial.processor` (which runs them), so the topology never imports the task runtime.
Users import these names from :mod:`fluvial` or :mod:`fluvial.processor`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

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

    def cancel(self) -> None: ...


class ProcessorContext(Protocol):
    """What a processor may do and know while it runs inside a task.

    Record metadata (``topic``, ``partition``, ``offset``) describes the input record currently
    being processed and is ``None`` inside a punctuator, where no input record exists.
    """

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> Any: ...

    @property
    def topic(self) -> str | None: ...

    @property
    def partition(self) -> int | None: ...

    @property
    def offset(self) -> int | None: ...

    @property
    def timestamp_ms(self) -> int: ...

    @property
    def metrics(self) -> Any: ...

    def current_stream_time_ms(self) -> int: ...

    def current_system_time_ms(self) -> int: ...

    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None: ...

    def get_state_store(self, name: str) -> Any: ...

    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, callback: Punctuator
    ) -> Cancellable: ...

    def request_commit(self) -> None: ...


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
