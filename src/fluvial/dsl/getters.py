"""Value getters: how a join reads the current row of a table it does not own.

A table-side lookup must see the table as the joining task sees it right now. Tables backed by a
store read it directly; a ``filter`` or ``map_values`` of such a table applies its function on
the fly to the parent's row, so it needs no store of its own. Tables with no way to look a key up
(for example after ``suppress``) are materialized before a join (``KTable._value_getter``).

A getter answers ``(value, timestamp)`` or ``None``. ``as_of_ms`` asks a versioned table for the
row valid at that time; tables without history answer with their latest row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fluvial.serdes import Serde
from fluvial.state.versioned import VersionedKeyValueStore

Row = tuple[Any, int]  # (value, timestamp_ms)


class ValueGetter(Protocol):
    def init(self, context: Any) -> None: ...

    def get(self, key: Any, as_of_ms: int | None = None) -> Row | None: ...


@dataclass(frozen=True)
class GetterSupplier:
    """Makes one getter per processor; ``stores`` must be connected to that processor."""

    make: Callable[[], ValueGetter]
    stores: tuple[str, ...]
    versioned: bool = False


class StoreValueGetter:
    """Reads a timestamped key-value store, or a versioned one (then ``as_of_ms`` counts)."""

    def __init__(self, store_name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde

    def init(self, context: Any) -> None:
        self.store = context.get_state_store(self.store_name)
        self.versioned = isinstance(self.store, VersionedKeyValueStore)

    def get(self, key: Any, as_of_ms: int | None = None) -> Row | None:
        if key is None:
            return None
        key_bytes = self.key_serde.serialize(None, key)
        assert key_bytes is not None
        if self.versioned:
            version = self.store.get(key_bytes, as_of_ms)
            if version is None:
                return None
            return self.value_serde.deserialize(None, version.value), version.timestamp_ms
        found = self.store.get(key_bytes)
        if found is None:
            return None
        return self.value_serde.deserialize(None, found[0]), found[1]


def store_getter(
    store_name: str, key_serde: Serde[Any], value_serde: Serde[Any], versioned: bool = False
) -> GetterSupplier:
    return GetterSupplier(
        lambda: StoreValueGetter(store_name, key_serde, value_serde), (store_name,), versioned
    )


class TransformValueGetter:
    """The parent's row passed through ``transform(key, value)``; ``None`` hides the row."""

    def __init__(self, parent: ValueGetter, transform: Callable[[Any, Any], Any]) -> None:
        self.parent = parent
        self.transform = transform

    def init(self, context: Any) -> None:
        self.parent.init(context)

    def get(self, key: Any, as_of_ms: int | None = None) -> Row | None:
        row = self.parent.get(key, as_of_ms)
        if row is None:
            return None
        value = self.transform(key, row[0])
        return None if value is None else (value, row[1])


def transform_getter(
    parent: GetterSupplier | None, transform: Callable[[Any, Any], Any]
) -> GetterSupplier | None:
    """A getter for a table derived row by row from ``parent`` (``None`` if parent has none)."""
    if parent is None:
        return None
    return GetterSupplier(
        lambda: TransformValueGetter(parent.make(), transform), parent.stores, parent.versioned
    )
