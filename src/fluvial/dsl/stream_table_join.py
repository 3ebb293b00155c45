"""Stream-table and stream-global-table joins: the stream side triggers, the table is looked up.

Only stream records produce output; a table update on its own emits nothing, it only changes
what later stream records find. The lookup happens when the stream record is processed, so the
result depends on processing order, as in Kafka Streams. A versioned table is looked up as of
the stream record's timestamp instead, which makes the result independent of that order.

A task takes its records in timestamp order, so a stream record older than the table's earliest
update finds the table empty of it: with a backlog, every record of a stream that runs behind
its table misses. The join counts such misses per node (:data:`JOIN_MISSES_BEFORE_TABLE`) and
warns once a minute, naming the table, the gap and the ways out (docs/semantics.md, "Tables
and event time").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fluvial.dsl.getters import GetterSupplier
from fluvial.processor.metrics import JOIN_MISSES_BEFORE_TABLE, NULL_KEY, dropped
from fluvial.processor_api import Processor
from fluvial.records import Record

log = logging.getLogger(__name__)

Joiner = Callable[[Any, Any, Any], Any]  # (key, stream value, table value) -> result

WARN_INTERVAL_S = 60.0
# (application id, join node) -> when its last warning went out: one per join and minute,
# however many of its tasks miss.
_last_warning: dict[tuple[str, str], float] = {}


def value_joiner(joiner: Callable[..., Any], with_key: bool) -> Joiner:
    """Users pass ``joiner(left, right)`` or, with ``with_key=True``, ``joiner(key, left, right)``."""
    if with_key:
        return joiner
    return lambda key, left, right: joiner(left, right)


class StreamTableJoinProcessor(Processor[Any, Any]):
    """``KStream.join/left_join(table)`` and, with ``key_selector``, joins with a GlobalKTable.

    ``key_selector(key, value)`` gives the table key to look up (a GlobalKTable is keyed
    independently of the stream); without it the stream key is used. ``table_node`` (a
    KTable's node in the same task, not a GlobalKTable) lets the join tell misses that come
    from time apart; ``table_name`` names the table in its warning.
    """

    def __init__(
        self,
        getter: GetterSupplier,
        joiner: Joiner,
        left: bool,
        key_selector: Callable[[Any, Any], Any] | None = None,
        *,
        table_node: str | None = None,
        table_name: str = "",
    ) -> None:
        self.getter_supplier = getter
        self.joiner = joiner
        self.left = left
        self.key_selector = key_selector
        self.table_node = table_node
        self.table_name = table_name

    def init(self, context: Any) -> None:
        super().init(context)
        self.getter = self.getter_supplier.make()
        self.getter.init(context)
        self.versioned = self.getter_supplier.versioned
        self.table_topics: frozenset[str] | None = (
            context.sources_reaching(self.table_node) if self.table_node is not None else None
        )
        # What the miss warning asks of the node's context, beyond the processor API.
        self.node_name: str = context.node_name
        self.earliest_time: Callable[[frozenset[str]], int | None] = context.earliest_time
        self.misses_metric = f"{JOIN_MISSES_BEFORE_TABLE}:{self.node_name}"
        self.misses = 0

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
        if row is None:
            if self.table_topics is not None and lookup_key is not None:
                self._missed(record.timestamp_ms, self.table_topics)
            if not self.left:
                return
        table_value = None if row is None else row[0]
        result = self.joiner(record.key, record.value, table_value)
        self.context.forward(record.with_value(result))

    def _missed(self, timestamp_ms: int, table_topics: frozenset[str]) -> None:
        """No row for a record: count and explain it if the record is older than the table."""
        earliest = self.earliest_time(table_topics)
        if earliest is None or timestamp_ms >= earliest:
            return  # the key is not in the table (yet): no question of time
        self.misses += 1
        self.context.metrics.increment(self.misses_metric)
        node = self.node_name
        key = (self.context.application_id, node)
        now = time.monotonic()
        if now - _last_warning.get(key, -WARN_INTERVAL_S) < WARN_INTERVAL_S:
            return
        _last_warning[key] = now
        gap = _duration(earliest - timestamp_ms)
        log.warning(
            "stream-table join %s (task %s): a record at %d ms found no row; it is older than "
            "the table %s (%s), whose earliest update here is %s later (%d such misses in this task "
            "so far, counted as %s). Each record is looked up as of its own time, and this "
            "table's timestamps run ahead of the stream's. Ways out: give the table a "
            "timestamp extractor so its rows carry event time; join a GlobalKTable, which is "
            "read whole before the stream; or materialize the table as a versioned table "
            "(Materialized.as_versioned) with history that reaches back to the stream's times",
            node, self.context.task_id, timestamp_ms, ", ".join(sorted(table_topics)),
            self.table_name, gap, self.misses,
            JOIN_MISSES_BEFORE_TABLE,
        )  # fmt: skip


def _duration(ms: int) -> str:
    """``ms`` for a reader: "850 ms", "42.5 s", "20 min 3 s", "2 h 5 min"."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:g} s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"
