"""``GlobalKTable``: a table every instance holds in full, for joins keyed by anything."""

from __future__ import annotations

from typing import Any

from fluvial.dsl.getters import GetterSupplier
from fluvial.serdes import Serde


class GlobalKTable:
    """A whole topic as a table in every task. Made by ``StreamsBuilder.global_table``.

    Its store is filled by the global sub-topology (one task over all of the topic's
    partitions); stream tasks only read it, in ``stream.join(global_table, ...)``.
    """

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        getter: GetterSupplier,
    ) -> None:
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._getter = getter

    @property
    def queryable_store_name(self) -> str:
        """The name of the store that holds the table, for interactive queries."""
        return self.store_name

    def __repr__(self) -> str:
        return f"GlobalKTable({self.store_name})"
