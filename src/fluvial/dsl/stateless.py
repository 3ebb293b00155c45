"""Processors of the record-at-a-time KStream operations: filter, map, flat_map, peek, branch...

Each is a thin wrapper around a user function; they hold no state, so a task can run any number
of them without stores or changelogs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fluvial.processor.api import Processor
from fluvial.records import KeyValue, Record


def as_key_value(result: Any, operation: str) -> tuple[Any, Any]:
    """Accept a ``KeyValue`` or a plain 2-tuple from a user mapper."""
    if isinstance(result, KeyValue | tuple) and len(result) == 2:
        return result[0], result[1]
    raise TypeError(
        f"the function given to {operation} must return a KeyValue(key, value) or a "
        f"(key, value) tuple, got {result!r}"
    )


class FilterProcessor(Processor[Any, Any]):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self.predicate = predicate
        self.negate = negate

    def process(self, record: Record[Any, Any]) -> None:
        if bool(self.predicate(record.key, record.value)) != self.negate:
            self.context.forward(record)


class MapProcessor(Processor[Any, Any]):
    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self.mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        key, value = as_key_value(self.mapper(record.key, record.value), "map")
        self.context.forward(record.with_key_value(key, value))


class MapValuesProcessor(Processor[Any, Any]):
    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def process(self, record: Record[Any, Any]) -> None:
        value = (
            self.mapper(record.key, record.value) if self.with_key else self.mapper(record.value)
        )
        self.context.forward(record.with_value(value))


class FlatMapProcessor(Processor[Any, Any]):
    def __init__(self, mapper: Callable[[Any, Any], Iterable[Any]]) -> None:
        self.mapper = mapper

    def process(self, record: Record[Any, Any]) -> None:
        for result in self.mapper(record.key, record.value):
            key, value = as_key_value(result, "flat_map")
            self.context.forward(record.with_key_value(key, value))


class FlatMapValuesProcessor(Processor[Any, Any]):
    def __init__(self, mapper: Callable[..., Iterable[Any]], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def process(self, record: Record[Any, Any]) -> None:
        values = (
            self.mapper(record.key, record.value) if self.with_key else self.mapper(record.value)
        )
        for value in values:
            self.context.forward(record.with_value(value))


class SelectKeyProcessor(Processor[Any, Any]):
    def __init__(self, selector: Callable[[Any, Any], Any]) -> None:
        self.selector = selector

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(
            record.with_key_value(self.selector(record.key, record.value), record.value)
        )


class PeekProcessor(Processor[Any, Any]):
    """Calls an action and forwards the record unchanged (``peek``) or ends the path (``foreach``)."""

    def __init__(self, action: Callable[[Any, Any], None], forward: bool) -> None:
        self.action = action
        self.forward = forward

    def process(self, record: Record[Any, Any]) -> None:
        self.action(record.key, record.value)
        if self.forward:
            self.context.forward(record)


class PassThroughProcessor(Processor[Any, Any]):
    """Forwards every record: merge points and branch heads."""

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record)


class BranchProcessor(Processor[Any, Any]):
    """Sends each record to the first branch whose predicate holds, else to the default branch."""

    def __init__(
        self, branches: list[tuple[Callable[[Any, Any], bool], str]], default: str | None
    ) -> None:
        self.branches = branches
        self.default = default

    def process(self, record: Record[Any, Any]) -> None:
        for predicate, child in self.branches:
            if predicate(record.key, record.value):
                self.context.forward(record, child)
                return
        if self.default is not None:
            self.context.forward(record, self.default)
