"""Fused stateless chains: a run of stateless operators costs one pass per record, not one
forward per operator.

A stateless operator (``filter``, ``map``, ``map_values``, ``select_key``, ``flat_map``,
``peek``, merge points, ``to_stream``, the null-key filter before a repartition topic) and a
sink are :class:`FusableProcessor` s: each describes its work as a *step*, a function of
``(key, value, origin)`` that does the operator's work and calls the step after it. When a task
builds its graph, :func:`link` chains the steps of consecutive fusable nodes into one function,
so a record crosses the whole run with its key and value as plain arguments: no
:class:`~fluvial.records.Record` per node, no forward through a context. A record is made
again only where the run hands over to a node that takes records (a stateful operator, a user's
processor), from the key and value the run made and the rest of ``origin``, the record that
entered the run: timestamp, headers and source position never change in a stateless operator.

The steps call each other exactly as the nodes forward, record by record and child by child,
so every record comes out when and in the order node-by-node forwarding would emit it.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls user code only through the steps and ``process`` methods it
links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mypy_extensions import mypyc_attr

from fluvial.processor.context import LiveNode
from fluvial.processor_api import Processor, ProcessorContext
from fluvial.records import Record

Step = Callable[[Any, Any, Record[Any, Any]], None]
"""``(key, value, origin)``: one operator's work on one record, then the next step's."""


# Interpreted classes (built-in operators not compiled, and users') subclass it.
@mypyc_attr(allow_interpreted_subclasses=True)
class FusableProcessor(Processor[Any, Any]):
    """A stateless operator whose work is a step; :meth:`process` runs that same step.

    Subclasses implement :meth:`fuse` only. Whether a record reaches the operator through a
    fused run or through ``process`` (a forward from a user's processor, say), one function
    does the work.
    """

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self._step = self.fuse(handover(context.forward))

    def fuse(self, downstream: Step) -> Step:
        """This operator's step, calling ``downstream`` with whatever it forwards."""
        raise NotImplementedError(f"{type(self).__name__} must implement fuse(downstream)")

    def process(self, record: Record[Any, Any]) -> None:
        self._step(record.key, record.value, record)


def handover(process: Callable[[Record[Any, Any]], None]) -> Step:
    """The step that ends a run: ``process`` gets a record again.

    ``origin`` itself when the run left key and value as they came (a filter), so a run that
    only drops records makes no record at all.
    """

    def step(key: Any, value: Any, origin: Record[Any, Any]) -> None:
        if key is origin.key and value is origin.value:
            process(origin)
        else:
            process(Record(key, value, origin.timestamp_ms, origin.headers, origin.topic,
                           origin.partition, origin.offset))  # fmt: skip

    return step


def _nowhere(key: Any, value: Any, origin: Record[Any, Any]) -> None:
    """The step after a node without children (``foreach``): nothing to do."""


def _fan_out(steps: list[Step]) -> Step:
    """Every child's step in the order of the node's children, as ``forward`` visits them."""

    def step(key: Any, value: Any, origin: Record[Any, Any]) -> None:
        for child in steps:
            child(key, value, origin)

    return step


def link(
    nodes: Iterable[LiveNode],
    guard: Callable[[str, Callable[..., None]], Callable[..., None]] | None = None,
) -> dict[str, Step]:
    """Give every node its entry (``LiveNode.process``) and return each node's step.

    A fusable node's entry runs its fused step; any other node's entry is its processor's
    ``process``. A node's step is its own when it is fusable, else the hand-over to it, so a
    parent's run ends exactly where a node that takes records begins. Call it after every
    processor's ``init``.

    ``guard(node_name, work)``, when given, wraps each node's own work (its step or its
    ``process``), so an exception is caught at the node that raised it: the processing
    exception handler's hook. Without it nothing is wrapped and a run costs what it did.
    """
    steps: dict[str, Step] = {}
    fused: set[str] = set()

    def step_of(node: LiveNode) -> Step:
        found = steps.get(node.name)
        if found is not None:
            return found
        processor = node.processor
        if isinstance(processor, FusableProcessor):
            targets = [step_of(child) for child in node.children]
            downstream = (
                _nowhere if not targets else targets[0] if len(targets) == 1 else _fan_out(targets)
            )
            found = processor.fuse(downstream)
            if guard is not None:
                found = guard(node.name, found)
            fused.add(node.name)
        else:
            if guard is not None:
                node.process = guard(node.name, processor.process)
            found = handover(node.process)
        steps[node.name] = found
        return found

    for node in nodes:
        step = step_of(node)
        if node.name in fused:
            node.process, node.step = _entry(step), step
    return steps


def _entry(step: Step) -> Callable[[Record[Any, Any]], None]:
    def process(record: Record[Any, Any]) -> None:
        step(record.key, record.value, record)

    return process
