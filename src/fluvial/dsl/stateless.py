"""Processors of the record-at-a-time KStream operations: filter, map, flat_map, peek, branch...

Each is a thin wrapper around a user function; they hold no state, so a task can run any number
of them without stores or changelogs. All but ``branch`` are fusable: a task runs a chain of them
as one step per record (see :mod:`fluvial.processor.fusion`).

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls user code in the operators' functions (predicates, mappers,
actions), once per record as in Kafka Streams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fluvial.processor.fusion import FusableProcessor, Step
from fluvial.processor_api import Processor
from fluvial.records import KeyValue, Record


def as_key_value(result: Any, operation: str) -> tuple[Any, Any]:
    """Accept a ``KeyValue`` or a plain 2-tuple from a user mapper."""
    if isinstance(result, KeyValue | tuple) and len(result) == 2:
        return result[0], result[1]
    raise TypeError(
        f"the function given to {operation} must return a KeyValue(key, value) or a "
        f"(key, value) tuple, got {result!r}"
    )


class FilterProcessor(FusableProcessor):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self.predicate = predicate
        self.negate = negate

    def fuse(self, downstream: Step) -> Step:
        predicate = self.predicate
        if self.negate:

            def filter_not(key: Any, value: Any, origin: Record[Any, Any]) -> None:
                if not predicate(key, value):
                    downstream(key, value, origin)

            return filter_not

        def filter_(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            if predicate(key, value):
                downstream(key, value, origin)

        return filter_


class MapProcessor(FusableProcessor):
    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self.mapper = mapper

    def fuse(self, downstream: Step) -> Step:
        mapper = self.mapper

        def map_(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            result = mapper(key, value)
            # The common cases inline; as_key_value checks (and explains) everything else.
            kind = type(result)
            if kind is not KeyValue and (kind is not tuple or len(result) != 2):
                result = as_key_value(result, "map")
            downstream(result[0], result[1], origin)

        return map_


class MapValuesProcessor(FusableProcessor):
    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def fuse(self, downstream: Step) -> Step:
        mapper = self.mapper
        if self.with_key:

            def map_values_with_key(key: Any, value: Any, origin: Record[Any, Any]) -> None:
                downstream(key, mapper(key, value), origin)

            return map_values_with_key

        def map_values(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            downstream(key, mapper(value), origin)

        return map_values


class FlatMapProcessor(FusableProcessor):
    def __init__(self, mapper: Callable[[Any, Any], Iterable[Any]]) -> None:
        self.mapper = mapper

    def fuse(self, downstream: Step) -> Step:
        mapper = self.mapper

        def flat_map(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            for result in mapper(key, value):
                new_key, new_value = as_key_value(result, "flat_map")
                downstream(new_key, new_value, origin)

        return flat_map


class FlatMapValuesProcessor(FusableProcessor):
    def __init__(self, mapper: Callable[..., Iterable[Any]], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def fuse(self, downstream: Step) -> Step:
        mapper, with_key = self.mapper, self.with_key

        def flat_map_values(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            for new_value in mapper(key, value) if with_key else mapper(value):
                downstream(key, new_value, origin)

        return flat_map_values


class SelectKeyProcessor(FusableProcessor):
    def __init__(self, selector: Callable[[Any, Any], Any]) -> None:
        self.selector = selector

    def fuse(self, downstream: Step) -> Step:
        selector = self.selector

        def select_key(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            downstream(selector(key, value), value, origin)

        return select_key


class PeekProcessor(FusableProcessor):
    """Calls an action and forwards the record unchanged (``peek``) or ends the path (``foreach``)."""

    def __init__(self, action: Callable[[Any, Any], None], forward: bool) -> None:
        self.action = action
        self.forward = forward

    def fuse(self, downstream: Step) -> Step:
        action, forward = self.action, self.forward

        def peek(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            action(key, value)
            if forward:
                downstream(key, value, origin)

        return peek


class PassThroughProcessor(FusableProcessor):
    """Forwards every record: merge points and branch heads."""

    def fuse(self, downstream: Step) -> Step:
        return downstream


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


class RepartitionFilterProcessor(FusableProcessor):
    """Before a repartition topic: drops null keys, which have no partition by key, unless a
    join downstream emits records with null keys (those go to a partition the producer picks).

    ``policy`` is the topology's :class:`fluvial.dsl.graph.NullKeyPolicy` for this filter, whose
    ``keep_null_keys`` the DSL settles once the whole topology is built."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def fuse(self, downstream: Step) -> Step:
        if self.policy.keep_null_keys:
            return downstream

        def drop_null_keys(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            if key is not None:
                downstream(key, value, origin)

        return drop_null_keys
