"""Table-table joins (inner, left, outer): a change on either side revises the joined row.

Each side's processor receives ``Change(new, old)`` from its table and looks the key up in the
other table. It forwards ``Change(join(new, other), join(old, other))``, so downstream operators
get correct old values too. The result's timestamp is the later of the two rows' timestamps.

When to forward follows Kafka Streams: whenever the other side has a row, except where the join
ignores this side's rows without one on the other side (an inner join; the right side of a left
join) and, for the rest, unless both the new and the old value are absent. So a deletion of a key
that this side never had still revises a row that exists on the other side (to a tombstone, or
to the other side's row alone).
"""

from __future__ import annotations

from typing import Any

from fluvial.dsl.change import Change
from fluvial.dsl.getters import GetterSupplier, Row
from fluvial.dsl.stream_table_join import Joiner
from fluvial.processor_api import Processor
from fluvial.records import Record

INNER, LEFT, OUTER = "inner", "left", "outer"


def join_rows(kind: str, joiner: Joiner, key: Any, left: Any, right: Any) -> Any:
    """The joined value of one key, or ``None`` when the join has no row for it."""
    if kind == INNER and (left is None or right is None):
        return None
    if kind == LEFT and left is None:
        return None
    if left is None and right is None:
        return None
    return joiner(key, left, right)


class TableTableJoinProcessor(Processor[Any, Any]):
    def __init__(self, kind: str, joiner: Joiner, left_side: bool, other: GetterSupplier) -> None:
        self.kind = kind
        self.joiner = joiner
        self.left_side = left_side
        self.other_supplier = other

    def init(self, context: Any) -> None:
        super().init(context)
        self.other = self.other_supplier.make()
        self.other.init(context)

    def _join(self, key: Any, this: Any, other: Any) -> Any:
        left, right = (this, other) if self.left_side else (other, this)
        return join_rows(self.kind, self.joiner, key, left, right)

    def _joins_without_other(self, change: Change[Any]) -> bool:
        """Whether a change of this side alone may revise the join's result."""
        keeps_this_side_alone = self.kind == OUTER or (self.kind == LEFT and self.left_side)
        return keeps_this_side_alone and not (change.new_value is None and change.old_value is None)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            return
        change: Change[Any] = record.value
        row = self.other.get(record.key)
        other = None if row is None else row[0]
        if other is None and not self._joins_without_other(change):
            return
        new = self._join(record.key, change.new_value, other)
        old = self._join(record.key, change.old_value, other)
        ts = record.timestamp_ms if row is None else max(record.timestamp_ms, row[1])
        self.context.forward(Record(record.key, Change(new, old), ts, list(record.headers)))


class JoinValueGetter:
    """Looks a key up in both joined tables and joins the rows, for joins on the result."""

    def __init__(self, kind: str, joiner: Joiner, left: Any, right: Any) -> None:
        self.kind = kind
        self.joiner = joiner
        self.left = left
        self.right = right

    def init(self, context: Any) -> None:
        self.left.init(context)
        self.right.init(context)

    def get(self, key: Any, as_of_ms: int | None = None) -> Row | None:
        left = self.left.get(key, as_of_ms)
        right = self.right.get(key, as_of_ms)
        value = join_rows(
            self.kind,
            self.joiner,
            key,
            None if left is None else left[0],
            None if right is None else right[0],
        )
        if value is None:
            return None
        timestamps = [row[1] for row in (left, right) if row is not None]
        return value, max(timestamps)


def join_getter(
    kind: str, joiner: Joiner, left: GetterSupplier, right: GetterSupplier
) -> GetterSupplier:
    return GetterSupplier(
        lambda: JoinValueGetter(kind, joiner, left.make(), right.make()),
        tuple(dict.fromkeys(left.stores + right.stores)),
    )
