"""How a timestamped store lays out a value: the 8-byte big-endian timestamp, then the value.

Compiled with the engine (:data:`fluvial.compiled.MODULES`): an aggregation splits and joins
these bytes once per record, and a compiled caller reaches these functions without a Python
call. :mod:`fluvial.state.base` re-exports them, where interpreted code finds them.
"""

from __future__ import annotations

import struct
from typing import Final

#: The 8-byte BE timestamp that timestamped stores put before a value.
TIMESTAMP_PREFIX: Final = struct.Struct(">q")


def to_timestamped_bytes(value: bytes, timestamp_ms: int) -> bytes:
    """8-byte BE timestamp + value: how timestamped stores keep a value internally."""
    return TIMESTAMP_PREFIX.pack(timestamp_ms) + value


def from_timestamped_bytes(raw: bytes) -> tuple[bytes, int]:
    """Split timestamped bytes back into (value, timestamp)."""
    if len(raw) < 8:
        raise ValueError(f"timestamped value needs at least 8 bytes, got {len(raw)}")
    timestamp: int = TIMESTAMP_PREFIX.unpack_from(raw)[0]
    return raw[8:], timestamp
