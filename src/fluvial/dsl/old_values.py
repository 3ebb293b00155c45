"""Which tables send old values downstream, decided as Kafka Streams decides it.

Kafka Streams carries the old value only where an operator downstream needs it ("sending old
values": ``group_by``, the outer side of a table-table join, foreign-key joins, ``suppress``) or
where the table can supply it for free (a queryable store, an aggregation). fluvial's revisions
carry it wherever it is at hand, with one exception for speed: the record cache of a per-key or
per-time-window aggregation reads and passes old values at a flush only when its table sends
them (see :class:`fluvial.dsl.forwarding.TableForwarder`), so ``aggregate().to_stream()`` reads
no old value.

One observable behaviour depends on it: a ``filter`` that sends old values drops a revision whose
new and old values both fail the filter, while one that does not send them forwards it as a
deletion (``key -> None``), even for a key the filtered table never held. fluvial's filter and
the caches ask these objects at run time, once the whole topology is built, so the filter
forwards exactly the deletions Kafka Streams forwards.

Each table has one: :meth:`OldValues.enable` is Kafka Streams' ``enableSendingOldValues``;
``force`` says whether the table may be materialized to supply them.
"""

from __future__ import annotations


class OldValues:
    """A table that can always send old values: aggregations, table-table joins."""

    def __init__(self, *parents: OldValues) -> None:
        self.parents = parents
        self.enabled = False

    def enable(self, force: bool) -> bool:
        for parent in self.parents:  # a join reads its inputs' old values to revise its rows
            parent.enable(True)
        self.enabled = True
        return True

    def getter_requested(self) -> None:
        """A join looks rows of this table up (a source table is then materialized)."""


class SourceOldValues(OldValues):
    """``builder.table``, ``to_table`` and foreign-key join results: a store that is queryable
    (named by the user) or needed by a join supplies old values; otherwise only when forced."""

    def __init__(self, queryable: bool) -> None:
        super().__init__()
        self.materialized = queryable

    def enable(self, force: bool) -> bool:
        if not force and not self.materialized:
            return False
        self.materialized = self.enabled = True
        return True

    def getter_requested(self) -> None:
        self.materialized = True


class DerivedOldValues(OldValues):
    """``filter`` and ``map_values``: a queryable result supplies old values itself; otherwise
    they come from the parent. A filter also asks its parent at once, without forcing it."""

    def __init__(self, parent: OldValues, queryable: bool, ask_parent: bool) -> None:
        super().__init__()
        self.parent = parent
        self.queryable = queryable
        if ask_parent:
            self.enabled = parent.enable(False)

    def enable(self, force: bool) -> bool:
        if self.queryable:
            self.enabled = True
            return True
        if self.parent.enable(force):
            self.enabled = True
        return self.enabled

    def getter_requested(self) -> None:
        if not self.queryable:
            self.parent.getter_requested()


class PassThroughOldValues(OldValues):
    """``suppress``: whatever its parent sends."""

    def __init__(self, parent: OldValues) -> None:
        super().__init__()
        self.parent = parent

    def enable(self, force: bool) -> bool:
        self.enabled = self.parent.enable(force)
        return self.enabled

    def getter_requested(self) -> None:
        self.parent.getter_requested()
