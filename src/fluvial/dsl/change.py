"""``Change``: how a table update travels downstream, as the new value and the one it replaces.

Table aggregations need both halves: they subtract the old value and add the new one, which is
what keeps a key that moves between groups counted exactly once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from types import MemberDescriptorType
from typing import Any, Generic, TypeVar

from fluvial.serdes import Serde

V = TypeVar("V")

_LEN = struct.Struct(">i")


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The store of slot ``name`` of ``cls``, bypassing a frozen class's ``__setattr__``
    (which costs about half again a plain slot store)."""
    descriptor = vars(cls).get(name)
    if not isinstance(descriptor, MemberDescriptorType):
        raise TypeError(f"{cls.__name__}.{name} is not a slot; declare the class with slots=True")
    return descriptor.__set__


# One is made per revision: it sets its slots directly (see _slot_setter).
@dataclass(frozen=True, slots=True, init=False)
class Change(Generic[V]):
    """``(new_value, old_value)``; ``None`` on either side means "no value" (a tombstone)."""

    new_value: V | None
    old_value: V | None

    def __init__(self, new_value: V | None, old_value: V | None) -> None:
        _set_new(self, new_value)
        _set_old(self, old_value)


_set_new, _set_old = _slot_setter(Change, "new_value"), _slot_setter(Change, "old_value")


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
