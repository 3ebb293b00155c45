"""``Change``: how a table update travels downstream, as the new value and the one it replaces.

Table aggregations need both halves: they subtract the old value and add the new one, which is
what keeps a key that moves between groups counted exactly once.
"""

from __future__ import annotations

import struct
from typing import Any, Generic, TypeVar

from fluvial.serdes import Serde

V = TypeVar("V")

_LEN = struct.Struct(">i")


class Change(Generic[V]):
    """``(new_value, old_value)``; ``None`` on either side means "no value" (a tombstone).

    Immutable (both halves are read-only), equal by both halves.
    """

    # A plain class with read-only properties, not a frozen dataclass: one is made per
    # revision, and the compiled build makes this a native class with two typed slots.
    _new_value: V | None
    _old_value: V | None

    def __init__(self, new_value: V | None, old_value: V | None) -> None:
        self._new_value = new_value
        self._old_value = old_value

    @property
    def new_value(self) -> V | None:
        """The value after the change (``None``: the row is gone)."""
        return self._new_value

    @property
    def old_value(self) -> V | None:
        """The value before the change (``None``: there was none, or it is not sent)."""
        return self._old_value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Change):
            return NotImplemented
        return self._new_value == other._new_value and self._old_value == other._old_value

    def __hash__(self) -> int:
        return hash((self._new_value, self._old_value))

    def __reduce__(self) -> tuple[Any, tuple[Any, Any]]:
        # Pickled by its constructor's arguments: the compiled class has no other way back.
        return Change, (self._new_value, self._old_value)

    def __repr__(self) -> str:
        return f"Change(new_value={self._new_value!r}, old_value={self._old_value!r})"


def change_serde(inner: Serde[Any]) -> Serde[Change[Any]]:
    """Both halves of a change, for repartition topics and suppression buffers.

    Layout: 4-byte BE length of the new value (-1 for none), its bytes, then the same for the old
    value. Only fluvial reads these internal topics, so the layout is fluvial's own.
    """

    def part(data: bytes | None) -> bytes:
        return _LEN.pack(-1) if data is None else _LEN.pack(len(data)) + data

    def ser(change: Change[Any]) -> bytes:
        return part(inner.serialize(None, change.new_value)) + part(
            inner.serialize(None, change.old_value)
        )

    def de(data: bytes) -> Change[Any]:
        values: list[Any] = []
        pos = 0
        for _ in range(2):
            (length,) = _LEN.unpack_from(data, pos)
            pos += 4
            if length < 0:
                values.append(None)
            else:
                values.append(inner.deserialize(None, data[pos : pos + length]))
                pos += length
        return Change(values[0], values[1])

    return Serde.of(ser, de, name=f"change({inner.name})")
