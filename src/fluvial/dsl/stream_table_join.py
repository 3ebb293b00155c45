"""Stream-table and stream-global-table joins: the stream side triggers, the table is looked up.

Only stream records produce output; a table update on its own emits nothing, it only changes
what later stream records find. The lookup happens when the stream record is processed, so the
result depends on processing order, as in Kafka Streams. A versioned table is looked up as of
the stream record's timestamp instead, which makes the result independent of that order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fluvial.dsl.getters import GetterSupplier
from fluvial.processor.metrics import NULL_KEY, dropped
from fluvial.processor_api import Processor
from fluvial.records import Record

log = logging.getLogger(__name__)

Joiner = Callable[[Any, Any, Any], Any]  # (key, stream value, table value) -> result


def value_joiner(joiner: Callable[..., Any], with_key: bool) -> Joiner:
    """Users pass ``joiner(left, right)`` or, with ``with_key=True``, ``joiner(key, left, right)``."""
    if with_key:
        return joiner
    return lambda key, left, right: joiner(left, right)


class StreamTableJoinProcessor(Processor[Any, Any]):
    """``KStream.join/left_join(table)`` and, with ``key_selector``, joins with a GlobalKTable.

    ``key_selector(key, value)`` gives the table key to look up (a GlobalKTable is keyed
    independently of the stream); without it the stream key is used.
    """

    def __init__(
        self,
        getter: GetterSupplier,
        joiner: Joiner,
        left: bool,
        key_selector: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self.getter_supplier = getter
        self.joiner = joiner
        self.left = left
        self.key_selector = key_selector

    def init(self, context: Any) -> None:
        super().init(context)
        self.getter = self.getter_supplier.make()
        self.getter.init(context)
        self.versioned = self.getter_supplier.versioned

    def process(self, record: Record[Any, Any]) -> None:
        lookup_key = (
            record.key if self.key_selector is None else self.key_selector(record.key, record.value)
        )
        if lookup_key is None or record.value is None:
            if not self.left or record.value is None:
                # Nothing to look up with (inner join), or nothing to join (null value).
                log.debug("stream-table join skips record with null key or value")
                dropped(self.context, NULL_KEY)
                return
            row = None  # a left join keeps a keyless record, with no table side
        else:
            as_of = record.timestamp_ms if self.versioned else None
            row = self.getter.get(lookup_key, as_of)
        if row is None and not self.left:
            return
        table_value = None if row is None else row[0]
        result = self.joiner(record.key, record.value, table_value)
        self.context.forward(record.with_value(result))
